//! Semaphore permits of a dead liveness session: a caller waiting for a permit
//! takes back the permits of a holder whose session record is gone, about one
//! liveness after the holder's death instead of its lease's end; never a
//! permit whose writer declared no liveness (a redlease client without it,
//! Redisson), never one of a live session.
//!
//! The holders that die are separate processes: this test binary run again as
//! `child_holds_permits` (ignored when run by itself), which takes its permits,
//! prints their ids and waits to be killed.

mod support;

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use redlease::{LockClient, Semaphore};
use support::RedisServer;
use support::alone::{kill_and_reap as kill, spawn_until_ready};
use support::redisson::eval;
use support::redisson::semaphore::{NO_LEASE, RedissonSemaphore, TRY_ACQUIRE, now_ms};

/// The liveness the holders declare.
const LIVENESS: Duration = Duration::from_secs(1);
/// The permits' own lease: far longer than any wait here.
const TTL: Duration = Duration::from_secs(30);
/// How long after a holder's death its permits may still be held: the
/// liveness (the record expires at most that long after the last refresh),
/// then one look and one acquire, with room for a 200 ms stall and more.
const TAKEN_WITHIN: Duration = Duration::from_secs(1 + 1);
/// A bound on any wait that should succeed.
const LONG: Duration = Duration::from_secs(10);

/// The prefix of every client here.
const PREFIX: &str = "lock:";

const CHILD_URL: &str = "PERMITS_CHILD_URL";
const CHILD_ARGS: &str = "PERMITS_CHILD_ARGS";

/// A holder process on the semaphore `name`: `permits` single permits, or one
/// hold of `permits` when `many`; with liveness when `live`. Returns it and the
/// ids it holds.
fn holder(
    server: &RedisServer,
    name: &str,
    permits: u32,
    many: bool,
    live: bool,
) -> (Child, Vec<String>) {
    let env = [
        (CHILD_URL, server.url()),
        (CHILD_ARGS, format!("{name} {permits} {many} {live}")),
    ];
    let (child, said) = spawn_until_ready("child_holds_permits", &env);
    // The harness may print its own words before the first line.
    let ids = said
        .iter()
        .filter_map(|l| l.split_once("ids "))
        .flat_map(|(_, held)| held.split(',').map(str::to_owned))
        .collect();
    (child, ids)
}

/// Run as a separate process by [`holder`]: holds its permits until killed (or
/// for at most two minutes).
#[test]
#[ignore = "a holder process of the other tests"]
fn child_holds_permits() {
    let (Ok(url), Ok(args)) = (std::env::var(CHILD_URL), std::env::var(CHILD_ARGS)) else {
        return;
    };
    let args: Vec<&str> = args.split(' ').collect();
    let [name, permits, many, live] = args[..] else {
        panic!("bad arguments: {args:?}");
    };
    let permits: u32 = permits.parse().unwrap();
    let mut builder = LockClient::builder(url.as_str())
        .key_prefix(PREFIX)
        .ttl(TTL);
    if live == "true" {
        builder = builder.liveness(LIVENESS);
    }
    let client = builder.build().unwrap();
    let semaphore = client.semaphore(name).unwrap();
    let mut singles = Vec::new();
    let mut hold = None;
    if many == "true" {
        let guard = semaphore.try_acquire_many(permits).unwrap().unwrap();
        println!("ids {}", guard.permit_ids());
        hold = Some(guard);
    } else {
        for _ in 0..permits {
            let guard = semaphore.try_acquire().unwrap().unwrap();
            println!("ids {}", guard.permit_id());
            singles.push(guard);
        }
    }
    println!("ready");
    thread::sleep(Duration::from_secs(120));
    drop((singles, hold));
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix(PREFIX)
        .ttl(TTL)
        .build()
        .unwrap()
}

/// A semaphore `name` of `permits`, created by a client without liveness.
fn semaphore(server: &RedisServer, name: &str, permits: u32) -> (LockClient, Semaphore) {
    let client = client(server);
    let semaphore = client.semaphore(name).unwrap();
    semaphore.ensure_permits(permits).unwrap();
    (client, semaphore)
}

