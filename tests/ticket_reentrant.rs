mod support;

// Tickets of Redisson-format reentrant locks against real `redis-server`
// processes: a hold let go of with `into_ticket`, passed through a file, and
// adopted by another process (after its holder exited, or was SIGKILLed); two
// adopters of one ticket; an expired or taken-over ticket; nested holds and the
// adopting thread's own hold; liveness; a Redisson client replayed beside.

use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redlease::{ClientTag, Error, LockClient, LockGuard, LockOptions, Release, Scheme, Ticket};
use support::alone::{finish, spawn_self};
use support::redisson::rlock::Redisson;
use support::{RedisServer, TempDir, eventually, stress_factor};

/// Set in a re-executed copy of this test binary: `url file mode` of a holder
/// process, `mode` being `exit` (let go with `into_ticket`, then exit) or
/// `hold` (keep the guard, renewing, until killed).
const HOLDER_ENV: &str = "REDLEASE_TEST_REENTRANT_TICKET_HOLDER";

fn reentrant() -> LockOptions {
    LockOptions::new().scheme(Scheme::Reentrant)
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn lock(client: &LockClient, name: &str) -> LockGuard {
    client.lock_with(name, &reentrant()).unwrap().unwrap()
}

/// The lock's hash: owner field → hold count.
fn hash(server: &RedisServer, key: &str) -> HashMap<String, i64> {
    server.query(redis::cmd("HGETALL").arg(key))
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("PTTL").arg(key))
}

/// The only field of the lock's hash, with its count.
fn only_field(server: &RedisServer, key: &str) -> (String, i64) {
    let fields = hash(server, key);
    assert_eq!(fields.len(), 1, "{fields:?}");
    fields.into_iter().next().unwrap()
}

/// The holder process of [`HOLDER_ENV`]: writes the printed ticket to `file`
/// (through a temporary name, so the reader never sees half of it).
fn holder(job: &str) {
    let mut parts = job.split(' ');
    let (url, file, mode) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let client = LockClient::builder(url)
        .key_prefix("lock:")
        .ttl(Duration::from_secs(10))
        .fencing(true)
        .build()
        .unwrap();
    let guard = lock(&client, "handed");
    let write = |ticket: &Ticket| {
        let tmp = format!("{file}.tmp");
        std::fs::write(&tmp, format!("{ticket}\n")).unwrap();
        std::fs::rename(tmp, file).unwrap();
    };
    if mode == "exit" {
        write(&guard.into_ticket().unwrap());
        return;
    }
    write(&guard.ticket().unwrap());
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
fn a_reentrant_ticket_written_by_a_process_that_exited_is_adopted_by_another() {
    const TEST: &str = "a_reentrant_ticket_written_by_a_process_that_exited_is_adopted_by_another";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (child, ticket) = spawn_holder(TEST, &server, &dir, "exit");
    finish(child, Duration::from_secs(20));
    assert_eq!(ticket.format(), redlease::LockFormat::Reentrant);
    assert!(ticket.to_string().starts_with("rl-ticket:v1:reentrant:"));
    assert!(ticket.fence().is_some());
    // The holder exited without releasing: its one hold is still there.
    assert_eq!(
        only_field(&server, "lock:handed"),
        (ticket.value().to_owned(), 1)
    );
    let before = pttl(&server, "lock:handed");
    let adopter = client(&server);
    let guard = adopter.adopt(&ticket).unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.fence(), ticket.fence());
    // The hold is the adopting thread's now, with the time it had left.
    let (field, count) = only_field(&server, "lock:handed");
    assert_ne!(field, ticket.value());
    assert_eq!(count, 1);
    let held = adopter.held();
    assert!(
        held.iter()
            .any(|h| h.key() == "lock:handed" && h.value() == field),
        "the adopter lists it as its own"
    );
    let after = pttl(&server, "lock:handed");
    assert!(after > 0 && after <= before, "{before} then {after}");
    // This thread holds it: it may lock again (nested), carrying the
    // adopted hold's fence, and both unlock.
    let fenced = LockOptions::new().scheme(Scheme::Reentrant).fencing(true);
    let nested = adopter.lock_with("handed", &fenced).unwrap().unwrap();
    assert_eq!(nested.fence(), ticket.fence());
    assert_eq!(hash(&server, "lock:handed")[&field], 2);
    assert_eq!(nested.unlock().unwrap(), Release::Released);
    // The old ticket releases nothing any more.
    assert_eq!(adopter.release_ticket(&ticket).unwrap(), Release::Taken);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(!server.exists("lock:handed"));
}

