//! What renewing many leases costs Redis and the client, beside its floor, in one run.
//!
//! 10,000 token leases (TTL 3 s, renewed every second) are held for 9 s; Redis's
//! CPU is the change of `used_cpu_sys + used_cpu_user` in `INFO cpu` over those
//! 9 s, the client's the CPU time of this process's threads (`/proc/self/task/*/
//! schedstat`) over the same 9 s, each as a share of one core. The floor holds
//! 10,000 keys the same way and renews them with what any client must send at
//! least: one pipeline per second of one raw `PEXPIRE key 3000` per key, no
//! compare at all. For reference, the same keys renewed the way renewal went
//! before chunks (one pipeline of one compare-and-`PEXPIRE` `EVALSHA` per key).
//!
//! Run: `cargo bench --bench renewal_cpu` (needs `redis-server` on PATH, Linux);
//! `REDLEASE_BENCH_LEASES` (default 10000), `REDLEASE_BENCH_SECS` (default 9) and
//! `REDLEASE_BENCH_ROUNDS` (default 1; rounds alternate ours and the floor, and the
//! medians are printed) change the run; `REDLEASE_BENCH_PIN=1` pins `redis-server`
//! to core 0 and this process to core 1.

#![expect(
    clippy::cast_precision_loss,
    reason = "CPU seconds and counts shown as shares stay far below 2^52"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockGuard};
use support::RedisServer;
use support::bench::{env, pin, redis_cpu};
use support::fleet::taken;

const TTL_MS: u64 = 3000;
const TTL: Duration = Duration::from_millis(TTL_MS);
const EVERY: Duration = Duration::from_secs(1);

/// CPU shares of one core over a window: Redis's and this process's.
#[derive(Clone, Copy)]
struct Cpu {
    redis: f64,
    client: f64,
}

/// This process's CPU seconds so far: the run time of its live threads.
fn client_cpu() -> f64 {
    let nanos: u64 = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    nanos as f64 / 1e9
}

/// Runs `during` for `secs` and measures both sides' CPU share meanwhile.
fn measure(server: &RedisServer, secs: u64, during: impl FnOnce(Instant)) -> Cpu {
    let mut con = server.conn();
    let (redis0, client0) = (redis_cpu(&mut con), client_cpu());
    let start = Instant::now();
    during(start + Duration::from_secs(secs));
    let wall = start.elapsed().as_secs_f64();
    let (redis1, client1) = (redis_cpu(&mut con), client_cpu());
    Cpu {
        redis: 100.0 * (redis1 - redis0) / wall,
        client: 100.0 * (client1 - client0) / wall,
    }
}

/// Ours: `n` leases of one client, renewed by its renewal thread; with
/// `liveness`, the client's session record extended every third of it besides.
fn ours(server: &RedisServer, n: usize, secs: u64, liveness: Option<Duration>) -> Cpu {
    let mut builder = LockClient::builder(server.url())
        .ttl(TTL)
        .renew_interval(EVERY)
        .pool_size(8);
    if let Some(liveness) = liveness {
        builder = builder.liveness(liveness);
    }
    let lc = builder.build().unwrap();
    let guards = taken(&lc, "ours:", n, 4);
    lc.flush();
    // Let the leases' first renewals fall due together, as in a steady fleet.
    thread::sleep(EVERY + EVERY / 2);
    let before = lc.metrics();
    let cpu = measure(server, secs, |end| {
        thread::sleep(end.saturating_duration_since(Instant::now()));
    });
    let after = lc.metrics();
    assert_eq!(after.leases_lost, 0, "{after:?}");
    assert!(guards.iter().all(LockGuard::is_held));
    println!(
        "RENEWAL_CPU ours: {} renewals in {} ticks, {} round trips",
        after.renewals - before.renewals,
        after.renewal_ticks - before.renewal_ticks,
        after.renewal_round_trips - before.renewal_round_trips
    );
    drop(guards);
    cpu
}

/// The floor: `n` keys renewed by one raw pipeline of `PEXPIRE`s per second.
fn floor(server: &RedisServer, n: usize, secs: u64) -> Cpu {
    raw(server, n, secs, |key, _| {
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(key).arg(TTL_MS);
        cmd
    })
}

/// For reference, what renewal sent before chunks: one pipeline per second of one
/// compare-and-`PEXPIRE` script call per key.
fn per_lease(server: &RedisServer, n: usize, secs: u64) -> Cpu {
    let script = redis::Script::new(PER_LEASE);
    let () = script
        .prepare_invoke()
        .load(&mut server.conn())
        .map(drop)
        .unwrap();
    let hash = script.get_hash().to_owned();
    raw(server, n, secs, move |key, token| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&hash).arg(1).arg(key).arg(token).arg(TTL_MS);
        cmd
    })
}