/// The ids held in the semaphore `name`'s expiry set, in hex.
fn held(server: &RedisServer, name: &str) -> Vec<String> {
    let members: Vec<Vec<u8>> = server.query(
        redis::cmd("ZRANGE")
            .arg(format!("{{{PREFIX}{name}}}:timeout"))
            .arg(0)
            .arg(-1),
    );
    members.iter().map(|m| hex(m)).collect()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Samples the semaphore `name` of `total` permits until `stop`: in each
/// atomic snapshot the free and held permits add up to the total and none is
/// negative, so no more than the total is ever held. Returns the snapshots.
fn watch_total(server: &RedisServer, name: &str, total: i64, stop: &AtomicBool) -> usize {
    let mut con = server.conn();
    let (count, timeouts) = (
        format!("{PREFIX}{name}"),
        format!("{{{PREFIX}{name}}}:timeout"),
    );
    let mut snapshots = 0;
    while !stop.load(Ordering::Relaxed) {
        let (free, held): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("GET")
            .arg(&count)
            .cmd("ZCARD")
            .arg(&timeouts)
            .query(&mut con)
            .unwrap();
        assert!(
            free >= 0 && free + held == total,
            "free {free}, held {held}"
        );
        snapshots += 1;
        // A pace for the sampling, not a wait for anyone.
        thread::sleep(Duration::from_millis(2));
    }
    snapshots
}

#[test]
fn a_killed_liveness_holders_permits_come_back_within_its_liveness() {
    let server = RedisServer::start();
    let (client, semaphore) = semaphore(&server, "crash", 2);
    let (child, ids) = holder(&server, "crash", 2, false, true);
    assert_eq!(ids.len(), 2);
    assert!(
        ids.iter()
            .all(|id| id.len() == 40 && id.starts_with("726c383a")),
        "{ids:?}"
    );
    let killed = kill(child);
    let first = semaphore.try_acquire_for(LONG).unwrap().unwrap();
    let took = killed.elapsed();
    assert!(took <= TAKEN_WITHIN, "a permit {took:?} after the kill");
    // Both came back in one step: the second is free at once.
    let second = semaphore.try_acquire().unwrap().unwrap();
    assert_eq!(client.metrics().dead_holders_broken, 2);
    let now = held(&server, "crash");
    assert_eq!(now.len(), 2);
    assert!(ids.iter().all(|id| !now.contains(id)), "{now:?}");
    drop((first, second));
}

#[test]
fn a_killed_holder_without_liveness_keeps_its_permits_for_their_lease() {
    let server = RedisServer::start();
    let (client, semaphore) = semaphore(&server, "plain", 2);
    let (child, ids) = holder(&server, "plain", 2, false, false);
    assert!(ids.iter().all(|id| id.len() == 32), "{ids:?}");
    let killed = kill(child);
    let wait = LIVENESS + Duration::from_secs(1);
    assert!(semaphore.try_acquire_for(wait).unwrap().is_none());
    assert!(killed.elapsed() >= wait);
    let mut now = held(&server, "plain");
    now.sort();
    let mut theirs = ids;
    theirs.sort();
    assert_eq!(now, theirs, "the permits stay until their lease ends");
    assert_eq!(client.metrics().dead_holders_broken, 0);
}

#[test]
fn beside_redisson_permits_only_the_dead_holders_come_back() {
    let server = RedisServer::start();
    let name = "mixed";
    let (client, semaphore) = semaphore(&server, name, 4);
    // Two of Redisson's permits (leased as ours are): one random id, and one
    // whose 13th digit reads as a liveness tag's, as one id in 16 does.
    let mut redisson = RedissonSemaphore::new(&server, &format!("{PREFIX}{name}"));
    let random = redisson.try_acquire(Some(30_000)).unwrap();
    let lookalike = format!("0123456789ab8def{:016x}", rand_u64());
    let (count, timeouts, channel) = (
        format!("{PREFIX}{name}"),
        format!("{{{PREFIX}{name}}}:timeout"),
        format!("redisson_sc:{{{PREFIX}{name}}}"),
    );
    let now = now_ms();
    let reply: Option<String> = eval(TRY_ACQUIRE, &[&count, &timeouts, &channel])
        .arg(1)
        .arg(now + 30_000)
        .arg(now)
        .arg(NO_LEASE)
        .arg("publish")
        .arg(
            uuid::Uuid::try_parse(&lookalike)
                .unwrap()
                .as_bytes()
                .to_vec(),
        )
        .query(&mut redisson.con)
        .unwrap();
    assert_eq!(reply.as_deref(), Some("OK"));
    let (child, ids) = holder(&server, name, 2, false, true);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let watcher = s.spawn(|| watch_total(&server, name, 4, &stop));
        let killed = kill(child);
        let waiters: Vec<_> = (0..2)
            .map(|_| s.spawn(|| semaphore.try_acquire_for(LONG).unwrap()))
            .collect();
        let guards: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        let took = killed.elapsed();
        assert!(guards.iter().all(Option::is_some));
        assert!(took <= TAKEN_WITHIN, "two permits {took:?} after the kill");
        // Redisson's permits are not taken back, however long one waits
        // beyond the dead holder's liveness.
        let more = semaphore.try_acquire_for(LIVENESS + Duration::from_secs(1));
        assert!(more.unwrap().is_none());
        stop.store(true, Ordering::Relaxed);
        assert!(watcher.join().unwrap() > 0);
        let now = held(&server, name);
        assert!(now.contains(&random) && now.contains(&lookalike), "{now:?}");
        assert!(ids.iter().all(|id| !now.contains(id)), "{now:?}");
        drop(guards);
    });
    assert_eq!(client.metrics().dead_holders_broken, 2);
    assert!(redisson.try_release(&random));
    assert!(redisson.try_release(&lookalike));
}

