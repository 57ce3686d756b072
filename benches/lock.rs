//! redlease against its floor, measured side by side in one run.
//!
//! Each group times redlease and the hand-written minimum the same work needs on raw
//! `redis` connections, then prints the ratio of their medians:
//! - `uncontended`: lock + unlock vs raw `SET NX PX` + `EVALSHA` compare-and-delete,
//!   p50 and p99 of 20,000 alternated cycles;
//! - `try_lock_held`: one attempt on a held key vs one raw `SET NX PX`;
//! - `parallel_8_keys`: 8 threads on 8 keys vs 8 raw connections;
//! - `renewal`: one `extend` round trip vs one raw `PEXPIRE`, and the renewal
//!   thread's batching (round trips per renewed lease) for 1 … 10,000 leases;
//! - `contention`: 8 threads on one key vs raw clients retrying with no sleep:
//!   acquisitions/s, hand-off p50/p99, fairness, Redis commands per acquisition;
//! - `redlock`: lock + unlock over 3 and 5 masters vs the same raw commands sent to
//!   the nodes in parallel by one thread per node (`SET NX PX`, then
//!   compare-and-delete, on every node, each step done once a majority answered,
//!   as redlease does), and 5 nodes vs 3;
//! - `fleet`: four processes of four threads on one key, 1 ms sections, vs the
//!   same fleet on raw connections retrying with no sleep: sections per process
//!   and their min/max, turns, each client's counters, sections/s
//!   (`REDLEASE_FLEET_MONITOR=1`: also the order the processes subscribed in);
//! - `reentrant`: `Scheme::Reentrant` lock + unlock, and a nested lock + unlock
//!   under a held one, vs Redisson's own scripts (`EVALSHA` tryLock + unlock) on
//!   one raw connection; the token scheme's lock + unlock beside them;
//! - `background`: lock + a dropped guard whose release the I/O thread sends
//!   (`release_in_background`) vs the floor's lock + unlock: p50 of one thread,
//!   and 8 threads each cycling over 8 keys of its own.
//!
//! Run: `cargo bench --bench lock` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH=contention,parallel_8_keys` runs only those groups;
//! `REDLEASE_BENCH_PIN=1` pins each group's `redis-server` to core 0 and this
//! process to core 1 (`taskset`), as a user's machine with a busy server sees it.

#![expect(
    clippy::cast_precision_loss,
    reason = "counts shown as rates stay far below 2^52"
)]

#[path = "lock/background.rs"]
mod background;
#[path = "lock/cost.rs"]
mod cost;
#[path = "lock/fleet.rs"]
mod fleet;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use crossbeam_channel::{Receiver, Sender};
use redlease::{LockClient, Scheme};
use support::bench::{
    RELEASE, eight_threads, floor_token, paired, paired_p50, percentile, pin, report, set_nx_px,
    wanted,
};
use support::redisson::{self, rlock};
use support::{Masters, RedisServer};

/// The floor: what any correct token lock must send, on one raw connection.
struct Floor {
    con: redis::Connection,
    release: redis::Script,
}

impl Floor {
    fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            release: redis::Script::new(RELEASE),
        }
    }

    fn try_set(&mut self, key: &str) -> Option<String> {
        self.try_set_token(key, floor_token())
    }

    fn try_set_token(&mut self, key: &str, token: String) -> Option<String> {
        set_nx_px(&mut self.con, key, &token).then_some(token)
    }

    fn release(&mut self, key: &str, token: &str) {
        let _: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke(&mut self.con)
            .unwrap();
    }

    fn lock_unlock(&mut self, key: &str) {
        let token = self.try_set(key).expect("floor key free");
        self.release(key, &token);
    }

    /// As [`lock_unlock`](Self::lock_unlock) with a token of `len` random hex
    /// digits (at most 64): as long as redlease's, to tell the token's length from
    /// the rest.
    fn lock_unlock_sized(&mut self, key: &str, len: usize) {
        let mut token = floor_token() + &floor_token();
        token.truncate(len);
        let token = self.try_set_token(key, token).expect("floor key free");
        self.release(key, &token);
    }
}

/// The floor of a reentrant lock: Redisson's `RLock` scripts by `EVALSHA`, as
/// Redisson sends them, on one raw connection.
struct RedissonFloor {
    con: redis::Connection,
    try_lock: redis::Script,
    unlock: redis::Script,
    owner: String,
}