#[test]
fn a_reentrant_hold_whose_holder_was_killed_is_adopted_and_renewed_by_another_process() {
    const TEST: &str =
        "a_reentrant_hold_whose_holder_was_killed_is_adopted_and_renewed_by_another_process";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (mut child, ticket) = spawn_holder(TEST, &server, &dir, "hold");
    // SIGKILL: the holder's guard never runs its drop.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(only_field(&server, "lock:handed").0, ticket.value());
    let adopter = LockClient::builder(server.url())
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let guard = adopter.adopt(&ticket).unwrap();
    assert!(
        pttl(&server, "lock:handed") > 3000,
        "the holder's TTL, kept"
    );
    // Renewed with the adopter's 3 s TTL: the holder's 10 s would take 7 s
    // to run down to 3 s, the adopter's first renewal (after 1 s) sets it.
    assert!(eventually(Duration::from_secs(5), || {
        let left = pttl(&server, "lock:handed");
        left > 0 && left <= 3000
    }));
    assert!(guard.is_held());
    assert!(guard.lost().try_recv().is_err());
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(!server.exists("lock:handed"));
}

#[test]
fn a_reentrant_ticket_adopted_from_two_threads_at_once_has_exactly_one_winner() {
    let server = RedisServer::start();
    let holder = client(&server);
    let adopters = [client(&server), client(&server)];
    let barrier = Barrier::new(2);
    for round in 0..20 * stress_factor() {
        let ticket = lock(&holder, "twice").into_ticket().unwrap();
        let results: Vec<_> = thread::scope(|s| {
            let handles: Vec<_> = adopters
                .iter()
                .map(|adopter| {
                    let (barrier, ticket) = (&barrier, &ticket);
                    s.spawn(move || {
                        barrier.wait();
                        adopter.adopt(ticket)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        assert_eq!(only_field(&server, "lock:twice").1, 1, "round {round}");
        for result in results {
            match result {
                Ok(guard) => assert_eq!(guard.unlock().unwrap(), Release::Released),
                Err(e) => assert!(matches!(e, Error::LockLost { .. }), "{e:?}"),
            }
        }
        assert!(!server.exists("lock:twice"));
    }
}

#[test]
fn an_expired_or_taken_over_reentrant_ticket_is_lock_lost_and_nothing_is_written() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let ticket = holder
        .lock_with("short", &reentrant())
        .unwrap()
        .unwrap()
        .into_ticket()
        .unwrap();
    // Not released: the hold is there until its TTL, unrenewed.
    assert_eq!(only_field(&server, "short").0, ticket.value());
    assert!(eventually(Duration::from_secs(5), || !server.exists("short")));
    let adopter = client(&server);
    match adopter.adopt(&ticket) {
        Err(Error::LockLost { key }) => assert_eq!(&*key, "short"),
        other => panic!("{other:?}"),
    }
    assert!(!server.exists("short"), "nothing written");
    // Taken since by a Redisson client: refused too, and left as it is.
    let mut redisson = Redisson::new(&server);
    assert_eq!(redisson.try_lock("short"), None);
    let theirs = hash(&server, "short");
    assert!(matches!(
        adopter.adopt(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(hash(&server, "short"), theirs);
    assert_eq!(redisson.unlock("short"), Some(1));
    // A token lock under the name: another type, refused alike.
    let token = holder.lock("short").unwrap();
    assert!(matches!(
        adopter.adopt(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(token.unlock().unwrap(), Release::Released);
    // The ticket's field without a TTL is no lease: refused, left as it is.
    let _: () = server.query(redis::cmd("HSET").arg("short").arg(ticket.value()).arg(1));
    assert!(matches!(
        adopter.adopt(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(only_field(&server, "short"), (ticket.value().to_owned(), 1));
    assert_eq!(pttl(&server, "short"), -1);
}

#[test]
fn a_reentrant_ticket_with_nested_holds_or_of_the_adopters_own_thread_is_refused() {
    let server = RedisServer::start();
    let holder = client(&server);
    let outer = lock(&holder, "nested");
    let inner = lock(&holder, "nested");
    let ticket = inner.ticket().unwrap();
    let adopter = client(&server);
    match adopter.adopt(&ticket) {
        Err(Error::Invalid { reason, .. }) => assert!(reason.contains("nested"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        only_field(&server, "lock:nested"),
        (ticket.value().to_owned(), 2)
    );
    drop(inner);
    // One hold left, let go of: the holder's own thread may not adopt it ...
    let ticket = outer.into_ticket().unwrap();
    assert!(matches!(holder.adopt(&ticket), Err(Error::Invalid { .. })));
    assert_eq!(
        only_field(&server, "lock:nested"),
        (ticket.value().to_owned(), 1)
    );
    // ... another thread of the same client may.
    let guard = thread::scope(|s| s.spawn(|| holder.adopt(&ticket)).join().unwrap()).unwrap();
    let (field, count) = only_field(&server, "lock:nested");
    assert!(field != ticket.value() && count == 1, "{field}");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(!server.exists("lock:nested"));
}

#[test]
fn with_liveness_an_adopted_reentrant_hold_names_the_adopters_session() {
    let server = RedisServer::start();
    let holder = client(&server);
    let ticket = lock(&holder, "live").into_ticket().unwrap();
    let adopter = LockClient::builder(server.url())
        .key_prefix("lock:")
        .liveness(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = adopter.adopt(&ticket).unwrap();
    let (field, _) = only_field(&server, "lock:live");
    let tag = ClientTag::of_field(&field).unwrap();
    assert!(tag.declares_liveness(), "{field}");
    assert!(adopter.held().iter().any(|h| h.value() == field));
    // The adopter's session record exists: the lock is not breakable.
    assert!(server.exists(&tag.session_key("lock:")));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

/// A lease passed between two clients by tickets, round after round, while a
/// Redisson client replayed tries the same lock without pause: the two sides
/// never hold it at once, and a ticket of a round past never takes the lock
/// from the Redisson holder.
#[test]
fn an_adopted_reentrant_lock_and_a_redisson_holder_never_hold_it_together() {
    let server = RedisServer::start();
    let ours = [client(&server), client(&server)];
    let holders = AtomicUsize::new(0);
    let redisson_held = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let rounds = 30 * stress_factor();
    thread::scope(|s| {
        let redisson = s.spawn(|| {
            let mut redisson = Redisson::new(&server);
            while !done.load(Ordering::SeqCst) {
                if redisson.try_lock("lock:mixed").is_none() {
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "both hold it");
                    redisson_held.fetch_add(1, Ordering::SeqCst);
                    holders.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(redisson.unlock("lock:mixed"), Some(1));
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut stale: Option<Ticket> = None;
        for round in 0..rounds {
            let guard = lock(&ours[round % 2], "mixed");
            assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "both hold it");
            let ticket = guard.into_ticket().unwrap();
            let guard = thread::scope(|s| {
                s.spawn(|| ours[(round + 1) % 2].adopt(&ticket).unwrap())
                    .join()
                    .unwrap()
            });
            assert!(guard.is_held());
            holders.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(guard.unlock().unwrap(), Release::Released);
            // The last round's ticket, adopted again while anyone (the
            // Redisson client, or nobody) may hold the lock: never a guard.
            if let Some(old) = stale.replace(ticket) {
                let before = hash(&server, "lock:mixed");
                match ours[round % 2].adopt(&old) {
                    Err(Error::LockLost { .. }) => {}
                    other => panic!("round {round}: {other:?} over {before:?}"),
                }
            }
        }
        // Both sides took the lock, so the check above did compare them.
        assert!(
            eventually(Duration::from_secs(10), || redisson_held
                .load(Ordering::SeqCst)
                > 0),
            "the Redisson client never held the lock"
        );
        done.store(true, Ordering::SeqCst);
        redisson.join().unwrap();
    });
}
