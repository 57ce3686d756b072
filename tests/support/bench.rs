//! What the benchmarks share: core pinning, as a user's machine with a busy
//! server sees it (when `REDLEASE_BENCH_PIN` is set and `taskset` is there, the
//! given `redis-server`s go to core 0 and this process to core 1, to core 0 as
//! well when it is `same`); the group filter `REDLEASE_BENCH`; paired rounds of
//! redlease and its floor and their percentiles; the 8-thread throughput driver;
//! and the floor token lock's raw commands.

use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use super::{RedisServer, eventually};

/// The floor's release: compare-and-delete, what any correct token lock sends.
pub const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The benchmarks' Criterion settings: 30 samples, 0.5 s warm-up, 2 s measured.
pub fn criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

/// This benchmark run again as a worker process, given its `job` in the
/// environment variable `env`; its stdout piped, its stderr shown.
pub fn worker_process(env: &str, job: String) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(env, job)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Whether group `name` runs: all by default, or those named in `REDLEASE_BENCH`
/// (comma-separated).
pub fn wanted(name: &str) -> bool {
    std::env::var("REDLEASE_BENCH").map_or(true, |v| v.split(',').any(|g| g == name))
}

/// Pins `servers` to core 0 and this process to core 1 when `REDLEASE_BENCH_PIN`
/// is set; says what it did.
pub fn pin<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) {
    if std::env::var_os("REDLEASE_BENCH_PIN").is_none() {
        return;
    }
    let set = |core: &str, pid: u32| {
        Command::new("taskset")
            .args(["-apc", core, &pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // `same`: the benchmark shares core 0 with the servers, so every instruction
    // and wake-up of either side shows in the other's latency.
    let mine = if std::env::var("REDLEASE_BENCH_PIN").is_ok_and(|v| v == "same") {
        "0"
    } else {
        "1"
    };
    let servers = servers.into_iter().all(|s| set("0", s.pid()));
    let ok = servers && set(mine, std::process::id());
    println!("PIN redis-server on core 0, benchmark on core {mine}: {ok}");
}

/// Runs `work(thread)`'s closure on 8 threads, started together, `per_thread` times
/// each (passing the round number); returns calls per second.
pub fn eight_threads(
    per_thread: usize,
    work: impl Fn(usize) -> Box<dyn FnMut(usize) + Send> + Sync,
) -> f64 {
    let barrier = Barrier::new(9);
    let start = thread::scope(|s| {
        for t in 0..8 {
            let mut op = work(t);
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    op(i);
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    f64::from(u32::try_from(8 * per_thread).unwrap_or(u32::MAX)) / start.elapsed().as_secs_f64()
}

/// A floor client's lock token: 32 random hex digits, what redis-py and
/// node-redlock send (a counter would not be unique across processes, so no
/// correct client could send one).
pub fn floor_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The floor's acquire: `SET key token NX PX 30000`; whether it was set.
pub fn set_nx_px(con: &mut redis::Connection, key: &str, token: &str) -> bool {
    let set: redis::Value = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(con)
        .unwrap();
    set != redis::Value::Nil
}

/// Times of `rounds` calls of `a` and of `b`, made alternately so both see the
/// same machine state.
pub fn paired(
    rounds: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        a();
        ta.push(t.elapsed());
        let t = Instant::now();
        b();
        tb.push(t.elapsed());
    }
    (ta, tb)
}

/// Medians of `rounds` calls of `a` and of `b`, made alternately.
pub fn paired_p50(rounds: usize, a: impl FnMut(), b: impl FnMut()) -> (Duration, Duration) {
    let (mut ta, mut tb) = paired(rounds, a, b);
    (percentile(&mut ta, 50), percentile(&mut tb, 50))
}

/// The `p`th percentile of `v` (sorting it); zero when `v` is empty.
pub fn percentile(v: &mut [Duration], p: usize) -> Duration {
    v.sort_unstable();
    v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// Prints `RATIO name: redlease p50 … / floor p50 … = …x`.
pub fn report(name: &str, ours: Duration, floor: Duration) {
    let ratio = ours.as_secs_f64() / floor.as_secs_f64();
    println!("RATIO {name}: redlease p50 {ours:?} / floor p50 {floor:?} = {ratio:.3}x");
}

/// `ours` and `floor` as the criterion functions `names` of `group`, then
/// `rounds` of each made alternately ([`paired`]): their times.
pub fn side_by_side(
    c: &mut criterion::Criterion,
    group: &str,
    names: [&str; 2],
    rounds: usize,
    mut ours: impl FnMut(),
    mut floor: impl FnMut(),
) -> (Vec<Duration>, Vec<Duration>) {
    let mut g = c.benchmark_group(group);
    g.bench_function(names[0], |b| b.iter(&mut ours));
    g.bench_function(names[1], |b| b.iter(&mut floor));
    g.finish();
    paired(rounds, ours, floor)
}

/// Prints `RATIO name: redlease p50 … / floor p50 … = …x (p99 … / …)` of the
/// times of [`paired`] rounds.
pub fn report_p99(name: &str, mut ours: Vec<Duration>, mut floor: Vec<Duration>) {
    let (p50, base) = (percentile(&mut ours, 50), percentile(&mut floor, 50));
    let (p99, base99) = (percentile(&mut ours, 99), percentile(&mut floor, 99));
    let ratio = p50.as_secs_f64() / base.as_secs_f64();
    println!(
        "RATIO {name}: redlease p50 {p50:?} / floor p50 {base:?} = {ratio:.3}x \
         (p99 {p99:?} / {base99:?})"
    );
}

/// For a benchmark's worker process: counts itself in at `ready` (`INCR`), then
/// waits (at most 30 s) until `processes` have; panics if they do not.
pub fn all_started(con: &mut redis::Connection, ready: &str, processes: usize) {
    let _: i64 = redis::cmd("INCR").arg(ready).query(con).unwrap();
    let all_up = eventually(Duration::from_secs(30), || {
        let n: usize = redis::cmd("GET").arg(ready).query(con).unwrap();
        n == processes
    });
    assert!(all_up, "the other workers did not start");
}

/// The number in the environment variable `name`, else `default`.
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A server's CPU seconds so far (`used_cpu_sys + used_cpu_user`), asked on `con`.
pub fn redis_cpu(con: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).unwrap();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "used_cpu_sys" || *k == "used_cpu_user")
        .map(|(_, v)| v.trim().parse::<f64>().unwrap())
        .sum()
}
