//! Crash recovery with liveness, measured from separate processes, each figure
//! beside its floor.
//!
//! - **Crash to free**: a holder process (this benchmark run again) with
//!   liveness `L` (default 2 s) and a 30 s TTL takes 1 or 1,000 locks, then is
//!   killed (`SIGKILL`); this process's waiter (a client without liveness, already
//!   waiting) times from the kill to holding the lock. The floor is `L`: the
//!   session record expires at most `L` after the holder's last refresh, which
//!   nothing can learn sooner (without liveness it is the TTL, 29–30 s).
//! - **Commands while waiting on a live holder**: the commands a waiter sends
//!   (`SET`, `EVALSHA`, as Redis counts them) over a window with a holder
//!   alone, then with the holder and one waiter; the waiter's share is the
//!   difference. With the holder's liveness on and off
//!   (today's), so the figure is the extra a look at the session costs.
//!
//! Run: `cargo bench --bench liveness` (needs `redis-server` on PATH, Linux);
//! `REDLEASE_BENCH_ROUNDS` (default 10) kills per lease count,
//! `REDLEASE_BENCH_LIVENESS_MS` (default 2000), `REDLEASE_BENCH_SECS` (default
//! 10, the command-count windows); `REDLEASE_BENCH_PIN=1` pins `redis-server` to
//! core 0 and this process (and its holders) to core 1.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

use redlease::LockClient;
use support::RedisServer;
use support::bench::{env, percentile, pin, worker_process};

/// The environment variable that makes this binary a holder: `url prefix count
/// liveness_ms` (0: no liveness).
const HOLDER: &str = "REDLEASE_BENCH_HOLDER";
const TTL: Duration = Duration::from_secs(30);

/// Run as a holder: takes the locks, says `ready`, holds until killed (at most
/// two minutes).
fn hold(job: &str) {
    let args: Vec<&str> = job.split(' ').collect();
    let (url, prefix) = (args[0], args[1]);
    let count: usize = args[2].parse().unwrap();
    let liveness: u64 = args[3].parse().unwrap();
    let mut builder = LockClient::builder(url).ttl(TTL);
    if liveness > 0 {
        builder = builder.liveness(Duration::from_millis(liveness));
    }
    let client = builder.build().unwrap();
    let guards: Vec<_> = (0..count)
        .map(|i| client.lock(&format!("{prefix}{i}")).unwrap())
        .collect();
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
    drop(guards);
}

fn holder(server: &RedisServer, prefix: &str, count: usize, liveness: Duration) -> Child {
    let job = format!("{} {prefix} {count} {}", server.url(), liveness.as_millis());
    let mut child = worker_process(HOLDER, job);
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        if line.unwrap() == "ready" {
            return child;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the holder ended before it held its locks");
}

/// The calls of what a waiter sends (`SET … NX GET`, `EVALSHA`; `PTTL` on its
/// first try) Redis has counted so far. `INFO commandstats` counts a script's
/// own calls too (the look's `GET` and `PTTL`s), so the scripts are counted by
/// their `EVALSHA`, and `PTTL` and `GET` not at all; the holder sends none of
/// these in a window but one renewal (TTL 30 s), in both windows alike.
fn commands(server: &RedisServer) -> u64 {
    let info: String = server.query(redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .filter(|l| l.starts_with("cmdstat_set:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The waiter's commands per second while a holder (with `liveness`, or none)
/// holds one lock for a window of `secs`, less what the holder alone sends.
fn waiting_cost(server: &RedisServer, liveness: Duration, secs: u64, run: usize) -> f64 {
    let prefix = format!("live{run}:");
    let mut child = holder(server, &prefix, 1, liveness);
    let window = Duration::from_secs(secs);
    let c0 = commands(server);
    std::thread::sleep(window);
    let alone = commands(server) - c0;
    let waiter = LockClient::builder(server.url()).build().unwrap();
    let c1 = commands(server);
    let got = waiter.try_lock_for(&format!("{prefix}0"), window).unwrap();
    let both = commands(server) - c1;
    assert!(got.is_none(), "the live holder's lock was taken");
    child.kill().unwrap();
    child.wait().unwrap();
    #[expect(clippy::cast_precision_loss, reason = "a few thousand commands")]
    let per_second = (both.saturating_sub(alone)) as f64 / secs as f64;
    per_second
}

fn main() {
    if let Ok(job) = std::env::var(HOLDER) {
        hold(&job);
        return;
    }
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"liveness".contains(&f)) {
        return;
    }
    let rounds = usize::try_from(env("REDLEASE_BENCH_ROUNDS", 10))
        .unwrap()
        .max(1);
    let liveness = Duration::from_millis(env("REDLEASE_BENCH_LIVENESS_MS", 2000));
    let secs = env("REDLEASE_BENCH_SECS", 10);
    let server = RedisServer::start();
    pin([&server]);
    let waiter = LockClient::builder(server.url()).ttl(TTL).build().unwrap();
    for count in [1, 1000] {
        let mut took = Vec::new();
        for run in 0..rounds {
            let prefix = format!("crash{count}-{run}:");
            let mut child = holder(&server, &prefix, count, liveness);
            // The waiter waits already, as a standby does, when the holder dies.
            let (killed_tx, killed_rx) = crossbeam_channel::bounded(1);
            let name = format!("{prefix}{}", count - 1);
            let held = std::thread::scope(|s| {
                let w = s.spawn(|| {
                    let got = waiter.try_lock_for(&name, Duration::from_secs(60));
                    (got.unwrap().expect("taken within a minute"), Instant::now())
                });
                std::thread::sleep(Duration::from_millis(300));
                killed_tx.send(Instant::now()).unwrap();
                child.kill().unwrap();
                w.join().unwrap()
            });
            child.wait().unwrap();
            let killed = killed_rx.recv().unwrap();
            took.push(held.1 - killed);
        }
        let (p50, p99) = (percentile(&mut took, 50), percentile(&mut took, 99));
        println!(
            "RATIO crash to free, {count} lease(s), liveness {liveness:?}, {rounds} kills: \
             p50 {p50:?} ({:.2}x the liveness), p99 {p99:?} ({:.2}x); without liveness the TTL, {TTL:?}",
            p50.as_secs_f64() / liveness.as_secs_f64(),
            p99.as_secs_f64() / liveness.as_secs_f64(),
        );
    }
    let today = waiting_cost(&server, Duration::ZERO, secs, 0);
    let live = waiting_cost(&server, liveness, secs, 1);
    let per_period = (live - today) * liveness.as_secs_f64();
    println!(
        "RATIO commands of one waiter on a live holder: {live:.2}/s with the holder's liveness, \
         {today:.2}/s without (today's); {per_period:.2} more per liveness period"
    );
}
