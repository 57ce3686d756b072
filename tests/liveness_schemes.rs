//! Liveness beyond the token lock: a waiter on a read-write lock or a fair lock
//! breaks the holds of a holder whose liveness session ended (a separate
//! process, killed with `SIGKILL`), within about one liveness although the lock
//! keys' TTL is 30 s; a holder without liveness, Redisson's holders and a live
//! holder are never broken; of two readers only the dead one's hold goes.
//!
//! The holders are separate processes: this test binary run again as
//! `child_holds` (ignored when run by itself), which takes its holds, prints
//! `ready` and waits to be killed.

mod support;

use std::process::Child;
use std::time::{Duration, Instant};

use redlease::{LockClient, Release};
use support::alone::{kill_and_reap as kill, spawn_until_ready};
use support::redisson::fair::RedissonFair;
use support::redisson::rwlock::RedissonRwLock;
use support::{RedisServer, eventually};

/// The liveness the holders declare.
const LIVENESS: Duration = Duration::from_secs(1);
/// The lock keys' own TTL: far longer than any wait here.
const TTL: Duration = Duration::from_secs(30);
/// How long after a holder's death a waiter may take to hold: the liveness
/// (the record ends at most that long after the holder's last refresh), then a
/// look and an attempt, with room for a stall of a loaded machine.
const TAKEN_WITHIN: Duration = Duration::from_secs(2);
/// How long a waiter waits on what must never be broken: more than twice the
/// liveness (a session that had declared one would be over).
const NEVER_WAIT: Duration = Duration::from_millis(2500);
/// A bound on waits that must succeed, far above [`TAKEN_WITHIN`].
const BOUND: Duration = Duration::from_secs(10);

const CHILD_URL: &str = "LIVENESS_SCHEMES_CHILD_URL";
const CHILD_ARGS: &str = "LIVENESS_SCHEMES_CHILD_ARGS";

/// A holder process, with liveness unless `live` is false, holding `holds`:
/// `write:<name>`, `writeread:<name>` (the write hold and a read of the same
/// thread), `read:<name>`, `fair:<name>`, or `fairwait:<name>` (a waiter of
/// the fair lock, from another thread). Returns once it holds them all (and
/// its waiter has started).
fn holder(server: &RedisServer, live: bool, holds: &[&str]) -> Child {
    let env = [
        (CHILD_URL, server.url()),
        (CHILD_ARGS, format!("{live} {}", holds.join(" "))),
    ];
    spawn_until_ready("child_holds", &env).0
}

/// Run as a separate process by [`holder`]: holds until killed (or for at
/// most two minutes).
#[test]
#[ignore = "a holder process of the other tests"]
fn child_holds() {
    let (Ok(url), Ok(args)) = (std::env::var(CHILD_URL), std::env::var(CHILD_ARGS)) else {
        return;
    };
    let mut args = args.split(' ');
    let live = args.next() == Some("true");
    let mut builder = LockClient::builder(url.as_str()).ttl(TTL);
    if live {
        builder = builder.liveness(LIVENESS);
    }
    let client = builder.build().unwrap();
    let mut held: Vec<Box<dyn std::any::Any>> = Vec::new();
    for hold in args {
        let (kind, name) = hold.split_once(':').unwrap();
        match kind {
            "write" => held.push(Box::new(
                client.read_write_lock(name).unwrap().write().unwrap(),
            )),
            "writeread" => {
                let rw = client.read_write_lock(name).unwrap();
                held.push(Box::new(rw.write().unwrap()));
                held.push(Box::new(rw.read().unwrap()));
            }
            "read" => held.push(Box::new(
                client.read_write_lock(name).unwrap().read().unwrap(),
            )),
            "fair" => held.push(Box::new(client.fair_lock(name).unwrap().lock().unwrap())),
            "fairwait" => {
                // Queued, waiting until killed.
                let fair = client.fair_lock(name).unwrap();
                std::thread::spawn(move || {
                    let guard = fair.try_lock_for(Duration::from_secs(120));
                    drop(guard);
                });
            }
            other => panic!("unknown hold {other}"),
        }
    }
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
    drop(held);
}

fn waiter(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url()).ttl(TTL).build().unwrap()
}

/// The fields of the hash `key`, `mode` left out.
fn fields(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    let mut all: Vec<String> = redis::cmd("HKEYS").arg(key).query(conn).unwrap();
    all.retain(|f| f != "mode");
    all.sort();
    all
}

/// The read timeout keys of the read-write lock `name`.
fn timeouts(conn: &mut redis::Connection, name: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{{{name}}}:*:rwlock_timeout:*"))
        .query(conn)
        .unwrap()
}

