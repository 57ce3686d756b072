//! Leader election against its floor, measured side by side in one run.
//!
//! - `handover`: from the start of `resign()` to the return of a candidate's
//!   `campaign()` waiting in another thread (its own client: its own
//!   connections and waiter thread), beside the floor: the raw commands any
//!   correct client sends for the same hand-over (the holder one script that
//!   compares, deletes and `PUBLISH`es; the waiter `SUBSCRIBE`d, then on the
//!   message `SET NX PX`), in the same layout; and beside a floor whose
//!   waiter takes a term as it sets (`SET NX PX` + `INCR` in one script), as
//!   any election with strictly increasing terms must. Rounds alternate; the
//!   report is each side's median and their ratios.
//! - `fleet`: what 10 waiting candidates (10 clients) cost Redis while one
//!   leads: `INFO commandstats` deltas over 10 s, per second and by command.
//!
//! Run: `cargo bench --bench election`; `REDLEASE_BENCH=handover` (or
//! `fleet`) runs one group; `REDLEASE_BENCH_PIN=1` pins `redis-server` to
//! core 0 and this process to core 1 (`taskset`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded};
use redlease::{Leadership, LockClient};
use support::bench::{floor_token, percentile, pin, report, set_nx_px, wanted};
use support::{RedisServer, eventually};

const ROUNDS: usize = 200;
const CANDIDATES: usize = 10;
const FLEET_FOR: Duration = Duration::from_secs(10);

/// The floor holder's release: compare-and-delete, then wake the waiters.
const RELEASE_PUBLISH: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     redis.call('DEL', KEYS[1]); redis.call('PUBLISH', ARGV[2], 'released'); return 1 end return 0";

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url()).build().unwrap()
}

/// Subscribers of `channel` on `server`.
fn listeners(server: &RedisServer, channel: &str) -> i64 {
    let (_, n): (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
    n
}

/// One hand-over of ours: `a` leads, a candidate of `b` waits in a thread;
/// returns the time from `resign()` to the candidate's `campaign()` return.
fn ours(server: &RedisServer, a: &LockClient, b: &LockClient) -> Duration {
    let leadership = a
        .election("bench")
        .unwrap()
        .try_campaign()
        .unwrap()
        .unwrap();
    let election = b.election("bench").unwrap();
    let (tx, rx) = bounded(1);
    let waiter = thread::spawn(move || {
        let won: Leadership = election.campaign().unwrap();
        tx.send(Instant::now()).unwrap();
        won
    });
    assert!(eventually(Duration::from_secs(10), || listeners(
        server,
        "{bench}:released"
    ) >= 1));
    let began = Instant::now();
    let _ = leadership.resign().unwrap();
    let won_at = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let _ = waiter.join().unwrap().resign().unwrap();
    won_at - began
}

/// The acquire of a floor that takes a term: `SET NX PX` and, when it set, an
/// `INCR` of the term counter in the same atomic step (what any election whose
/// terms are strictly increasing must do); the term, or nil when busy.
const ACQUIRE_TERM: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 30000) then \
     return redis.call('INCR', KEYS[2]) end return false";

/// The floor's waiter: subscribed, tries `SET NX PX` (with `termed`, the
/// [`ACQUIRE_TERM`] script), and again on each message until it sets; sends
/// when it did.
fn floor_waiter(
    server: &RedisServer,
    ready: crossbeam_channel::Sender<()>,
    termed: bool,
) -> Receiver<Instant> {
    let (tx, rx) = bounded(1);
    let (mut sub, mut con) = (server.conn(), server.conn());
    thread::spawn(move || {
        let token = floor_token();
        let script = redis::Script::new(ACQUIRE_TERM);
        let take = |con: &mut redis::Connection| {
            if !termed {
                return set_nx_px(con, "floor", &token);
            }
            let term: Option<u64> = script
                .key("floor")
                .key("floor:term")
                .arg(&token)
                .invoke(con)
                .unwrap();
            term.is_some()
        };
        let mut pubsub = sub.as_pubsub();
        pubsub.subscribe("floor:released").unwrap();
        let mut won = take(&mut con);
        ready.send(()).unwrap();
        while !won {
            pubsub.get_message().unwrap();
            won = take(&mut con);
        }
        tx.send(Instant::now()).unwrap();
        let () = redis::cmd("DEL").arg("floor").query(&mut con).unwrap();
    });
    rx
}