impl RedissonFloor {
    fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            try_lock: redis::Script::new(rlock::TRY_LOCK),
            unlock: redis::Script::new(rlock::UNLOCK),
            owner: redisson::owner(1),
        }
    }

    fn lock(&mut self, key: &str) {
        let busy: Option<i64> = self
            .try_lock
            .key(key)
            .arg(redisson::LEASE_MS)
            .arg(&self.owner)
            .invoke(&mut self.con)
            .unwrap();
        assert!(busy.is_none(), "floor key free");
    }

    /// `Some(1)` released, `Some(0)` one hold fewer.
    fn unlock(&mut self, key: &str, channel: &str) -> Option<i64> {
        self.unlock
            .key(key)
            .key(channel)
            .arg(0)
            .arg(redisson::LEASE_MS)
            .arg(&self.owner)
            .invoke(&mut self.con)
            .unwrap()
    }

    fn lock_unlock(&mut self, key: &str, channel: &str, released: i64) {
        self.lock(key);
        assert_eq!(self.unlock(key, channel), Some(released));
    }
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url()).build().unwrap()
}

fn uncontended(c: &mut Criterion) {
    if !wanted("uncontended") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lc = client(&server);
    let mut floor = Floor::new(&server);
    if let Ok(side) = std::env::var("REDLEASE_BENCH_SIDE") {
        // One side alone, for a profiler: `ours` or `floor`, 40,000 cycles.
        let before = cost::cost(None);
        for _ in 0..40_000 {
            if side == "ours" {
                assert!(lc.lock("bench:u").unwrap().unlock().unwrap().was_held());
            } else {
                floor.lock_unlock("bench:f");
            }
        }
        let spent = cost::cost(None) - before;
        println!(
            "COST {side} alone: {:.2} us CPU per cycle",
            spent.cpu_ns as f64 / 4e7
        );
        return;
    }
    let mut g = c.benchmark_group("uncontended");
    g.bench_function("redlease_lock_unlock", |b| {
        b.iter(|| lc.lock("bench:u").unwrap().unlock().unwrap().was_held());
    });
    g.bench_function("floor_set_nx_px_evalsha", |b| {
        b.iter(|| floor.lock_unlock("bench:f"));
    });
    g.finish();
    // 20,000 cycles: enough for a stable p99.
    let (mut ours, mut base) = paired(
        20_000,
        || assert!(lc.lock("bench:u").unwrap().unlock().unwrap().was_held()),
        || floor.lock_unlock("bench:f"),
    );
    let p99 = (percentile(&mut ours, 99), percentile(&mut base, 99));
    report(
        "uncontended lock+unlock",
        percentile(&mut ours, 50),
        percentile(&mut base, 50),
    );
    let ratio = p99.0.as_secs_f64() / p99.1.as_secs_f64();
    println!(
        "RATIO uncontended lock+unlock p99: redlease {:?} / floor {:?} = {ratio:.3}x",
        p99.0, p99.1
    );
    uncontended_rounds(&server, &lc, &mut floor);
}

