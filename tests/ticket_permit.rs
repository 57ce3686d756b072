mod support;

// Tickets of semaphore permits against real `redis-server` processes: a
// permit let go of with `into_ticket`, passed through a file, and adopted by
// another process (after its holder exited, or was SIGKILLed); two adopters of
// one ticket; an expired or released ticket; extend and release by ticket;
// several permits as one ticket; liveness; Redisson acquirers replayed beside.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redlease::{ClientTag, Error, LockClient, LockFormat, Release, Ticket};
use support::alone::{finish, spawn_self};
use support::redisson::semaphore::{RedissonSemaphore, now_ms};
use support::{RedisServer, TempDir, eventually, stress_factor};

/// Set in a re-executed copy of this test binary: `url file mode` of a holder
/// process, `mode` being `exit` (let go with `into_ticket`, then exit) or
/// `hold` (keep the guard, renewing, until killed).
const HOLDER_ENV: &str = "REDLEASE_TEST_PERMIT_TICKET_HOLDER";

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("sem:")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The permits held: id (hex) → expiry (unix ms).
fn held(server: &RedisServer, key: &str) -> BTreeMap<String, u64> {
    let timeouts = format!("{{{key}}}:timeout");
    let members: Vec<(Vec<u8>, u64)> = server.query(
        redis::cmd("ZRANGE")
            .arg(&timeouts)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    );
    members
        .into_iter()
        .map(|(id, score)| (hex(&id), score))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The free-permit count.
fn free(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("GET").arg(key))
}

/// The holder process of [`HOLDER_ENV`]: takes one of 2 permits of `jobs` and
/// writes its printed ticket to `file` (through a temporary name).
fn holder(job: &str) {
    let mut parts = job.split(' ');
    let (url, file, mode) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let client = LockClient::builder(url)
        .key_prefix("sem:")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let jobs = client.semaphore("jobs").unwrap();
    jobs.ensure_permits(2).unwrap();
    let permit = jobs.acquire().unwrap();
    let write = |ticket: &Ticket| {
        let tmp = format!("{file}.tmp");
        std::fs::write(&tmp, format!("{ticket}\n")).unwrap();
        std::fs::rename(tmp, file).unwrap();
    };
    if mode == "exit" {
        write(&permit.into_ticket().unwrap());
        return;
    }
    write(&permit.ticket().unwrap());
    // Renewing until killed: the parent's SIGKILL ends this process.
    thread::sleep(Duration::from_secs(60));
}

/// Runs a holder process in `mode`; returns it and the ticket it wrote.
fn spawn_holder(
    test: &str,
    server: &RedisServer,
    dir: &TempDir,
    mode: &str,
) -> (std::process::Child, Ticket) {
    let file = dir.0.join("ticket");
    let job = format!("{} {} {mode}", server.url(), file.display());
    let child = spawn_self(test, &[(HOLDER_ENV, job)]);
    let mut ticket = None;
    assert!(eventually(Duration::from_secs(20), || {
        ticket = std::fs::read_to_string(&file)
            .ok()
            .map(|t| t.parse().unwrap());
        ticket.is_some()
    }));
    (child, ticket.unwrap())
}

#[test]
fn a_permit_ticket_written_by_a_process_that_exited_is_adopted_by_another() {
    const TEST: &str = "a_permit_ticket_written_by_a_process_that_exited_is_adopted_by_another";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (child, ticket) = spawn_holder(TEST, &server, &dir, "exit");
    finish(child, Duration::from_secs(20));
    assert_eq!(ticket.format(), LockFormat::Semaphore);
    assert_eq!(ticket.key(), "sem:jobs");
    assert!(
        ticket
            .to_string()
            .starts_with("rl-ticket:v1:permit:-:sem%3Ajobs:")
    );
    // The holder exited without giving it back: the permit is still held.
    let before = held(&server, "sem:jobs");
    assert_eq!(before.keys().collect::<Vec<_>>(), [ticket.value()]);
    assert_eq!(free(&server, "sem:jobs"), 1);
    let adopter = client(&server);
    let permit = adopter.adopt_permit(&ticket).unwrap();
    assert!(permit.is_held());
    assert_eq!(permit.key(), "sem:jobs");
    // A new id of the adopter, with the permit's expiry; no permit more.
    let after = held(&server, "sem:jobs");
    assert_eq!(after.keys().collect::<Vec<_>>(), [permit.permit_id()]);
    assert_ne!(permit.permit_id(), ticket.value());
    assert_eq!(after[permit.permit_id()], before[ticket.value()]);
    assert_eq!(free(&server, "sem:jobs"), 1);
    assert!(
        adopter
            .held()
            .iter()
            .any(|h| h.key() == "sem:jobs" && h.value() == permit.permit_id())
    );
    // The old ticket gives nothing back any more.
    assert_eq!(adopter.release_ticket(&ticket).unwrap(), Release::Expired);
    assert_eq!(free(&server, "sem:jobs"), 1);
    assert_eq!(permit.unlock().unwrap(), Release::Released);
    assert_eq!(free(&server, "sem:jobs"), 2);
    assert!(held(&server, "sem:jobs").is_empty());
}

