//! A batch-worker fleet: several worker processes share a list of jobs, take a lock
//! per job, and write each result to a store that checks the lock's fencing token, so
//! a worker that lost its lease (paused, partitioned) can never overwrite the work
//! of the worker that took the job after it.
//!
//! ```text
//! cargo run --example worker_fleet
//! ```
//!
//! The example starts three copies of itself as workers (`worker_fleet worker`) over
//! twelve jobs, waits for them, and checks the store: every job done exactly once,
//! with the fence it was done under. Talks to `REDIS_URL` like `basic`, or starts a
//! private `redis-server`.

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::time::Duration;

use fleet::run_copies;
use private_server::redis_url;
use redlease::{LockClient, LockOptions};

const WORKERS: usize = 3;
const JOBS: usize = 12;

/// The store's write: accepted only with a fence above the highest it has seen for
/// the job. KEYS[1] the job's result hash. ARGV[1] fence, ARGV[2] worker, ARGV[3]
/// result. Returns 1 written, 0 refused (a later holder wrote already).
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= seen then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'worker', ARGV[2], 'result', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'writes', 1)
return 1
";

fn main() -> Result<(), Box<dyn Error>> {
    if let Some((url, name)) = fleet::as_worker()? {
        return worker(&url, &name);
    }
    let (url, private) = redis_url()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    for job in 0..JOBS {
        let () = redis::cmd("DEL")
            .arg(format!("fleet:result:{job}"))
            .query(&mut con)?;
        let () = redis::cmd("DEL")
            .arg(format!("fleet:done:{job}"))
            .query(&mut con)?;
    }
    run_copies(WORKERS, "worker", |i| {
        vec!["worker".into(), url.clone(), format!("w{i}")]
    })?;
    for job in 0..JOBS {
        let writes: u64 = redis::cmd("HGET")
            .arg(format!("fleet:result:{job}"))
            .arg("writes")
            .query(&mut con)?;
        let (worker, fence): (String, u64) = redis::cmd("HMGET")
            .arg(format!("fleet:result:{job}"))
            .arg("worker")
            .arg("fence")
            .query(&mut con)?;
        if writes != 1 {
            return Err(format!("job {job} written {writes} times").into());
        }
        println!("job {job:2}: done by {worker} under fence {fence}");
    }
    println!("{JOBS} jobs, {WORKERS} workers: every job done exactly once");
    drop(private);
    Ok(())
}

/// One worker process: walks the job list, and does each job nobody has done,
/// under the job's lock.
fn worker(url: &str, name: &str) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url)
        .key_prefix("fleet:lock:")
        .ttl(Duration::from_secs(10))
        // A guard dropped (a job found done) has its release sent by the I/O
        // thread: the worker goes on to the next job without waiting for it. The
        // client is dropped when the worker returns, which sends what is queued.
        .release_in_background(true)
        .build()?;
    let store = redis::Script::new(FENCED_WRITE);
    let mut con = redis::Client::open(url)?.get_connection()?;
    let opts = LockOptions::new()
        .fencing(true)
        .wait(Duration::from_secs(5));
    for job in 0..JOBS {
        let Some(guard) = client.lock_with(&job.to_string(), &opts)? else {
            continue; // another worker holds it for long: it will do it
        };
        let done: bool = redis::cmd("EXISTS")
            .arg(format!("fleet:done:{job}"))
            .query(&mut con)?;
        if done {
            // Nothing to report: the release goes in the background.
            drop(guard);
            continue;
        }
        let fence = guard.fence().ok_or("fencing was asked for")?;
        // The work, then the write: the store refuses a stale fence.
        let result = format!("{}", job * job);
        let written: i64 = store
            .key(format!("fleet:result:{job}"))
            .arg(fence)
            .arg(name)
            .arg(result)
            .invoke(&mut con)?;
        if written == 1 {
            let () = redis::cmd("SET")
                .arg(format!("fleet:done:{job}"))
                .arg(name)
                .query(&mut con)?;
        }
        if !guard.unlock()?.was_held() {
            // The lease ended before the release: the store's fence check is what
            // kept a late write out.
            eprintln!("{name}: lock on job {job} had ended before its release");
        }
    }
    Ok(())
}