/// Rounds of paired cycles (`REDLEASE_UNCONTENDED_ROUNDS`, 7): the median of the
/// rounds' p50 ratios, and what each side costs per cycle, here and in
/// `redis-server` (CPU and context switches, from `/proc`), in blocks of cycles
/// of one side alternating with the other's.
fn uncontended_rounds(server: &RedisServer, lc: &LockClient, floor: &mut Floor) {
    const CYCLES: u32 = 4000;
    let rounds: usize = std::env::var("REDLEASE_UNCONTENDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let ours = || assert!(lc.lock("bench:u").unwrap().unlock().unwrap().was_held());
    let (mut ratios, mut costs) = (Vec::new(), [[cost::Cost::default(); 2]; 2]);
    let mut long = Vec::new();
    // The length of our tokens now (`rl2:<tag>:<counter>`), for a floor whose
    // tokens are as long.
    let len = {
        let guard = lc.lock("bench:u").unwrap();
        let value: String = redis::cmd("GET")
            .arg("bench:u")
            .query(&mut floor.con)
            .unwrap();
        assert!(guard.unlock().unwrap().was_held());
        value.len()
    };
    for _ in 0..rounds {
        let (a, b) = paired_p50(CYCLES as usize, ours, || floor.lock_unlock("bench:f"));
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
        let (a, b) = paired_p50(CYCLES as usize, ours, || {
            floor.lock_unlock_sized("bench:f", len);
        });
        long.push(a.as_secs_f64() / b.as_secs_f64());
        for (side, spent) in costs.iter_mut().enumerate() {
            let (me, redis) = (cost::cost(None), cost::cost(Some(server.pid())));
            for _ in 0..CYCLES {
                if side == 0 {
                    ours();
                } else {
                    floor.lock_unlock("bench:f");
                }
            }
            spent[0] += cost::cost(None) - me;
            spent[1] += cost::cost(Some(server.pid())) - redis;
        }
    }
    let all = ratios.clone();
    ratios.sort_by(f64::total_cmp);
    println!(
        "RATIO uncontended lock+unlock p50, median of {rounds} rounds of {CYCLES} paired \
         cycles: {:.3}x (rounds {all:.3?})",
        ratios[rounds / 2]
    );
    long.sort_by(f64::total_cmp);
    println!(
        "RATIO uncontended lock+unlock p50 vs a floor with a token as long as ours \
         ({len} bytes), median of {rounds} rounds: {:.3}x",
        long[rounds / 2]
    );
    commandstats(server, lc, floor);
    let n = f64::from(CYCLES) * rounds as f64;
    for (side, name) in ["redlease", "floor"].iter().enumerate() {
        let [me, redis] = costs[side];
        println!(
            "COST uncontended {name} per cycle: client {:.2} us CPU, {:.3} context switches; \
             redis-server {:.2} us CPU, {:.3} context switches",
            me.cpu_ns as f64 / n / 1e3,
            me.switches as f64 / n,
            redis.cpu_ns as f64 / n / 1e3,
            redis.switches as f64 / n
        );
    }
}

/// What Redis itself spends per uncontended lock + unlock, by `INFO
/// commandstats`: the microseconds of the commands a client sends (`SET`,
/// `EVALSHA`, `DELIFEQ`; a script's own commands are inside its time), for
/// redlease and for the floor, in alternated blocks; and the scripts each runs
/// per cycle. On Valkey 9 redlease sends `DELIFEQ` where the floor runs its
/// compare-and-delete script.
fn commandstats(server: &RedisServer, lc: &LockClient, floor: &mut Floor) {
    const CYCLES: u64 = 5000;
    const SENT: [&str; 4] = ["set", "evalsha", "eval", "delifeq"];
    let mut spent = [(0u64, 0u64); 2];
    for _ in 0..3 {
        for (side, total) in spent.iter_mut().enumerate() {
            server.reset_stats();
            for _ in 0..CYCLES {
                if side == 0 {
                    assert!(lc.lock("bench:u").unwrap().unlock().unwrap().was_held());
                } else {
                    floor.lock_unlock("bench:f");
                }
            }
            for (name, calls, usec) in server.command_usec() {
                if SENT.contains(&name.as_str()) {
                    total.0 += usec;
                }
                if name.starts_with("eval") {
                    total.1 += calls;
                }
            }
        }
    }
    let n = (3 * CYCLES) as f64;
    let per = |(usec, _): (u64, u64)| usec as f64 / n;
    println!(
        "COMMANDSTATS uncontended lock+unlock: redlease {:.2} us / floor {:.2} us of Redis \
         per cycle = {:.3}x; scripts per cycle: redlease {:.2}, floor {:.2}",
        per(spent[0]),
        per(spent[1]),
        per(spent[0]) / per(spent[1]),
        spent[0].1 as f64 / n,
        spent[1].1 as f64 / n
    );
}

fn try_lock_held(c: &mut Criterion) {
    if !wanted("try_lock_held") {
        return;
    }
    let server = RedisServer::start();
    let lc = client(&server);
    let _held = lc.lock("bench:h").unwrap();
    let mut floor = Floor::new(&server);
    let mut g = c.benchmark_group("try_lock_held");
    g.bench_function("redlease_try_lock", |b| {
        b.iter(|| assert!(lc.try_lock("bench:h").unwrap().is_none()));
    });
    g.bench_function("floor_set_nx_px", |b| {
        b.iter(|| assert!(floor.try_set("bench:h").is_none()));
    });
    g.finish();
    let (ours, base) = paired_p50(
        3000,
        || assert!(lc.try_lock("bench:h").unwrap().is_none()),
        || assert!(floor.try_set("bench:h").is_none()),
    );
    report("try_lock on a held key", ours, base);
}

fn parallel_8_keys(_c: &mut Criterion) {
    if !wanted("parallel_8_keys") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lc = client(&server);
    let ours = || {
        eight_threads(1000, |t| {
            let lc = lc.clone();
            let key = format!("bench:p{t}");
            Box::new(move |_| assert!(lc.lock(&key).unwrap().unlock().unwrap().was_held()))
        })
    };
    // The floor's 8 connections live as long as the client's pool, as a raw
    // client's would: a connection's reply buffer costs more to read into once
    // it has been used for a while (the `redis` crate zeroes its free tail before
    // each read), so fresh ones each round would flatter the floor.
    let floors: Arc<parking_lot::Mutex<Vec<Floor>>> = Arc::new(parking_lot::Mutex::new(
        (0..8).map(|_| Floor::new(&server)).collect(),
    ));
    let floor = || {
        eight_threads(1000, |t| {
            let mut lent = Lent {
                floor: floors.lock().pop(),
                home: Arc::clone(&floors),
            };
            let key = format!("bench:q{t}");
            Box::new(move |_| lent.floor.as_mut().expect("8 floors").lock_unlock(&key))
        })
    };
    // Paired rounds, each side first in every other one: the machine's drift
    // between rounds cancels out of each round's ratio.
    let mut ratios = Vec::new();
    let (mut o, mut b) = (Vec::new(), Vec::new());
    // What each side spends, here (all threads, the 8 workers' included once they
    // ended) and in `redis-server`: with Redis on its own core the throughput
    // follows Redis's CPU per cycle.
    let mut redis_costs = [cost::Cost::default(); 2];
    let mut cpus = [0u64; 2];
    let mut measured = |side: usize, run: &dyn Fn() -> f64| {
        let (cpu, redis) = (cost::process_cpu_ns(), cost::cost(Some(server.pid())));
        let rate = run();
        cpus[side] += cost::process_cpu_ns().saturating_sub(cpu);
        redis_costs[side] += cost::cost(Some(server.pid())) - redis;
        rate
    };
    for round in 0..ROUNDS_8X8 {
        let (x, y) = if round % 2 == 0 {
            let x = measured(0, &ours);
            (x, measured(1, &floor))
        } else {
            let y = measured(1, &floor);
            (measured(0, &ours), y)
        };
        ratios.push(x / y);
        o.push(x);
        b.push(y);
    }
    for v in [&mut ratios, &mut o, &mut b] {
        v.sort_by(f64::total_cmp);
    }
    let mid = ROUNDS_8X8 / 2;
    println!(
        "RATIO parallel 8 threads x 8 keys: redlease {:.0} ops/s / floor {:.0} ops/s = {:.3}x \
         (median of {ROUNDS_8X8} paired rounds; rounds {:.3}x to {:.3}x)",
        o[mid],
        b[mid],
        ratios[mid],
        ratios[0],
        ratios[ROUNDS_8X8 - 1]
    );
    let n = 8000.0 * ROUNDS_8X8 as f64;
    for (side, name) in ["redlease", "floor"].iter().enumerate() {
        let redis = redis_costs[side];
        println!(
            "COST parallel 8 threads x 8 keys, {name} per cycle: client {:.2} us CPU; \
             redis-server {:.2} us CPU, {:.3} context switches",
            cpus[side] as f64 / n / 1e3,
            redis.cpu_ns as f64 / n / 1e3,
            redis.switches as f64 / n
        );
    }
}

/// A floor connection lent to one thread of a round, given back when the round ends.
struct Lent {
    floor: Option<Floor>,
    home: Arc<parking_lot::Mutex<Vec<Floor>>>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(floor) = self.floor.take() {
            self.home.lock().push(floor);
        }
    }
}

