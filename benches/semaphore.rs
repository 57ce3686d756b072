//! The lease semaphore against its floor, measured side by side in one run.
//!
//! - `semaphore`: one permit acquired and released (`Semaphore::try_acquire` +
//!   `PermitGuard::release`) vs Redisson's own `RPermitExpirableSemaphore`
//!   scripts (`tryAcquire` + `tryRelease`, a fresh 16-byte id each time) sent by
//!   `EVALSHA` on one raw connection: what Redisson sends for the same work;
//!   medians of 3,000 alternated rounds, and p99.
//!
//! Run: `cargo bench --bench semaphore` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH_PIN=1` pins the `redis-server` to core 0 and this process to
//! core 1 (`taskset`), as in `benches/lock.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group};
use redlease::LockClient;
use support::RedisServer;
use support::bench::{pin, report_p99, side_by_side};
use support::redisson::semaphore::{NO_LEASE, TRY_ACQUIRE, TRY_RELEASE, channel, now_ms, timeouts};

/// Redisson's lease when the permit is taken with one (`acquire(leaseTime)`): the
/// same 30 s as redlease's default TTL.
const LEASE_MS: u64 = 30_000;

/// The floor: Redisson's scripts by `EVALSHA`, as Redisson sends them.
struct RedissonFloor {
    con: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    name: String,
    timeouts: String,
    channel: String,
}

impl RedissonFloor {
    fn new(server: &RedisServer, name: &str) -> Self {
        Self {
            con: server.conn(),
            acquire: redis::Script::new(TRY_ACQUIRE),
            release: redis::Script::new(TRY_RELEASE),
            name: name.to_owned(),
            timeouts: timeouts(name),
            channel: channel(name),
        }
    }

    fn acquire_release(&mut self) {
        let id = *uuid::Uuid::new_v4().as_bytes();
        let now = now_ms();
        let got: Option<String> = self
            .acquire
            .key(&self.name)
            .key(&self.timeouts)
            .key(&self.channel)
            .arg(1)
            .arg(now + LEASE_MS)
            .arg(now)
            .arg(NO_LEASE)
            .arg("publish")
            .arg(&id[..])
            .invoke(&mut self.con)
            .unwrap();
        assert_eq!(got.as_deref(), Some("OK"));
        let released: i64 = self
            .release
            .key(&self.name)
            .key(&self.channel)
            .key(&self.timeouts)
            .arg(&id[..])
            .arg(1)
            .arg(now_ms())
            .arg("publish")
            .invoke(&mut self.con)
            .unwrap();
        assert_eq!(released, 1);
    }
}

fn semaphore(c: &mut Criterion) {
    let server = RedisServer::start();
    pin([&server]);
    let client = LockClient::builder(server.url()).build().unwrap();
    let sem = client.semaphore("bench:sem").unwrap();
    sem.ensure_permits(4).unwrap();
    let mut floor = RedissonFloor::new(&server, "bench:floor");
    let mut con = server.conn();
    let _: i64 = redis::cmd("SET")
        .arg("bench:floor")
        .arg(4)
        .query(&mut con)
        .map(|()| 0)
        .unwrap();
    let ours = || {
        let permit = sem.try_acquire().unwrap().unwrap();
        assert!(permit.unlock().unwrap().was_held());
    };
    let names = ["redlease_permit_acquire_release", "floor_redisson_evalsha"];
    let (ta, tb) = side_by_side(c, "semaphore", names, 3000, ours, || {
        floor.acquire_release();
    });
    report_p99("permit acquire+release vs Redisson's scripts", ta, tb);
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = semaphore
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
