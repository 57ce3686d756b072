//! The read-write lock against its floor, measured side by side in one run.
//!
//! - `read`: an uncontended read lock + unlock vs Redisson's own read scripts
//!   (`RedissonReadLock` tryLock + unlock) by raw `EVALSHA` on one connection,
//!   p50 of alternated cycles;
//! - `write`: the same for the write lock (`RedissonWriteLock`'s scripts);
//! - `readers_8`: 8 threads reading one name (each lock, 200 µs of work,
//!   unlock) vs 1 thread: reads/s, which grows when readers run together; and
//!   a writer's wait (p50, max of 20) while 7 readers stream.
//!
//! Run: `cargo bench --bench rwlock`; `REDLEASE_BENCH=read` runs only that
//! group; `REDLEASE_BENCH_PIN=1` pins `redis-server` to core 0 and this process
//! to core 1 (`taskset`).

#![expect(
    clippy::cast_precision_loss,
    reason = "counts shown as rates stay far below 2^52"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use redlease::{LockClient, ReadWriteLock};
use support::RedisServer;
use support::bench::{pin, report_p99, side_by_side, wanted};
use support::redisson::rwlock::{
    READ_LOCK, READ_UNLOCK, WRITE_LOCK, WRITE_UNLOCK, channel, timeout_prefix, unlock_latch,
};
use support::redisson::{self, LEASE_MS};

const ROUNDS: usize = 5_000;

/// Redisson's scripts by `EVALSHA` on one raw connection: the floor.
struct Floor {
    con: redis::Connection,
    field: String,
    scripts: [redis::Script; 4],
}

impl Floor {
    fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            field: redisson::owner(1),
            scripts: [READ_LOCK, READ_UNLOCK, WRITE_LOCK, WRITE_UNLOCK].map(redis::Script::new),
        }
    }

    fn read(&mut self, name: &str) {
        let prefix = timeout_prefix(name, &self.field);
        let got: Option<i64> = self.scripts[0]
            .key(name)
            .key(&prefix)
            .arg(LEASE_MS)
            .arg(&self.field)
            .arg(format!("{}:write", self.field))
            .invoke(&mut self.con)
            .unwrap();
        assert!(got.is_none(), "floor name free");
        let key_prefix = format!("{{{name}}}");
        let latch = unlock_latch(name);
        let _: Option<i64> = self.scripts[1]
            .key(name)
            .key(channel(name))
            .key(&prefix)
            .key(key_prefix)
            .key(latch)
            .arg(0)
            .arg(&self.field)
            .arg("publish")
            .arg(5000)
            .invoke(&mut self.con)
            .unwrap();
    }

    fn write(&mut self, name: &str) {
        let field = format!("{}:write", self.field);
        let got: Option<i64> = self.scripts[2]
            .key(name)
            .arg(LEASE_MS)
            .arg(&field)
            .invoke(&mut self.con)
            .unwrap();
        assert!(got.is_none(), "floor name free");
        let latch = unlock_latch(name);
        let _: Option<i64> = self.scripts[3]
            .key(name)
            .key(channel(name))
            .key(latch)
            .arg(1)
            .arg(LEASE_MS)
            .arg(&field)
            .arg("publish")
            .arg(5000)
            .invoke(&mut self.con)
            .unwrap();
    }
}

fn lock(server: &RedisServer, name: &str) -> ReadWriteLock {
    let client = LockClient::builder(server.url()).build().unwrap();
    client.read_write_lock(name).unwrap()
}

fn read(c: &mut Criterion) {
    if !wanted("read") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let ours = lock(&server, "bench:r");
    let mut floor = Floor::new(&server);
    let names = ["redlease_read_unlock", "floor_redisson_evalsha"];
    let (a, b) = side_by_side(
        c,
        "rwlock_read",
        names,
        ROUNDS,
        || drop(ours.try_read().unwrap().unwrap()),
        || floor.read("bench:f"),
    );
    report_p99("read lock+unlock", a, b);
}

fn write(c: &mut Criterion) {
    if !wanted("write") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let ours = lock(&server, "bench:w");
    let mut floor = Floor::new(&server);
    let names = ["redlease_write_unlock", "floor_redisson_evalsha"];
    let (a, b) = side_by_side(
        c,
        "rwlock_write",
        names,
        ROUNDS,
        || drop(ours.try_write().unwrap().unwrap()),
        || floor.write("bench:f"),
    );
    report_p99("write lock+unlock", a, b);
}

/// Reads per second by `threads` threads on one name for one second.
fn reads_per_second(lock: &ReadWriteLock, threads: usize) -> f64 {
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.read().unwrap();
                    // The work readers share: it overlaps when they run together.
                    thread::sleep(Duration::from_micros(200));
                    drop(g);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
    });
    reads.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn readers_8(_c: &mut Criterion) {
    if !wanted("readers_8") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lock = lock(&server, "bench:8");
    let one = reads_per_second(&lock, 1);
    let eight = reads_per_second(&lock, 8);
    println!(
        "RATIO readers_8: 8 threads {eight:.0} reads/s / 1 thread {one:.0} reads/s = {:.2}x",
        eight / one
    );
    // 7 readers stream while a writer of another client takes the lock 20 times.
    let writer = self::lock(&server, "bench:8");
    let stop = AtomicBool::new(false);
    let mut waits = thread::scope(|s| {
        for _ in 0..7 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.read().unwrap();
                    thread::sleep(Duration::from_micros(200));
                    drop(g);
                }
            });
        }
        let waits: Vec<Duration> = (0..20)
            .map(|_| {
                thread::sleep(Duration::from_millis(20));
                let t = Instant::now();
                drop(writer.write().unwrap());
                t.elapsed()
            })
            .collect();
        stop.store(true, Ordering::Relaxed);
        waits
    });
    waits.sort_unstable();
    println!(
        "FIGURE readers_8 writer wait among 7 streaming readers: p50 {:?}, max {:?}",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = read, write, readers_8
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
