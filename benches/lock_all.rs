//! `lock_all` against its floor, measured side by side in one run.
//!
//! - `lock_all`: a `lock_all` + `unlock` cycle of 2 and 4 names on one server vs
//!   the raw commands any correct client needs for the same work on one raw
//!   connection: the names taken by `SET NX PX` in one `MULTI`/`EXEC`, released by
//!   one compare-and-delete script over all the keys; medians of 3,000 alternated
//!   rounds, and p99.
//!
//! Run: `cargo bench --bench lock_all` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH_PIN=1` pins the `redis-server` to core 0 and this process to
//! core 1 (`taskset`), as in `benches/lock.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group};
use redlease::LockClient;
use support::RedisServer;
use support::bench::{floor_token, pin, report_p99, side_by_side};

/// The floor's release of every key: compare-and-delete each, in one script.
const RELEASE_ALL: &str = "local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then n = n + redis.call('DEL', KEYS[i]) end
end
return n";

/// The floor: raw commands on one connection.
struct Floor {
    con: redis::Connection,
    release: redis::Script,
}

impl Floor {
    fn cycle(&mut self, keys: &[String]) {
        let tokens: Vec<String> = keys.iter().map(|_| floor_token()).collect();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (k, t) in keys.iter().zip(&tokens) {
            pipe.cmd("SET")
                .arg(k)
                .arg(t)
                .arg("NX")
                .arg("PX")
                .arg(30_000);
        }
        let set: Vec<redis::Value> = pipe.query(&mut self.con).unwrap();
        assert!(set.iter().all(|v| *v != redis::Value::Nil));
        let mut inv = self.release.prepare_invoke();
        for (k, t) in keys.iter().zip(&tokens) {
            inv.key(k).arg(t);
        }
        let n: usize = inv.invoke(&mut self.con).unwrap();
        assert_eq!(n, keys.len());
    }
}

fn lock_all(c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let mut floor = Floor {
        con: server.conn(),
        release: redis::Script::new(RELEASE_ALL),
    };
    for n in [2usize, 4] {
        let names: Vec<String> = (0..n).map(|i| format!("bench:all:{i}")).collect();
        let raw: Vec<String> = (0..n).map(|i| format!("bench:floor:{i}")).collect();
        let ours = || {
            let guard = client.lock_all(&names).unwrap();
            assert!(guard.unlock().into_iter().all(|r| r.unwrap().was_held()));
        };
        let names = [
            "redlease_lock_all_unlock",
            "floor_multi_set_nx_and_release_script",
        ];
        let group = format!("lock_all_{n}");
        let (ta, tb) = side_by_side(c, &group, names, 3000, ours, || floor.cycle(&raw));
        let what = format!("lock_all + unlock of {n} names vs MULTI SET NX + release script");
        report_p99(&what, ta, tb);
    }
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = lock_all
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
