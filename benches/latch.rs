//! The fan-in latch's count down against its floor, measured side by side in
//! one run.
//!
//! - `latch/count_down`: `Latch::count_down` (nobody's, as Redisson counts) vs
//!   Redisson's own `countDown` script by `EVALSHA` on one raw connection: the
//!   one command Redisson sends for the same work.
//! - participant count down: `Participant::count_down` (the count down that also
//!   removes the participant from the record, then its lease given back) vs the
//!   raw commands it must send at least: Redisson's `countDown` script and a
//!   compare-and-delete of the lease, each by `EVALSHA`. The join before each
//!   round is not timed (nor is the floor's `SET` of its lease).
//!
//! Medians of alternated rounds, and p99. Run: `cargo bench --bench latch`
//! (needs `redis-server` on PATH); `REDLEASE_BENCH_PIN=1` pins the
//! `redis-server` to core 0 and this process to core 1, as in `benches/lock.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use redlease::LockClient;
use support::RedisServer;
use support::bench::{floor_token, pin, report_p99, side_by_side};

/// Redisson's `countDownAsync` script, as `RedissonCountDownLatch` sends it.
const REDISSON_COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]);\
    if v <= 0 then redis.call('del', KEYS[1]) end;\
    if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";
/// The token compare-and-delete every lock client sends to give a lease back.
const COMPARE_AND_DELETE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
    return redis.call('del', KEYS[1]) else return 0 end";
/// A count no run reaches zero from.
const LARGE: u32 = 1_000_000_000;
const ROUNDS: usize = 3000;

/// The floor: Redisson's count down (and a lease's release) on a raw connection.
struct Floor {
    con: redis::Connection,
    count_down: redis::Script,
    release: redis::Script,
}

impl Floor {
    fn new(server: &RedisServer) -> Self {
        let mut con = server.conn();
        let () = redis::cmd("SET")
            .arg("bench:floor")
            .arg(LARGE)
            .query(&mut con)
            .unwrap();
        Self {
            con,
            count_down: redis::Script::new(REDISSON_COUNT_DOWN),
            release: redis::Script::new(COMPARE_AND_DELETE),
        }
    }

    fn count_down(&mut self) {
        let () = self
            .count_down
            .key("bench:floor")
            .key("redisson_countdownlatch__channel__{bench:floor}")
            .arg(0)
            .arg("publish")
            .invoke(&mut self.con)
            .unwrap();
    }

    /// Sets a lease (untimed), then times the count down and its release.
    fn participant(&mut self) -> Duration {
        let token = floor_token();
        let () = redis::cmd("SET")
            .arg("{bench:floor}:lease")
            .arg(&token)
            .arg("PX")
            .arg(5000)
            .query(&mut self.con)
            .unwrap();
        let t = Instant::now();
        self.count_down();
        let released: i64 = self
            .release
            .key("{bench:floor}:lease")
            .arg(&token)
            .invoke(&mut self.con)
            .unwrap();
        let took = t.elapsed();
        assert_eq!(released, 1);
        took
    }
}

fn latch(c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let latch = client.latch("bench:latch", LARGE).unwrap();
    let mut floor = Floor::new(&server);
    let names = ["redlease_count_down", "floor_redisson_evalsha"];
    let (ta, tb) = side_by_side(
        c,
        "latch",
        names,
        ROUNDS,
        || {
            latch.count_down().unwrap();
        },
        || floor.count_down(),
    );
    report_p99("latch count_down vs Redisson's countDown script", ta, tb);

    let members = client.latch("bench:members", LARGE).unwrap();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let me = members.join().unwrap();
        let t = Instant::now();
        me.count_down().unwrap();
        ours.push(t.elapsed());
        base.push(floor.participant());
    }
    report_p99(
        "participant count_down vs countDown + compare-and-delete",
        ours,
        base,
    );
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = latch
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
