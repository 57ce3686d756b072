//! Fair turns between processes: four processes of four threads on one fair
//! lock, 1 ms sections, and whether each turn went to the head of the queue.
//!
//! The bench re-executes itself as each worker process (`FAIR_FLEET_ENV` set).
//! Inside each section the holder runs one script that reads the lock's hash
//! field (its own `<uuid>:<thread>`) and the waiting queue
//! (`redisson_lock_queue:{NAME}`, arrival order) and appends both to a log list,
//! so the log is in Redis's order of sections. Afterwards the parent counts a
//! section "in order" when its holder was the head of the queue the previous
//! holder saw (sections after an empty queue are not counted), and sections per
//! process (the uuid part of the field: one client per process).

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use redlease::{LockClient, Release};

use super::support::bench::{all_started, worker_process};
use super::support::redisson::fair::prefix_name;
use super::support::{RedisServer, connect};

/// Set in a worker process: `<url> <run id> <seconds>`.
pub const FAIR_FLEET_ENV: &str = "REDLEASE_BENCH_FAIR_FLEET";
const PROCESSES: usize = 4;
const THREADS: usize = 4;
const SECTION: Duration = Duration::from_millis(1);
const NAME: &str = "bench:fairfleet";

/// Appends `<hash fields>|<queue>` (comma-separated) to the log list.
const NOTE: &str = "local h = redis.call('hkeys', KEYS[1]) \
    local q = redis.call('lrange', KEYS[2], 0, -1) \
    return redis.call('rpush', KEYS[3], table.concat(h, ',') .. '|' .. table.concat(q, ','))";

fn log_key(run: &str) -> String {
    format!("bench:fairfleet:log:{run}")
}

/// Runs a worker (in a process started by [`bench`]): four threads taking
/// turns on the fair lock until the run's time is up.
pub fn worker(job: &str) {
    let mut it = job.split(' ');
    let (url, run, secs) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let run_for = Duration::from_secs_f64(secs.parse().unwrap());
    let client = LockClient::builder(url).build().unwrap();
    let lock = client.fair_lock(NAME).unwrap();
    let mut con = connect(url, Duration::from_secs(2)).unwrap();
    all_started(&mut con, &format!("bench:fairfleet:ready:{run}"), PROCESSES);
    let (stop, log) = (AtomicBool::new(false), log_key(run));
    let queue = prefix_name("redisson_lock_queue", NAME);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut con = connect(url, Duration::from_secs(10)).unwrap();
                let note = redis::Script::new(NOTE);
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.lock().unwrap();
                    let _: i64 = note
                        .key(NAME)
                        .key(&queue)
                        .key(&log)
                        .invoke(&mut con)
                        .unwrap();
                    thread::sleep(SECTION);
                    assert_eq!(guard.unlock().unwrap(), Release::Released);
                }
            });
        }
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
    });
    println!("FAIRWORKER done");
}

/// Sections per client (sorted), and sections in and out of queue order.
fn judge(entries: &[String]) -> (Vec<u64>, u64, u64) {
    let mut per: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut inorder, mut outorder) = (0, 0);
    let mut head: Option<&str> = None;
    for e in entries {
        let (holder, queue) = e.split_once('|').unwrap();
        let client = holder.rsplit_once(':').map_or(holder, |(c, _)| c);
        *per.entry(client).or_default() += 1;
        match head {
            Some(h) if h == holder => inorder += 1,
            Some(_) => outorder += 1,
            None => {}
        }
        head = queue.split(',').next().filter(|h| !h.is_empty());
    }
    (per.into_values().collect(), inorder, outorder)
}

fn f64(n: u64) -> f64 {
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The group: four worker processes for `REDLEASE_FAIR_FLEET_SECS` (3) seconds.
pub fn bench() {
    let secs: f64 = std::env::var("REDLEASE_FAIR_FLEET_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    let server = RedisServer::start();
    let run = "0";
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| worker_process(FAIR_FLEET_ENV, format!("{} {run} {secs}", server.url())))
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(out.contains("FAIRWORKER done"), "a worker failed: {out}");
    }
    let mut con = server.conn();
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(log_key(run))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let (per, inorder, outorder) = judge(&entries);
    let (min, max) = (per.iter().min().unwrap(), per.iter().max().unwrap());
    println!(
        "FIGURE fair fleet 4 processes x 4 threads on one name, {secs} s of 1 ms sections: \
         sections per process {per:?}, min/max {:.2}; order: {inorder} sections to the \
         queue's head, {outorder} not ({} after an empty queue, not counted)",
        f64(*min) / f64((*max).max(1)),
        entries.len() as u64 - inorder - outorder
    );
}