/// Paired rounds of the 8-threads-on-8-keys figure.
const ROUNDS_8X8: usize = 9;

fn renewal(c: &mut Criterion) {
    if !wanted("renewal") {
        return;
    }
    let server = RedisServer::start();
    let lc = client(&server);
    let guard = lc.lock("bench:r").unwrap();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("bench:raw")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let mut g = c.benchmark_group("renewal");
    g.bench_function("redlease_extend", |b| {
        b.iter(|| guard.extend(Duration::from_secs(30)).unwrap());
    });
    g.bench_function("floor_pexpire", |b| {
        b.iter(|| {
            let _: i64 = redis::cmd("PEXPIRE")
                .arg("bench:raw")
                .arg(30_000)
                .query(&mut con)
                .unwrap();
        });
    });
    g.finish();
    let (ours, base) = paired_p50(
        3000,
        || guard.extend(Duration::from_secs(30)).unwrap(),
        || {
            let _: i64 = redis::cmd("PEXPIRE")
                .arg("bench:raw")
                .arg(30_000)
                .query(&mut con)
                .unwrap();
        },
    );
    report("extend vs PEXPIRE", ours, base);
    drop(guard);
    for n in [1usize, 100, 1000, 10_000] {
        renewal_batch(&server, n, &mut con);
    }
}

