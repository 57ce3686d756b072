//! Turns between processes: four processes of four threads on one key, 1 ms
//! sections, beside the same fleet on raw connections retrying with no sleep.
//!
//! The bench re-executes itself as each worker process (`FLEET_ENV` set). A worker
//! prints its section count, its client's counters (attempts, local hand-offs,
//! wake-ups by release message, yields) and the wall-clock time of each section's
//! start, so the parent can tell turns apart: a turn is a run of sections of one
//! process, and `after` counts whose turn each process's turns followed.

use std::fmt::Write as _;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlease::{LockClient, Release};

use super::support::bench::{RELEASE, all_started, floor_token, set_nx_px, worker_process};
use super::support::{RedisServer, connect};

#[path = "monitor.rs"]
mod monitor;

/// Set in a worker process: `<ours|floor> <url> <index> <run id> <seconds>`.
pub const FLEET_ENV: &str = "REDLEASE_BENCH_FLEET";
const PROCESSES: usize = 4;
const THREADS: usize = 4;
const SECTION: Duration = Duration::from_millis(1);
const KEY: &str = "bench:fleet";

/// A worker process's report.
struct Worker {
    sections: u64,
    counters: [u64; 5],
    stamps: Vec<u64>,
}

/// One fleet run: per-process reports and sections per second in all.
struct Run {
    workers: Vec<Worker>,
    per_sec: f64,
}

/// Runs a worker (in a process started by [`fleet`]) and prints its report.
pub fn worker(job: &str) {
    let mut it = job.split(' ');
    let (kind, url, run, secs) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.nth(1).unwrap(),
        it.next().unwrap(),
    );
    let run_for = Duration::from_secs_f64(secs.parse().unwrap());
    let client = (kind == "ours").then(|| LockClient::builder(url).build().unwrap());
    let mut con = connect(url, Duration::from_secs(2)).unwrap();
    all_started(&mut con, &format!("bench:fleet:ready:{run}"), PROCESSES);
    let stop = AtomicBool::new(false);
    let stamps = parking_lot::Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut mine = Vec::new();
                let mut raw = (client.is_none()).then(|| FloorLock::new(url));
                while !stop.load(Ordering::Relaxed) {
                    if let Some(c) = &client {
                        let guard = c.lock(KEY).unwrap();
                        mine.push(now_us());
                        thread::sleep(SECTION);
                        assert_eq!(guard.unlock().unwrap(), Release::Released);
                    } else if let Some(f) = &mut raw {
                        let token = f.lock();
                        mine.push(now_us());
                        thread::sleep(SECTION);
                        f.unlock(&token);
                    }
                }
                stamps.lock().extend(mine);
            });
        }
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
    });
    let stamps = stamps.into_inner();
    let m = client.map(|c| c.metrics()).unwrap_or_default();
    let mut out = format!(
        "FLEETWORKER {} {} {} {} {} {}\nSTAMPS",
        stamps.len(),
        m.attempts,
        m.handoffs,
        m.wakeups,
        m.yields,
        m.released
    );
    for t in &stamps {
        let _ = write!(out, " {t}");
    }
    println!("{out}");
}

fn now_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// A floor fleet thread: raw `SET NX PX` retried with no sleep, compare-and-delete.
struct FloorLock {
    con: redis::Connection,
    release: redis::Script,
}

impl FloorLock {
    fn new(url: &str) -> Self {
        Self {
            con: connect(url, Duration::from_secs(2)).unwrap(),
            release: redis::Script::new(RELEASE),
        }
    }

    fn lock(&mut self) -> String {
        let token = floor_token();
        loop {
            if set_nx_px(&mut self.con, KEY, &token) {
                return token;
            }
        }
    }

    fn unlock(&mut self, token: &str) {
        let _: i64 = self
            .release
            .key(KEY)
            .arg(token)
            .invoke(&mut self.con)
            .unwrap();
    }
}