#[test]
fn a_permit_whose_holder_was_killed_is_adopted_and_renewed_by_another_process() {
    const TEST: &str = "a_permit_whose_holder_was_killed_is_adopted_and_renewed_by_another_process";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (mut child, ticket) = spawn_holder(TEST, &server, &dir, "hold");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(held(&server, "sem:jobs").contains_key(ticket.value()));
    let adopter = LockClient::builder(server.url())
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let permit = adopter.adopt_permit(&ticket).unwrap();
    let id = permit.permit_id().to_owned();
    assert!(
        held(&server, "sem:jobs")[&id] > now_ms() + 3000,
        "the holder's expiry, kept"
    );
    // Renewed with the adopter's 3 s TTL: the holder's 10 s would take 7 s
    // to run down to 3 s, the adopter's first renewal (after 1 s) sets it.
    assert!(eventually(Duration::from_secs(5), || {
        held(&server, "sem:jobs")[&id] <= now_ms() + 3000
    }));
    assert!(permit.is_held());
    assert!(permit.lost().try_recv().is_err());
    assert_eq!(permit.unlock().unwrap(), Release::Released);
    assert_eq!(free(&server, "sem:jobs"), 2);
}

#[test]
fn a_permit_ticket_adopted_from_two_threads_at_once_has_exactly_one_winner() {
    let server = RedisServer::start();
    let holder = client(&server);
    let jobs = holder.semaphore("jobs").unwrap();
    jobs.ensure_permits(2).unwrap();
    let adopters = [client(&server), client(&server)];
    let barrier = Barrier::new(2);
    for round in 0..20 * stress_factor() {
        let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
        let results: Vec<_> = thread::scope(|s| {
            let handles: Vec<_> = adopters
                .iter()
                .map(|adopter| {
                    let (barrier, ticket) = (&barrier, &ticket);
                    s.spawn(move || {
                        barrier.wait();
                        adopter.adopt_permit(ticket)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        assert_eq!(held(&server, "sem:jobs").len(), 1, "round {round}");
        for result in results {
            match result {
                Ok(permit) => assert_eq!(permit.unlock().unwrap(), Release::Released),
                Err(e) => assert!(matches!(e, Error::LockLost { .. }), "{e:?}"),
            }
        }
        assert_eq!(free(&server, "sem:jobs"), 2, "round {round}");
    }
}

#[test]
fn an_expired_or_released_permit_ticket_is_lock_lost_and_nothing_is_written() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .key_prefix("sem:")
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let jobs = holder.semaphore("jobs").unwrap();
    jobs.ensure_permits(1).unwrap();
    let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
    // Not given back: held until its lease ends, unrenewed.
    assert!(held(&server, "sem:jobs").contains_key(ticket.value()));
    let expiry = held(&server, "sem:jobs")[ticket.value()];
    assert!(eventually(Duration::from_secs(5), || now_ms() > expiry));
    let adopter = client(&server);
    match adopter.adopt_permit(&ticket) {
        Err(Error::LockLost { key }) => assert_eq!(&*key, "sem:jobs"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        held(&server, "sem:jobs").keys().collect::<Vec<_>>(),
        [ticket.value()],
        "nothing written"
    );
    // Counted back by the next acquire: a Redisson client's, which takes it.
    let mut redisson = RedissonSemaphore::new(&server, "sem:jobs");
    let theirs = redisson.try_acquire(Some(60_000)).unwrap();
    assert!(matches!(
        adopter.adopt_permit(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(
        held(&server, "sem:jobs").keys().collect::<Vec<_>>(),
        [&theirs]
    );
    assert!(redisson.try_release(&theirs));
    // Released by ticket: gone, so not adopted either.
    let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
    assert_eq!(holder.release_ticket(&ticket).unwrap(), Release::Released);
    assert!(matches!(
        adopter.adopt_permit(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(free(&server, "sem:jobs"), 1);
    // A lock's ticket is not a permit's, nor the other way round.
    let lock = adopter.lock("other").unwrap().into_ticket().unwrap();
    assert!(matches!(
        adopter.adopt_permit(&lock),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(adopter.adopt(&ticket), Err(Error::Invalid { .. })));
    assert_eq!(adopter.release_ticket(&lock).unwrap(), Release::Released);
    // An expiry set of another type: refused, left as it is.
    let _: () = server.query(redis::cmd("SET").arg("{sem:jobs}:timeout").arg("x"));
    assert!(matches!(
        adopter.adopt_permit(&ticket),
        Err(Error::LockLost { .. })
    ));
    let kept: String = server.query(redis::cmd("GET").arg("{sem:jobs}:timeout"));
    assert_eq!(kept, "x");
}

#[test]
fn a_permit_ticket_is_extended_and_released_and_release_publishes_the_count() {
    let server = RedisServer::start();
    let holder = client(&server);
    let jobs = holder.semaphore("jobs").unwrap();
    jobs.ensure_permits(3).unwrap();
    let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
    holder
        .extend_ticket(&ticket, Duration::from_secs(600))
        .unwrap();
    assert!(held(&server, "sem:jobs")[ticket.value()] > now_ms() + 590_000);
    let mut sub = server.client().get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("redisson_sc:{sem:jobs}").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(holder.release_ticket(&ticket).unwrap(), Release::Released);
    let message: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(message, "3", "the count after the release, as Redisson's");
    assert!(matches!(
        holder.extend_ticket(&ticket, Duration::from_secs(60)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(holder.release_ticket(&ticket).unwrap(), Release::Expired);
}

#[test]
fn several_permits_are_handed_over_as_one_ticket() {
    let server = RedisServer::start();
    let holder = client(&server);
    let jobs = holder.semaphore("jobs").unwrap();
    jobs.ensure_permits(4).unwrap();
    let ticket = jobs.acquire_many(3).unwrap().into_ticket().unwrap();
    assert_eq!(ticket.permits(), 3);
    assert_eq!(ticket.to_string().parse::<Ticket>().unwrap(), ticket);
    let adopter = client(&server);
    assert!(matches!(
        adopter.adopt_permit(&ticket),
        Err(Error::Invalid { .. })
    ));
    let permits = adopter.adopt_permits(&ticket).unwrap();
    assert_eq!(permits.permits(), 3);
    let ids: Vec<String> = permits.permit_ids().split(',').map(str::to_owned).collect();
    let now = held(&server, "sem:jobs");
    assert_eq!(now.len(), 3);
    assert!(ids.iter().all(|id| now.contains_key(id)));
    assert_eq!(free(&server, "sem:jobs"), 1);
    assert!(matches!(
        adopter.adopt_permits(&ticket),
        Err(Error::LockLost { .. })
    ));
    // One of them released by id: the hold is no longer whole, and its
    // ticket is not adopted (nothing written).
    let ticket = permits.into_ticket().unwrap();
    assert!(jobs.release_by_id(&ids[1]).unwrap().was_held());
    assert!(matches!(
        holder.adopt_permits(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(held(&server, "sem:jobs").len(), 2);
    assert_eq!(holder.release_ticket(&ticket).unwrap(), Release::Expired);
    assert_eq!(free(&server, "sem:jobs"), 4);
}

#[test]
fn with_liveness_an_adopted_permit_names_the_adopters_session() {
    let server = RedisServer::start();
    let holder = client(&server);
    let jobs = holder.semaphore("jobs").unwrap();
    jobs.ensure_permits(1).unwrap();
    let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
    let adopter = LockClient::builder(server.url())
        .key_prefix("sem:")
        .liveness(Duration::from_secs(2))
        .build()
        .unwrap();
    let permit = adopter.adopt_permit(&ticket).unwrap();
    // A liveness client's id: 40 hex digits, marked, naming its session.
    assert_eq!(permit.permit_id().len(), 40, "{}", permit.permit_id());
    let tag = ClientTag::of_permit(permit.permit_id()).unwrap();
    assert!(tag.declares_liveness(), "{}", permit.permit_id());
    assert!(server.exists(&tag.session_key("sem:")));
    assert!(held(&server, "sem:jobs").contains_key(permit.permit_id()));
    // Its ticket, of the longer id, is adopted by a client without liveness
    // (a 32-digit id again), and extended and released by ticket.
    let ticket = permit.into_ticket().unwrap();
    assert_eq!(ticket.value().len(), 40);
    let permit = holder.adopt_permit(&ticket).unwrap();
    assert_eq!(permit.permit_id().len(), 32);
    let ticket = permit.into_ticket().unwrap();
    let ticket = adopter
        .adopt_permit(&ticket)
        .unwrap()
        .into_ticket()
        .unwrap();
    adopter
        .extend_ticket(&ticket, Duration::from_secs(60))
        .unwrap();
    assert_eq!(holder.release_ticket(&ticket).unwrap(), Release::Released);
    assert_eq!(free(&server, "sem:jobs"), 1);
    assert!(held(&server, "sem:jobs").is_empty());
}

/// Permits passed between two clients by tickets, round after round, while
/// Redisson clients replayed take and give back permits of the same semaphore
/// without pause: never more permits are held than the semaphore has, and the
/// count and the held permits always add up to its total.
#[test]
fn never_more_than_the_total_is_held_while_tickets_are_adopted_beside_redisson_acquirers() {
    const TOTAL: usize = 3;
    let server = RedisServer::start();
    let ours = [client(&server), client(&server)];
    let jobs = ours[0].semaphore("jobs").unwrap();
    jobs.ensure_permits(u32::try_from(TOTAL).unwrap()).unwrap();
    let done = AtomicBool::new(false);
    let theirs = AtomicUsize::new(0);
    let rounds = 30 * stress_factor();
    let check = |round: usize| {
        // Count and held set read in one step.
        let (count, card): (i64, usize) = server.query(
            redis::cmd("EVAL")
                .arg("return {tonumber(redis.call('GET', KEYS[1])), redis.call('ZCARD', KEYS[2])}")
                .arg(2)
                .arg("sem:jobs")
                .arg("{sem:jobs}:timeout"),
        );
        assert!(card <= TOTAL, "round {round}: {card} held");
        assert_eq!(count + i64::try_from(card).unwrap(), 3, "round {round}");
    };
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut redisson = RedissonSemaphore::new(&server, "sem:jobs");
                while !done.load(Ordering::SeqCst) {
                    match redisson.try_acquire(Some(60_000)) {
                        Ok(id) => {
                            theirs.fetch_add(1, Ordering::SeqCst);
                            assert!(redisson.try_release(&id));
                        }
                        Err(_) => thread::yield_now(),
                    }
                }
            });
        }
        for round in 0..rounds {
            let jobs = ours[round % 2].semaphore("jobs").unwrap();
            let ticket = jobs.acquire().unwrap().into_ticket().unwrap();
            check(round);
            let permit = ours[(round + 1) % 2].adopt_permit(&ticket).unwrap();
            check(round);
            assert!(permit.is_held());
            assert_eq!(permit.unlock().unwrap(), Release::Released);
            // Adopted again: gone, whoever holds the permits now.
            assert!(matches!(
                ours[round % 2].adopt_permit(&ticket),
                Err(Error::LockLost { .. })
            ));
            check(round);
        }
        assert!(
            eventually(Duration::from_secs(10), || theirs.load(Ordering::SeqCst)
                > 0),
            "the Redisson clients never took a permit"
        );
        done.store(true, Ordering::SeqCst);
    });
    assert_eq!(free(&server, "sem:jobs"), 3);
}