/// Holds `n` leases renewed every 100 ms for ~1 s and reports round trips per lease
/// renewal and the time one pipeline of `n` renewals takes, next to a raw `PEXPIRE`.
fn renewal_batch(server: &RedisServer, n: usize, con: &mut redis::Connection) {
    let lc = LockClient::builder(server.url())
        .ttl(Duration::from_secs(3))
        .renew_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let guards: Vec<_> = (0..n)
        .map(|i| lc.try_lock(&format!("bench:n{n}:{i}")).unwrap().unwrap())
        .collect();
    lc.flush();
    let before = lc.metrics();
    thread::sleep(Duration::from_secs(1));
    let after = lc.metrics();
    let renewals = after.renewals - before.renewals;
    let trips = after.renewal_round_trips - before.renewal_round_trips;
    let ticks = after.renewal_ticks - before.renewal_ticks;
    let per_tick = after.renewal_time.saturating_sub(before.renewal_time)
        / u32::try_from(ticks.max(1)).unwrap();
    // Time of one pipeline of n renewals, as the renewal thread sends it.
    let script = redis::Script::new(
        "local v = redis.pcall('GET', KEYS[1]) if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0",
    );
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg(format!("bench:n{n}:{i}"))
            .arg("x")
            .arg(3000);
    }
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE)
        .query(con)
        .unwrap();
    script.prepare_invoke().load(con).unwrap();
    let mut raw = server.conn();
    let (batch, one) = paired_p50(
        if n >= 1000 { 20 } else { 200 },
        || {
            let _: Vec<redis::Value> = pipe.query(con).unwrap();
        },
        || {
            let _: i64 = redis::cmd("PEXPIRE")
                .arg("bench:raw")
                .arg(30_000)
                .query(&mut raw)
                .unwrap();
        },
    );
    println!(
        "RENEWAL {n} leases: {renewals} renewals in {ticks} ticks, {trips} round trips \
         ({:.1} leases/trip), {per_tick:?} per tick on the renewal thread; \
         one {n}-lease pipeline p50 {batch:?} vs one raw PEXPIRE {one:?} ({:.2}x)",
        renewals as f64 / trips.max(1) as f64,
        batch.as_secs_f64() / one.as_secs_f64()
    );
    drop(guards);
}

/// 8 threads on one key for `secs`: acquisitions/s, hand-off p50/p99, per-thread
/// min/max, and Redis commands per acquisition.
struct Contention {
    per_sec: f64,
    handoff_p50: Duration,
    handoff_p99: Duration,
    min: u64,
    max: u64,
    cmds_per_acq: f64,
}

/// Runs `make()`'s closure on 8 threads: each call takes the lock, runs the critical
/// section (first argument), marks the release (second) right before releasing.
fn contend(
    server: &RedisServer,
    secs: f64,
    make: impl Fn() -> Box<dyn FnMut(&dyn Fn(), &dyn Fn()) + Send> + Sync,
) -> Contention {
    let stop = AtomicBool::new(false);
    let released_at = Arc::new(parking_lot::Mutex::new((usize::MAX, Instant::now())));
    let handoffs = parking_lot::Mutex::new(Vec::new());
    let counts: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
    server.reset_stats();
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..8 {
            let mut run = make();
            let (stop, released_at, handoffs, counts) = (&stop, &released_at, &handoffs, &counts);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    run(
                        &|| {
                            // Inside the lock: the hand-off latency, from just before
                            // another thread called its release to this `lock` return.
                            let (by, at) = *released_at.lock();
                            if by != t && by != usize::MAX {
                                handoffs.lock().push(at.elapsed());
                            }
                            counts[t].fetch_add(1, Ordering::Relaxed);
                        },
                        &|| *released_at.lock() = (t, Instant::now()),
                    );
                }
            });
        }
        thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cmds = client_commands(server);
    let per: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let total: u64 = per.iter().sum();
    let mut h = handoffs.into_inner();
    Contention {
        per_sec: total as f64 / elapsed,
        handoff_p50: percentile(&mut h, 50),
        handoff_p99: percentile(&mut h, 99),
        min: per.iter().copied().min().unwrap_or(0),
        max: per.iter().copied().max().unwrap_or(0),
        cmds_per_acq: cmds as f64 / total.max(1) as f64,
    }
}

