//! What a stable partition group costs Redis, beside 64 plain renewed leases
//! and the raw floor, in one run.
//!
//! Three setups on one server, each measured over the same window: (1) a group
//! of 8 members (8 clients) × 64 partitions, balanced and stable (TTL 3 s, a
//! round every second, partitions renewed every second by each client's renewal
//! thread); (2) the same 64 leases as plain locks, 8 per client on 8 clients
//! (TTL 3 s, renewed every second), no group; (3) the floor: the 64 keys renewed
//! by one pipeline per second of one raw `PEXPIRE key 3000` each, what any client
//! must send at least to keep 64 leases, and no membership at all. For each:
//! requests per second (`EVALSHA` + `PEXPIRE` + other top-level calls Redis
//! counts, script-internal commands excluded), commands per second (every
//! command Redis executed, those inside scripts included), and Redis's CPU as
//! a share of one core.
//!
//! Run: `cargo bench --bench partitions`; `REDLEASE_BENCH_SECS` (default 6) and
//! `REDLEASE_BENCH_ROUNDS` (default 3; medians printed) change the run;
//! `REDLEASE_BENCH_PIN=1` pins `redis-server` to core 0 and this process to
//! core 1.

#![expect(
    clippy::cast_precision_loss,
    reason = "counts and CPU seconds shown as rates stay far below 2^52"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, Member};
use support::RedisServer;
use support::bench::{env, pin, redis_cpu};

const TTL: Duration = Duration::from_secs(3);
const M: u32 = 64;
const MEMBERS: usize = 8;

/// Per second over a window: top-level requests, all commands, Redis CPU.
#[derive(Clone, Copy, Debug)]
struct Cost {
    requests: f64,
    commands: f64,
    cpu: f64,
}

/// Commands inside scripts, as `INFO commandstats` counts them beside the
/// scripts' own calls.
const INNER: [&str; 10] = [
    "time", "hset", "hgetall", "pttl", "mget", "hdel", "get", "set", "pexpire", "incr",
];

/// Measures `secs` seconds of whatever runs now.
fn measure(server: &RedisServer, secs: u64, raw_pexpire: bool) -> Cost {
    server.reset_stats();
    let cpu0 = redis_cpu(&mut server.conn());
    let t = Instant::now();
    thread::sleep(Duration::from_secs(secs));
    let stats = server.command_stats();
    let cpu = (redis_cpu(&mut server.conn()) - cpu0) / t.elapsed().as_secs_f64();
    let el = t.elapsed().as_secs_f64();
    let ours = |(name, _): &&(String, u64)| {
        !matches!(
            name.as_str(),
            "info" | "config|resetstat" | "client|setinfo"
        )
    };
    let commands: u64 = stats.iter().filter(ours).map(|(_, c)| c).sum();
    // With scripts, the inner commands are counted too: leave them out of the
    // requests; the raw floor's PEXPIREs are requests themselves.
    let inner: u64 = stats
        .iter()
        .filter(ours)
        .filter(|(n, _)| INNER.contains(&n.as_str()) && !(raw_pexpire && n == "pexpire"))
        .map(|(_, c)| c)
        .sum();
    Cost {
        requests: (commands - inner) as f64 / el,
        commands: commands as f64 / el,
        cpu,
    }
}

fn clients(server: &RedisServer) -> Vec<LockClient> {
    (0..MEMBERS)
        .map(|_| LockClient::builder(server.url()).ttl(TTL).build().unwrap())
        .collect()
}

fn group(server: &RedisServer, secs: u64) -> Cost {
    let clients = clients(server);
    let members: Vec<Member> = clients
        .iter()
        .map(|c| {
            c.partitions("bench", M)
                .unwrap()
                .round(Duration::from_secs(1))
                .join()
                .unwrap()
        })
        .collect();
    let status = || clients[0].partitions("bench", M).unwrap().status().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !(status().is_balanced()
        && members.iter().map(|m| m.held().len()).sum::<usize>() == M as usize)
    {
        assert!(Instant::now() < until, "the group did not balance");
        thread::sleep(Duration::from_millis(100));
    }
    // Stable: a few rounds with nothing to move.
    thread::sleep(Duration::from_secs(2));
    let cost = measure(server, secs, false);
    assert!(status().is_balanced());
    for m in members {
        m.leave().unwrap();
    }
    cost
}

fn plain(server: &RedisServer, secs: u64) -> Cost {
    let clients = clients(server);
    let guards: Vec<_> = (0..M as usize)
        .map(|i| clients[i % MEMBERS].lock(&format!("plain:{i}")).unwrap())
        .collect();
    thread::sleep(Duration::from_secs(2));
    let cost = measure(server, secs, false);
    assert!(guards.iter().all(redlease::LockGuard::is_held));
    cost
}

fn floor(server: &RedisServer, secs: u64) -> Cost {
    let mut con = server.conn();
    for i in 0..M {
        let _: () = redis::cmd("SET")
            .arg(format!("floor:{i}"))
            .arg("t")
            .arg("PX")
            .arg(3000)
            .query(&mut con)
            .unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renew = {
        let stop = stop.clone();
        let mut con = server.conn();
        thread::spawn(move || {
            // On a fixed schedule, one pipeline per second whatever it takes.
            let mut next = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut pipe = redis::pipe();
                for i in 0..M {
                    pipe.cmd("PEXPIRE")
                        .arg(format!("floor:{i}"))
                        .arg(3000)
                        .ignore();
                }
                let () = pipe.query(&mut con).unwrap();
                next += Duration::from_secs(1);
                thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        })
    };
    let cost = measure(server, secs, true);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    renew.join().unwrap();
    cost
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs = env("REDLEASE_BENCH_SECS", 6);
    let rounds = env("REDLEASE_BENCH_ROUNDS", 3);
    let server = RedisServer::start();
    pin([&server]);
    let mut runs: [Vec<Cost>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..rounds {
        runs[0].push(group(&server, secs));
        runs[1].push(plain(&server, secs));
        runs[2].push(floor(&server, secs));
    }
    let names = [
        "group: 8 members x 64 partitions, stable",
        "64 plain renewed leases (8 clients)",
        "floor: 64 raw PEXPIRE per second",
    ];
    let med = |i: usize, f: fn(&Cost) -> f64| median(runs[i].iter().map(f).collect());
    for (i, name) in names.iter().enumerate() {
        println!(
            "{name:<44} {:>8.1} requests/s {:>8.1} commands/s  redis cpu {:>5.2}%",
            med(i, |c| c.requests),
            med(i, |c| c.commands),
            100.0 * med(i, |c| c.cpu)
        );
    }
    println!(
        "ratios (group / plain / floor): requests {:.2} / {:.2} / 1, commands {:.2} / {:.2} / 1 (median of {rounds} rounds of {secs} s)",
        med(0, |c| c.requests) / med(2, |c| c.requests),
        med(1, |c| c.requests) / med(2, |c| c.requests),
        med(0, |c| c.commands) / med(2, |c| c.commands),
        med(1, |c| c.commands) / med(2, |c| c.commands),
    );
}
