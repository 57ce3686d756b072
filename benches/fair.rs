//! The fair lock against its floor, measured side by side in one run.
//!
//! - `fair`: an uncontended fair lock + unlock vs Redisson's own scripts
//!   (`RedissonFairLock` lock + unlock) by raw `EVALSHA` on one connection,
//!   p50 of alternated cycles;
//! - `turns`: 4 clients × 2 threads taking one name for 3 s (1 ms held each
//!   time): each thread's share of the turns, min/max (1.0: strict turns);
//! - `fleet`: 4 processes × 4 threads on one name for 3 s (1 ms sections):
//!   sections per process, min/max, and how many turns went to the head of the
//!   queue as the previous holder saw it (see `fair/fleet.rs`).
//!
//! Run: `cargo bench --bench fair`; `REDLEASE_BENCH_PIN=1` pins `redis-server`
//! to core 0 and this process to core 1 (`taskset`).

#[path = "fair/fleet.rs"]
mod fleet;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use redlease::{FairLock, LockClient};
use support::RedisServer;
use support::bench::{pin, report_p99, side_by_side};
use support::redisson::fair::{
    LEASE_MS, LOCK, UNLOCK, WAIT_MS, now_ms, prefix_name, queue_and_timeouts,
};
use support::redisson::owner;

const ROUNDS: usize = 5_000;

/// Redisson's scripts by `EVALSHA` on one raw connection: the floor.
struct Floor {
    con: redis::Connection,
    owner: String,
    scripts: [redis::Script; 2],
}

impl Floor {
    fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            owner: owner(1),
            scripts: [LOCK, UNLOCK].map(redis::Script::new),
        }
    }

    fn cycle(&mut self, name: &str) {
        let (queue, timeouts) = queue_and_timeouts(name);
        let got: Option<i64> = self.scripts[0]
            .key(name)
            .key(&queue)
            .key(&timeouts)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(WAIT_MS)
            .arg(now_ms())
            .invoke(&mut self.con)
            .unwrap();
        assert!(got.is_none(), "floor name free");
        let _: Option<i64> = self.scripts[1]
            .key(name)
            .key(&queue)
            .key(&timeouts)
            .key(prefix_name("redisson_lock__channel", name))
            .arg(0)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(now_ms())
            .invoke(&mut self.con)
            .unwrap();
    }
}

fn ours(lock: &FairLock) {
    drop(lock.try_lock().unwrap().unwrap());
}

fn fair(c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let lock = client.fair_lock("bench:fair").unwrap();
    let mut floor = Floor::new(&server);
    let names = ["redlease_lock_unlock", "floor_redisson_evalsha"];
    let (a, b) = side_by_side(
        c,
        "fair",
        names,
        ROUNDS,
        || ours(&lock),
        || {
            floor.cycle("bench:floor");
        },
    );
    report_p99("fair lock+unlock", a, b);
}

fn turns(_c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let locks: Vec<FairLock> = (0..4)
        .map(|_| {
            let client = LockClient::builder(server.url()).build().unwrap();
            client.fair_lock("bench:turns").unwrap()
        })
        .collect();
    let stop = AtomicBool::new(false);
    let counts: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
    thread::scope(|s| {
        for (i, count) in counts.iter().enumerate() {
            let (lock, stop) = (&locks[i % 4], &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.try_lock_for(Duration::from_secs(10)).unwrap();
                    thread::sleep(Duration::from_millis(1));
                    drop(g);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });
    let counts: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    let ratio = if *max == 0 {
        0.0
    } else {
        f64::from(u32::try_from(*min).unwrap_or(u32::MAX))
            / f64::from(u32::try_from(*max).unwrap_or(u32::MAX))
    };
    println!(
        "FIGURE turns: 4 clients x 2 threads, turns per thread {counts:?}, min/max {ratio:.2} \
         ({} turns in 3 s)",
        counts.iter().sum::<u64>()
    );
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = fair, turns, fleet_group
}

/// The process fleet runs when no filter is given or a filter names it.
fn fleet_group(_c: &mut Criterion) {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if filters.is_empty() || filters.iter().any(|f| "fleet".contains(f.as_str())) {
        fleet::bench();
    }
}

fn main() {
    if let Ok(job) = std::env::var(fleet::FAIR_FLEET_ENV) {
        fleet::worker(&job);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