#[test]
fn a_killed_writer_is_broken_for_a_waiting_reader_and_a_waiting_writer() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = waiter(&server);
    let child = holder(&server, true, &["writeread:wr", "write:ww"]);
    assert_eq!(fields(&mut conn, "wr").len(), 2, "a write and a read field");
    assert_eq!(timeouts(&mut conn, "wr").len(), 1);
    let killed = kill(child);
    let (read, write) = std::thread::scope(|s| {
        let read = s.spawn(|| {
            let rw = client.read_write_lock("wr").unwrap();
            let guard = rw.try_read_for(BOUND).unwrap().expect("read");
            (guard, killed.elapsed())
        });
        let write = s.spawn(|| {
            let rw = client.read_write_lock("ww").unwrap();
            let guard = rw.try_write_for(BOUND).unwrap().expect("written");
            (guard, killed.elapsed())
        });
        (read.join().unwrap(), write.join().unwrap())
    });
    assert!(read.1 <= TAKEN_WITHIN, "read {:?} after the kill", read.1);
    assert!(
        write.1 <= TAKEN_WITHIN,
        "written {:?} after the kill",
        write.1
    );
    assert!(read.0.is_held() && write.0.is_held());
    // The dead writer's read hold went with it, timeout key and all.
    assert_eq!(fields(&mut conn, "wr").len(), 1, "only the new reader");
    assert_eq!(timeouts(&mut conn, "wr").len(), 1, "only the new reader's");
    assert_eq!(client.metrics().dead_holders_broken, 2);
}

#[test]
fn a_killed_reader_is_broken_for_a_waiting_writer() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = waiter(&server);
    let killed = kill(holder(&server, true, &["read:r"]));
    let rw = client.read_write_lock("r").unwrap();
    let guard = rw.try_write_for(BOUND).unwrap().expect("written");
    let took = killed.elapsed();
    assert!(took <= TAKEN_WITHIN, "written {took:?} after the kill");
    assert!(guard.is_held());
    assert!(
        timeouts(&mut conn, "r").is_empty(),
        "the reader's timeout key went"
    );
    assert_eq!(client.metrics().dead_holders_broken, 1);
}

#[test]
fn of_two_readers_only_the_dead_ones_hold_goes_and_a_writer_still_waits() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = waiter(&server);
    let dead = holder(&server, true, &["read:two"]);
    let dead_field = fields(&mut conn, "two");
    let alive = holder(&server, true, &["read:two"]);
    let mut live_field = fields(&mut conn, "two");
    live_field.retain(|f| !dead_field.contains(f));
    assert_eq!((dead_field.len(), live_field.len()), (1, 1));
    kill(dead);
    let rw = client.read_write_lock("two").unwrap();
    assert!(rw.try_write_for(NEVER_WAIT).unwrap().is_none(), "written");
    assert_eq!(
        fields(&mut conn, "two"),
        live_field,
        "the live reader stays"
    );
    let left = timeouts(&mut conn, "two");
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains(&live_field[0]), "{left:?}");
    let pttl: i64 = redis::cmd("PTTL").arg("two").query(&mut conn).unwrap();
    assert!(pttl > 20_000, "the name lasts as its live hold: {pttl}");
    assert_eq!(client.metrics().dead_holders_broken, 1);
    // The live reader's death frees the name too.
    let killed = kill(alive);
    let guard = rw.try_write_for(BOUND).unwrap().expect("written");
    let took = killed.elapsed();
    assert!(took <= TAKEN_WITHIN, "written {took:?} after the kill");
    assert!(guard.is_held());
    assert_eq!(client.metrics().dead_holders_broken, 2);
}

#[test]
fn a_killed_fair_holder_is_broken_and_the_queue_keeps_its_order() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = waiter(&server);
    let child = holder(&server, true, &["fair:f"]);
    let fair = client.fair_lock("f").unwrap();
    let queued = |n: usize, conn: &mut redis::Connection| queued(conn, "f", n);
    let (first_tx, first_rx) = crossbeam_channel::bounded(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            let guard = fair.try_lock_for(BOUND).unwrap().expect("first");
            first_tx.send(Instant::now()).unwrap();
            release_rx.recv_timeout(BOUND).unwrap();
            assert_eq!(guard.unlock().unwrap(), Release::Released);
        });
        assert!(queued(1, &mut conn), "the first waiter queued");
        let second = s.spawn(|| {
            let guard = fair.try_lock_for(BOUND * 2).unwrap().expect("second");
            (Instant::now(), guard.is_held())
        });
        assert!(queued(2, &mut conn), "the second waiter queued");
        let killed = kill(child);
        let took = first_rx.recv_timeout(BOUND).unwrap() - killed;
        assert!(
            took <= TAKEN_WITHIN,
            "the first held {took:?} after the kill"
        );
        // The second waits for the first's release.
        assert!(!second.is_finished(), "the second took the first's turn");
        let released = Instant::now();
        release_tx.send(()).unwrap();
        let (held_at, held) = second.join().unwrap();
        assert!(held && held_at >= released);
        first.join().unwrap();
    });
    assert_eq!(client.metrics().dead_holders_broken, 1);
}

