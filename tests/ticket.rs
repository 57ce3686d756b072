mod support;

// Tickets against real `redis-server` processes: a lease let go of with
// `into_ticket`, printed, and adopted by another client or another process
// (one that exited, one killed with SIGKILL); two adopters of one ticket; a
// ticket whose lock expired or was taken over.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{ClientTag, Error, LockClient, LockOptions, Release, Renewal, Ticket};
use support::alone::{finish, spawn_self};
use support::{RedisServer, TempDir, eventually, stress_factor};

/// Set in a re-executed copy of this test binary: `url file mode` of a holder
/// process, `mode` being `exit` (let go with `into_ticket`, then exit) or
/// `hold` (keep the guard, renewing, until killed).
const HOLDER_ENV: &str = "REDLEASE_TEST_TICKET_HOLDER";

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn value(server: &RedisServer, key: &str) -> Option<String> {
    server.query(redis::cmd("GET").arg(key))
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("PTTL").arg(key))
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
    let guard = client.lock("handed").unwrap();
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
fn a_ticket_written_to_a_file_by_a_process_that_exited_is_adopted_by_another() {
    const TEST: &str = "a_ticket_written_to_a_file_by_a_process_that_exited_is_adopted_by_another";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (child, ticket) = spawn_holder(TEST, &server, &dir, "exit");
    finish(child, Duration::from_secs(20));
    // The holder exited without releasing: the lock is still its value's.
    assert_eq!(
        value(&server, "lock:handed").as_deref(),
        Some(ticket.value())
    );
    assert_eq!(ticket.key(), "lock:handed");
    assert!(ticket.fence().is_some());
    let adopter = client(&server);
    let guard = adopter.adopt(&ticket).unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.fence(), ticket.fence());
    assert_eq!(guard.key(), "lock:handed");
    // The value is the adopter's now, and the adopter lists it as its own.
    let now = value(&server, "lock:handed").unwrap();
    assert_ne!(now, ticket.value());
    let held = adopter.held();
    assert!(
        held.iter()
            .any(|h| h.key() == "lock:handed" && h.value() == now)
    );
    assert_ne!(
        ClientTag::of_token(&now),
        ClientTag::of_token(ticket.value())
    );
    // The old ticket releases nothing any more.
    assert_eq!(adopter.release_ticket(&ticket).unwrap(), Release::Taken);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(!server.exists("lock:handed"));
}

#[test]
fn a_lease_whose_holder_was_killed_is_adopted_and_renewed_by_another_process() {
    const TEST: &str = "a_lease_whose_holder_was_killed_is_adopted_and_renewed_by_another_process";
    if let Ok(job) = std::env::var(HOLDER_ENV) {
        return holder(&job);
    }
    let server = RedisServer::start();
    let dir = TempDir::new(server.port());
    let (mut child, ticket) = spawn_holder(TEST, &server, &dir, "hold");
    // SIGKILL: the holder's guard never runs its drop.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        value(&server, "lock:handed").as_deref(),
        Some(ticket.value())
    );
    let adopter = LockClient::builder(server.url())
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let guard = adopter.adopt(&ticket).unwrap();
    // What the lock had left (at most the holder's 10 s) bounds the validity.
    assert!(guard.valid_until() <= Instant::now() + Duration::from_secs(10));
    // Renewed with the adopter's 3 s TTL: still held after more than one TTL.
    thread::sleep(Duration::from_secs(4));
    assert!(guard.is_held());
    assert!(pttl(&server, "lock:handed") <= 3000);
    assert!(guard.lost().try_recv().is_err());
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn into_ticket_stops_renewing_without_releasing_and_an_expired_ticket_is_lock_lost() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let ticket = holder.lock("short").unwrap().into_ticket().unwrap();
    // Not released: the value is there until its TTL, unrenewed.
    assert_eq!(value(&server, "short").as_deref(), Some(ticket.value()));
    assert!(eventually(Duration::from_secs(5), || !server.exists("short")));
    let adopter = client(&server);
    match adopter.adopt(&ticket) {
        Err(Error::LockLost { key }) => assert_eq!(&*key, "short"),
        other => panic!("{other:?}"),
    }
    // Taken over by another holder since: refused too, and left as it is.
    let other = holder.lock_with("short", &LockOptions::new()).unwrap();
    let other = other.unwrap();
    let theirs = value(&server, "short");
    assert!(matches!(
        adopter.adopt(&ticket),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(value(&server, "short"), theirs);
    assert!(other.is_held());
}

#[test]
fn a_ticket_adopted_from_two_threads_at_once_has_exactly_one_winner() {
    let server = RedisServer::start();
    let holder = client(&server);
    let adopters = [client(&server), client(&server)];
    let barrier = Barrier::new(2);
    for round in 0..20 * stress_factor() {
        let ticket = holder.lock("twice").unwrap().into_ticket().unwrap();
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
fn an_adopted_lease_keeps_a_waiters_mark_and_its_fence() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .fencing(true)
        .renewal(Renewal::None)
        .build()
        .unwrap();
    let guard = holder.lock("marked").unwrap();
    let fence = guard.fence();
    let ticket = guard.into_ticket().unwrap();
    assert_eq!(ticket.fence(), fence);
    // A waiter of another client marks the holder's token (`+`), as its
    // acquire does when it finds the lock busy.
    let marked = format!("{}+", ticket.value());
    let _: () = server.query(redis::cmd("SET").arg("marked").arg(&marked).arg("KEEPTTL"));
    let adopter = client(&server);
    let guard = adopter.adopt(&ticket).unwrap();
    let now = value(&server, "marked").unwrap();
    assert!(now.ends_with('+') && now != marked, "{now}");
    assert_eq!(guard.fence(), fence);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn with_liveness_an_adopted_lease_names_the_adopters_session() {
    let server = RedisServer::start();
    let holder = client(&server);
    let ticket = holder.lock("live").unwrap().into_ticket().unwrap();
    let adopter = LockClient::builder(server.url())
        .key_prefix("lock:")
        .liveness(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = adopter.adopt(&ticket).unwrap();
    let now = value(&server, "lock:live").unwrap();
    let tag = ClientTag::of_token(&now).unwrap();
    assert!(tag.declares_liveness(), "{now}");
    // The adopter's session record exists: the lock is not breakable.
    assert!(server.exists(&tag.session_key("lock:")));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}