/// Commands sent by clients since the last `reset_stats`: commandstats also counts
/// the commands a script runs, so those are taken out (`GET`/`DEL`/`INCR`/`PEXPIRE`
/// run only inside scripts here, and each script-run `PUBLISH` follows a `DEL`),
/// as are the stats queries themselves.
fn client_commands(server: &RedisServer) -> u64 {
    let calls = |c: &str| server.command_calls(c);
    let in_scripts = calls("get") + calls("del") * 2 + calls("incr") + calls("pexpire");
    server
        .total_commands()
        .saturating_sub(in_scripts)
        .saturating_sub(calls("info") + calls("client|setinfo") + calls("config|resetstat"))
}

fn contention(_c: &mut Criterion) {
    if !wanted("contention") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lc = client(&server);
    // Default options (renewed leases), as a plain-threaded service locks.
    let ours = contend(&server, 3.0, || {
        let lc = lc.clone();
        Box::new(move |cs: &dyn Fn(), mark: &dyn Fn()| {
            let g = lc.lock("bench:c").unwrap();
            cs();
            mark();
            assert!(g.unlock().unwrap().was_held());
        })
    });
    let base = contend(&server, 3.0, || {
        let mut floor = Floor::new(&server);
        Box::new(move |cs: &dyn Fn(), mark: &dyn Fn()| {
            let token = loop {
                if let Some(t) = floor.try_set("bench:c") {
                    break t;
                }
            };
            cs();
            mark();
            floor.release("bench:c", &token);
        })
    });
    for (name, r) in [("redlease", &ours), ("floor (spin, no sleep)", &base)] {
        println!(
            "CONTENTION {name}: {:.0} acq/s, hand-off p50 {:?} p99 {:?}, per thread min {} max {}, {:.2} redis commands/acq",
            r.per_sec, r.handoff_p50, r.handoff_p99, r.min, r.max, r.cmds_per_acq
        );
    }
    println!(
        "RATIO contention: acquisitions/s {:.3}x of floor, hand-off p50 {:.3}x of floor, \
         fairness min/max {:.2} (floor {:.2})",
        ours.per_sec / base.per_sec,
        ours.handoff_p50.as_secs_f64() / base.handoff_p50.as_secs_f64().max(1e-9),
        ours.min as f64 / ours.max.max(1) as f64,
        base.min as f64 / base.max.max(1) as f64,
    );
}

fn reentrant(c: &mut Criterion) {
    if !wanted("reentrant") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lc = LockClient::builder(server.url())
        .scheme(Scheme::Reentrant)
        .build()
        .unwrap();
    let token = client(&server);
    let mut floor = RedissonFloor::new(&server);
    let (key, fkey) = ("bench:re", "bench:rf");
    let fchan = rlock::channel(fkey);
    let ours = |lc: &LockClient| assert!(lc.lock(key).unwrap().unlock().unwrap().was_held());
    let mut g = c.benchmark_group("reentrant");
    g.bench_function("redlease_reentrant_lock_unlock", |b| b.iter(|| ours(&lc)));
    g.bench_function("redlease_token_lock_unlock", |b| b.iter(|| ours(&token)));
    g.bench_function("floor_redisson_evalsha", |b| {
        b.iter(|| floor.lock_unlock(fkey, &fchan, 1));
    });
    g.finish();
    let (re, base) = paired_p50(3000, || ours(&lc), || floor.lock_unlock(fkey, &fchan, 1));
    report("reentrant lock+unlock vs Redisson's scripts", re, base);
    let (tok, base) = paired_p50(3000, || ours(&token), || floor.lock_unlock(fkey, &fchan, 1));
    report("token lock+unlock vs Redisson's scripts", tok, base);

    // Re-entry: one more hold and its release, under a hold kept throughout.
    let outer = lc.lock(key).unwrap();
    floor.lock(fkey);
    let (nested, base) = paired_p50(3000, || ours(&lc), || floor.lock_unlock(fkey, &fchan, 0));
    report(
        "reentrant re-entry (nested lock+unlock) vs Redisson's",
        nested,
        base,
    );
    assert!(outer.unlock().unwrap().was_held());
    assert_eq!(floor.unlock(fkey, &fchan), Some(1));
}