/// Whether the queue of the fair lock `name` reaches `n` entries (bounded).
fn queued(conn: &mut redis::Connection, name: &str, n: usize) -> bool {
    eventually(BOUND, || {
        let len: usize = redis::cmd("LLEN")
            .arg(format!("redisson_lock_queue:{{{name}}}"))
            .query(conn)
            .unwrap();
        len == n
    })
}

#[test]
fn a_killed_waiter_at_the_head_of_a_fair_queue_is_dropped_for_the_next() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = waiter(&server);
    let fair = client.fair_lock("q").unwrap();
    let held = fair.lock().unwrap();
    let child = holder(&server, true, &["fairwait:q"]);
    assert!(queued(&mut conn, "q", 1), "the child queued");
    std::thread::scope(|s| {
        let next = s.spawn(|| {
            let guard = fair.try_lock_for(BOUND).unwrap().expect("held");
            (Instant::now(), guard.is_held())
        });
        assert!(queued(&mut conn, "q", 2), "the next queued behind it");
        let killed = kill(child);
        assert_eq!(held.unlock().unwrap(), Release::Released);
        let (at, is_held) = next.join().unwrap();
        let took = at - killed;
        // The queue's own deadline would drop the dead head 3 to 4 s after
        // the kill (4 s after its last attempt).
        assert!(took <= TAKEN_WITHIN, "held {took:?} after the kill");
        assert!(is_held);
    });
    // A dropped waiter is no broken lock.
    assert_eq!(client.metrics().dead_holders_broken, 0);
}

#[test]
fn holders_without_liveness_and_redissons_holders_are_never_broken() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let plain = holder(&server, false, &["write:pw", "read:pr", "fair:pf"]);
    kill(plain);
    // Redisson's holders: version 4 UUIDs, no session record.
    let mut writer = RedissonRwLock::new(&server, "xw", 1);
    assert_eq!(writer.write_lock(30_000), None);
    let mut reader = RedissonRwLock::new(&server, "xr", 1);
    assert_eq!(reader.read_lock(30_000), None);
    let mut fair = RedissonFair::new(&server);
    assert_eq!(fair.attempt("xf"), None);
    let names = ["pw", "pr", "pf", "xw", "xr", "xf"];
    let before: Vec<_> = names.iter().map(|n| fields(&mut conn, n)).collect();
    // A waiter with liveness of its own breaks no more than one without.
    let client = LockClient::builder(server.url())
        .ttl(TTL)
        .liveness(LIVENESS)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for name in ["pw", "pr", "xw", "xr"] {
            let rw = client.read_write_lock(name).unwrap();
            s.spawn(move || assert!(rw.try_write_for(NEVER_WAIT).unwrap().is_none(), "{name}"));
        }
        for name in ["pw", "xw"] {
            let rw = client.read_write_lock(name).unwrap();
            s.spawn(move || assert!(rw.try_read_for(NEVER_WAIT).unwrap().is_none(), "{name}"));
        }
        for name in ["pf", "xf"] {
            let lock = client.fair_lock(name).unwrap();
            s.spawn(move || assert!(lock.try_lock_for(NEVER_WAIT).unwrap().is_none(), "{name}"));
        }
    });
    let after: Vec<_> = names.iter().map(|n| fields(&mut conn, n)).collect();
    assert_eq!(before, after);
    assert_eq!(client.metrics().dead_holders_broken, 0);
}

#[test]
fn a_live_holder_is_never_broken_while_waiters_wait_two_liveness_periods() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let child = holder(&server, true, &["write:lw", "read:lr", "fair:lf"]);
    let names = ["lw", "lr", "lf"];
    let before: Vec<_> = names.iter().map(|n| fields(&mut conn, n)).collect();
    let client = waiter(&server);
    let began = Instant::now();
    std::thread::scope(|s| {
        for name in ["lw", "lr"] {
            let rw = client.read_write_lock(name).unwrap();
            s.spawn(move || assert!(rw.try_write_for(NEVER_WAIT).unwrap().is_none(), "{name}"));
        }
        let rw = client.read_write_lock("lw").unwrap();
        s.spawn(move || assert!(rw.try_read_for(NEVER_WAIT).unwrap().is_none(), "read lw"));
        let fair = client.fair_lock("lf").unwrap();
        s.spawn(move || assert!(fair.try_lock_for(NEVER_WAIT).unwrap().is_none(), "lf"));
    });
    assert!(began.elapsed() >= 2 * LIVENESS);
    let after: Vec<_> = names.iter().map(|n| fields(&mut conn, n)).collect();
    assert_eq!(before, after);
    assert_eq!(client.metrics().dead_holders_broken, 0);
    kill(child);
}