/// Starts the four worker processes of `kind` and reads their reports.
fn fleet(server: &RedisServer, kind: &str, run: usize, secs: f64) -> Run {
    let watch = (kind == "ours" && std::env::var_os("REDLEASE_FLEET_MONITOR").is_some())
        .then(|| monitor::Monitor::start(server));
    let children: Vec<Child> = (0..PROCESSES)
        .map(|i| {
            let job = format!("{kind} {} {i} {run} {secs}", server.url());
            worker_process(FLEET_ENV, job)
        })
        .collect();
    if let Some(m) = watch {
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        thread::sleep(Duration::from_secs_f64(secs / 2.0));
        m.report(server, &pids);
    }
    let workers: Vec<Worker> = children
        .into_iter()
        .map(|c| {
            parse(&String::from_utf8_lossy(
                &c.wait_with_output().unwrap().stdout,
            ))
        })
        .collect();
    let total: u64 = workers.iter().map(|w| w.sections).sum();
    Run {
        per_sec: total as f64 / secs,
        workers,
    }
}

fn parse(stdout: &str) -> Worker {
    let line = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("a worker printed no {tag}: {stdout}"))
            .split_whitespace()
            .map(|n| n.parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    };
    let head = line("FLEETWORKER ");
    Worker {
        sections: head[0],
        counters: [head[1], head[2], head[3], head[4], head[5]],
        stamps: line("STAMPS"),
    }
}

/// Turns per process (runs of its sections in the merged order) and, per
/// process, whose turn each of its turns came after.
fn turns(workers: &[Worker]) -> (Vec<u64>, Vec<Vec<u64>>) {
    let mut all: Vec<(u64, usize)> = workers
        .iter()
        .enumerate()
        .flat_map(|(i, w)| w.stamps.iter().map(move |t| (*t, i)))
        .collect();
    all.sort_unstable();
    let n = workers.len();
    let mut turns = vec![0; n];
    let mut after = vec![vec![0; n]; n];
    let mut last: Option<usize> = None;
    for (_, i) in all {
        if last != Some(i) {
            turns[i] += 1;
            if let Some(prev) = last {
                after[i][prev] += 1;
            }
        }
        last = Some(i);
    }
    (turns, after)
}

fn min_max(v: &[u64]) -> f64 {
    let (min, max) = (v.iter().min().unwrap(), v.iter().max().unwrap());
    *min as f64 / (*max).max(1) as f64
}

/// The group: `REDLEASE_FLEET_ROUNDS` (3) paired rounds of `REDLEASE_FLEET_SECS`
/// (5) seconds, ours and the floor's fleet alternating which goes first.
pub fn bench() {
    let rounds: usize = std::env::var("REDLEASE_FLEET_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let secs: f64 = std::env::var("REDLEASE_FLEET_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    let server = RedisServer::start();
    let (mut fair, mut speed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order: [&str; 2] = if round % 2 == 0 {
            ["ours", "floor"]
        } else {
            ["floor", "ours"]
        };
        let mut runs = Vec::new();
        for (k, kind) in order.iter().enumerate() {
            runs.push((*kind, fleet(&server, kind, round * 2 + k, secs)));
        }
        let ours = &runs.iter().find(|r| r.0 == "ours").unwrap().1;
        let floor = &runs.iter().find(|r| r.0 == "floor").unwrap().1;
        for (kind, r) in &runs {
            let sections: Vec<u64> = r.workers.iter().map(|w| w.sections).collect();
            let (t, after) = turns(&r.workers);
            println!(
                "FLEET round {round} {kind}: sections per process {sections:?}, min/max {:.2}, \
                 {:.0} sections/s, turns {t:?}",
                min_max(&sections),
                r.per_sec
            );
            if *kind == "ours" {
                for (i, w) in r.workers.iter().enumerate() {
                    let [attempts, handoffs, wakeups, yields, released] = w.counters;
                    println!(
                        "FLEET   process {i}: {} sections in {} turns (after {:?}), \
                         {attempts} attempts, {handoffs} hand-offs, {} real releases, \
                         {yields} yields, {wakeups} wake-ups",
                        w.sections,
                        t[i],
                        after[i],
                        released - handoffs
                    );
                }
            }
        }
        let s: Vec<u64> = ours.workers.iter().map(|w| w.sections).collect();
        fair.push(min_max(&s));
        speed.push(ours.per_sec / floor.per_sec);
    }
    for v in [&mut fair, &mut speed] {
        v.sort_by(f64::total_cmp);
    }
    let mid = rounds / 2;
    println!(
        "RATIO fleet 4 processes x 4 threads on one key: per-process min/max {:.2} \
         (rounds {:.2} to {:.2}), sections/s {:.2}x of the floor's (rounds {:.2}x to {:.2}x)",
        fair[mid],
        fair[0],
        fair[rounds - 1],
        speed[mid],
        speed[0],
        speed[rounds - 1]
    );
}