/// One hand-over of the floor: the same layout on raw connections.
fn floor(
    server: &RedisServer,
    holder: &mut redis::Connection,
    script: &redis::Script,
    termed: bool,
) -> Duration {
    let token = floor_token();
    assert!(set_nx_px(holder, "floor", &token));
    let (ready_tx, ready) = bounded(1);
    let won = floor_waiter(server, ready_tx, termed);
    ready.recv().unwrap();
    let began = Instant::now();
    let released: i64 = script
        .key("floor")
        .arg(&token)
        .arg("floor:released")
        .invoke(holder)
        .unwrap();
    assert_eq!(released, 1);
    let won_at = won.recv_timeout(Duration::from_secs(10)).unwrap();
    // The waiter's channel disconnects once it has deleted the key again, so
    // the next round finds it free.
    assert!(won.recv_timeout(Duration::from_secs(10)).is_err());
    won_at - began
}

fn handover(server: &RedisServer) {
    let (a, b) = (client(server), client(server));
    let mut holder = server.conn();
    let script = redis::Script::new(RELEASE_PUBLISH);
    let (mut ta, mut tb) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    let mut tc = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        ta.push(ours(server, &a, &b));
        tb.push(floor(server, &mut holder, &script, false));
        tc.push(floor(server, &mut holder, &script, true));
    }
    println!(
        "HANDOVER redlease p90 {:?} p99 {:?}; floor p90 {:?} p99 {:?}",
        percentile(&mut ta, 90),
        percentile(&mut ta, 99),
        percentile(&mut tb, 90),
        percentile(&mut tb, 99)
    );
    report(
        "election handover",
        percentile(&mut ta, 50),
        percentile(&mut tb, 50),
    );
    println!(
        "HANDOVER floor taking a term (SET NX PX + INCR in one script): p90 {:?} p99 {:?}",
        percentile(&mut tc, 90),
        percentile(&mut tc, 99)
    );
    report(
        "election handover vs a floor taking a term",
        percentile(&mut ta, 50),
        percentile(&mut tc, 50),
    );
}

fn fleet(server: &RedisServer) {
    let leader = client(server);
    let leadership = leader.election("fleet").unwrap().campaign().unwrap();
    let candidates: Vec<LockClient> = (0..CANDIDATES).map(|_| client(server)).collect();
    let waiting: Vec<_> = candidates
        .iter()
        .map(|c| {
            let election = c.election("fleet").unwrap();
            thread::spawn(move || election.campaign())
        })
        .collect();
    assert!(eventually(Duration::from_secs(10), || {
        listeners(server, "{fleet}:released") >= i64::try_from(CANDIDATES).unwrap()
    }));
    server.reset_stats();
    thread::sleep(FLEET_FOR);
    let stats = server.command_stats();
    let total: u64 = stats.iter().map(|(_, n)| n).sum();
    // The stats query counts itself (`info`, two `client|setinfo`) and the reset.
    let ours = total.saturating_sub(4);
    let per_sec = f64::from(u32::try_from(ours).unwrap_or(u32::MAX)) / FLEET_FOR.as_secs_f64();
    println!(
        "FLEET election: {CANDIDATES} waiting candidates + 1 leader (ttl 30 s): \
         {per_sec:.1} redis commands/s over {FLEET_FOR:?}; by command: {stats:?}"
    );
    // Stop the wait: closing each client ends its campaign with `Shutdown`.
    for c in &candidates {
        c.close();
    }
    for w in waiting {
        let _ = w.join();
    }
    drop(leadership);
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    let server = RedisServer::start();
    pin([&server]);
    if wanted("handover") {
        handover(&server);
    }
    if wanted("fleet") {
        fleet(&server);
    }
}