#[test]
fn a_live_liveness_holder_is_never_broken_and_looked_at_once_per_period() {
    let server = RedisServer::start();
    let (waiter, semaphore) = semaphore(&server, "alive", 2);
    let holder = LockClient::builder(server.url())
        .key_prefix(PREFIX)
        .ttl(TTL)
        .liveness(LIVENESS)
        .build()
        .unwrap();
    let theirs = holder.semaphore("alive").unwrap();
    let guards = [
        theirs.try_acquire().unwrap().unwrap(),
        theirs.try_acquire().unwrap().unwrap(),
    ];
    server.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT"));
    let wait = LIVENESS * 5 / 2;
    assert!(semaphore.try_acquire_for(wait).unwrap().is_none());
    assert!(guards.iter().all(redlease::PermitGuard::is_held));
    let now = held(&server, "alive");
    assert!(
        guards
            .iter()
            .all(|g| now.contains(&g.permit_id().to_owned()))
    );
    assert_eq!(waiter.metrics().dead_holders_broken, 0);
    // A look reads the holder's record once; the next is due when the record
    // would end, which a refresh every third of the liveness keeps at least
    // two thirds of it away: at most 2.5 / (2 / 3) + 1 looks (one more if a
    // stalled refresh brought the record nearer its end).
    let looks = pttl_calls(&server);
    assert!((1..=6).contains(&looks), "{looks} looks in {wait:?}");
    drop(guards);
}

#[test]
fn a_dead_holders_several_permits_come_back_together() {
    let server = RedisServer::start();
    let (client, semaphore) = semaphore(&server, "many", 3);
    let (child, ids) = holder(&server, "many", 3, true, true);
    assert_eq!(ids.len(), 3);
    let killed = kill(child);
    let hold = semaphore.try_acquire_many_for(3, LONG).unwrap().unwrap();
    let took = killed.elapsed();
    assert!(
        took <= TAKEN_WITHIN,
        "three permits {took:?} after the kill"
    );
    assert_eq!(client.metrics().dead_holders_broken, 3);
    let now = held(&server, "many");
    assert_eq!(now.len(), 3);
    assert!(ids.iter().all(|id| !now.contains(id)), "{now:?}");
    assert!(hold.unlock().unwrap().was_held());
}

/// The `PTTL` calls the server counted since the last `CONFIG RESETSTAT`: the
/// looks at session records (no other command here sends one on a busy
/// semaphore).
fn pttl_calls(server: &RedisServer) -> u64 {
    let info: String = server.query(redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_pttl:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

fn rand_u64() -> u64 {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}