/// The Redlock floor: one thread per node with a raw connection, fed by a channel,
/// so the bench thread asks every node at once as any Redlock client must.
struct FanOut {
    nodes: Vec<Sender<Option<(u64, bool, String)>>>,
    replies: Receiver<(u64, bool)>,
    handles: Vec<thread::JoinHandle<()>>,
    seq: u64,
}

impl FanOut {
    fn new(masters: &Masters) -> Self {
        let (reply, replies) = crossbeam_channel::unbounded();
        let mut nodes = Vec::new();
        let mut handles = Vec::new();
        for server in &masters.servers {
            let (tx, rx) = crossbeam_channel::unbounded::<Option<(u64, bool, String)>>();
            let mut floor = Floor::new(server);
            let reply = reply.clone();
            handles.push(thread::spawn(move || {
                while let Ok(Some((seq, set, token))) = rx.recv() {
                    let granted = if set {
                        set_nx_px(&mut floor.con, "bench:rl", &token)
                    } else {
                        floor.release("bench:rl", &token);
                        true
                    };
                    let _ = reply.send((seq, granted));
                }
            }));
            nodes.push(tx);
        }
        Self {
            nodes,
            replies,
            handles,
            seq: 0,
        }
    }

    /// Sends one command to every node; waits for `wanted` replies of this round.
    fn round(&mut self, set: bool, token: &str, wanted: usize) -> usize {
        self.seq += 1;
        for node in &self.nodes {
            node.send(Some((self.seq, set, token.to_owned()))).unwrap();
        }
        let mut yes = 0;
        let mut answered = 0;
        while answered < wanted {
            let (seq, granted) = self.replies.recv().unwrap();
            if seq == self.seq {
                answered += 1;
                yes += usize::from(granted);
            }
        }
        yes
    }

    /// `SET NX PX` on every node until a majority granted; compare-and-delete on
    /// every node until a majority answered.
    fn lock_unlock(&mut self) {
        let n = self.nodes.len();
        let token = floor_token();
        assert!(self.round(true, &token, n / 2 + 1) > n / 2);
        self.round(false, &token, n / 2 + 1);
    }
}

impl Drop for FanOut {
    fn drop(&mut self) {
        for node in &self.nodes {
            let _ = node.send(None);
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

fn redlock(c: &mut Criterion) {
    if !wanted("redlock") {
        return;
    }
    let mut p50 = Vec::new();
    let mut g = c.benchmark_group("redlock");
    for n in [3, 5] {
        let masters = Masters::start(n);
        pin(&masters.servers);
        let lc = LockClient::redlock(masters.urls()).build().unwrap();
        let mut floor = FanOut::new(&masters);
        g.bench_function(format!("redlease_{n}_nodes_lock_unlock"), |b| {
            b.iter(|| lc.lock("bench:u").unwrap().unlock().unwrap().was_held());
        });
        g.bench_function(format!("floor_{n}_nodes_parallel_raw"), |b| {
            b.iter(|| floor.lock_unlock());
        });
        let (ours, base) = paired_p50(
            3000,
            || assert!(lc.lock("bench:u").unwrap().unlock().unwrap().was_held()),
            || floor.lock_unlock(),
        );
        report(&format!("redlock {n} nodes lock+unlock"), ours, base);
        p50.push(ours);
    }
    g.finish();
    println!(
        "RATIO redlock 5 nodes vs 3 nodes: p50 {:?} / {:?} = {:.3}x",
        p50[1],
        p50[0],
        p50[1].as_secs_f64() / p50[0].as_secs_f64()
    );
}

fn background_group(_c: &mut Criterion) {
    background::bench();
}

fn fleet_group(_c: &mut Criterion) {
    if wanted("fleet") {
        fleet::bench();
    }
}

criterion_group! {
    name = benches;
    config = support::bench::criterion();
    targets = uncontended, try_lock_held, parallel_8_keys, renewal, contention, redlock, reentrant, background_group, fleet_group
}

fn main() {
    if let Ok(job) = std::env::var(fleet::FLEET_ENV) {
        fleet::worker(&job);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