/// The token scheme's extend script, as each lease's renewal sent it before.
const PER_LEASE: &str = r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
if type(v) == 'table' or (v ~= ARGV[1] and v ~= ARGV[1] .. '+') then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// `n` keys with a token each (TTL 3 s), renewed once a second by one raw pipeline
/// of `renew(key, token)` per key for `secs`.
fn raw(server: &RedisServer, n: usize, secs: u64, renew: impl Fn(&str, &str) -> redis::Cmd) -> Cpu {
    let mut con = server.conn();
    let keys: Vec<(String, String)> = (0..n)
        .map(|i| (format!("raw:{i}"), support::bench::floor_token()))
        .collect();
    let mut set = redis::pipe();
    for (key, token) in &keys {
        set.cmd("SET")
            .arg(key)
            .arg(token)
            .arg("PX")
            .arg(TTL_MS)
            .ignore();
    }
    let () = set.query(&mut con).unwrap();
    let mut next = Instant::now() + EVERY;
    let cpu = measure(server, secs, |end| {
        while next < end {
            thread::sleep(next.saturating_duration_since(Instant::now()));
            let mut pipe = redis::pipe();
            for (key, token) in &keys {
                pipe.add_command(renew(key, token));
            }
            let renewed: Vec<i64> = pipe.query(&mut con).unwrap();
            assert!(renewed.iter().all(|&r| r == 1), "a key expired");
            next += EVERY;
        }
        thread::sleep(end.saturating_duration_since(Instant::now()));
    });
    let mut del = redis::pipe();
    for (key, _) in &keys {
        del.del(key).ignore();
    }
    let () = del.query(&mut con).unwrap();
    cpu
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench skips this.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"renewal_cpu".contains(&f)) {
        return;
    }
    let n = usize::try_from(env("REDLEASE_BENCH_LEASES", 10_000)).unwrap();
    let secs = env("REDLEASE_BENCH_SECS", 9);
    let rounds = env("REDLEASE_BENCH_ROUNDS", 1).max(1);
    let server = RedisServer::start();
    pin([&server]);
    let (mut us, mut base, mut before) = (Vec::new(), Vec::new(), Vec::new());
    let mut live = Vec::new();
    let liveness = Duration::from_millis(env("REDLEASE_BENCH_LIVENESS_MS", 2000));
    for round in 1..=rounds {
        let a = ours(&server, n, secs, None);
        let with = ours(&server, n, secs, Some(liveness));
        println!(
            "RENEWAL_CPU round {round}, with liveness {liveness:?}: Redis {:.2} % ({:.3}x of \
             without), client {:.2} % ({:.3}x)",
            with.redis,
            with.redis / a.redis,
            with.client,
            with.client / a.client
        );
        live.push(with);
        let b = floor(&server, n, secs);
        let c = per_lease(&server, n, secs);
        println!(
            "RENEWAL_CPU round {round}, {n} leases, TTL {TTL:?}, {secs} s: \
             Redis {:.2} % of a core (floor {:.2} %, {:.2}x; one script per lease {:.2} %), \
             client {:.2} % (floor {:.2} %, {:.2}x; one script per lease {:.2} %)",
            a.redis,
            b.redis,
            a.redis / b.redis,
            c.redis,
            a.client,
            b.client,
            a.client / b.client,
            c.client
        );
        us.push(a);
        base.push(b);
        before.push(c);
    }
    let m = |v: &[Cpu], f: fn(&Cpu) -> f64| median(v.iter().map(f).collect());
    let (r, rf, rb) = (
        m(&us, |c| c.redis),
        m(&base, |c| c.redis),
        m(&before, |c| c.redis),
    );
    let (c, cf) = (m(&us, |c| c.client), m(&base, |c| c.client));
    let (rl, cl) = (m(&live, |c| c.redis), m(&live, |c| c.client));
    println!(
        "RATIO renewal CPU with liveness {liveness:?}, {n} leases, median of {rounds}: \
         Redis {rl:.2} % ({:.3}x of without), client {cl:.2} % ({:.3}x)",
        rl / r,
        cl / c
    );
    println!(
        "RATIO renewal CPU, {n} leases, median of {rounds}: Redis {r:.2} % vs floor \
         {rf:.2} % ({:.2}x; one script per lease {rb:.2} %, {:.2}x of it); \
         client {c:.2} % vs floor {cf:.2} % ({:.2}x)",
        r / rf,
        r / rb,
        c / cf
    );
}
