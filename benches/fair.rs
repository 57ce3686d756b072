//! The fair lock against its floor, measured side by side in one run.
//!
//! - `fair`: an uncontended fair lock + unlock vs Redisson's own scripts
//!   (`RedissonFairLock` lock + unlock) by raw `EVALSHA` on one connection,
//!   p50 of alternated cycles.
//!
//! Run: `cargo bench --bench fair`; `REDLEASE_BENCH_PIN=1` pins `redis-server`
//! to core 0 and this process to core 1 (`taskset`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use redlease::{FairLock, LockClient};
use support::RedisServer;
use support::pin::pin;
use support::redisson_fair::{LEASE_MS, LOCK, UNLOCK, WAIT_MS, now_ms, prefix_name};

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
            owner: format!("{}:1", uuid::Uuid::new_v4()),
            scripts: [LOCK, UNLOCK].map(redis::Script::new),
        }
    }

    fn cycle(&mut self, name: &str) {
        let (queue, timeouts) = (
            prefix_name("redisson_lock_queue", name),
            prefix_name("redisson_lock_timeout", name),
        );
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

/// Medians of `a` and `b`, sampled alternately so both see the same machine state.
fn paired_p50(mut a: impl FnMut(), mut b: impl FnMut()) -> (Duration, Duration) {
    let (mut ta, mut tb) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        let t = Instant::now();
        a();
        ta.push(t.elapsed());
        let t = Instant::now();
        b();
        tb.push(t.elapsed());
    }
    ta.sort_unstable();
    tb.sort_unstable();
    (ta[ROUNDS / 2], tb[ROUNDS / 2])
}

fn fair(c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let lock = client.fair_lock("bench:fair").unwrap();
    let mut floor = Floor::new(&server);
    let mut g = c.benchmark_group("fair");
    g.bench_function("redlease_lock_unlock", |b| b.iter(|| ours(&lock)));
    g.bench_function("floor_redisson_evalsha", |b| {
        b.iter(|| floor.cycle("bench:floor"));
    });
    g.finish();
    let (a, b) = paired_p50(|| ours(&lock), || floor.cycle("bench:floor"));
    let ratio = a.as_secs_f64() / b.as_secs_f64();
    println!("RATIO fair lock+unlock: redlease p50 {a:?} / floor p50 {b:?} = {ratio:.3}x");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = fair
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
