//! A cron fleet running a job once per period: every host fires the job on the
//! same schedule (as one crontab line deployed everywhere would), each firing
//! tries the job's lock once with a minimum hold a little shorter than the
//! period, and only the firing that gets the lock runs the job. The job ends long
//! before the period does; the minimum hold keeps the lock until the period is
//! nearly over, so the hosts that fire a little later in the same period find it
//! taken and skip.
//!
//! ```text
//! cargo run --example cron_fleet
//! ```
//!
//! The example starts four copies of itself as hosts (`cron_fleet host`), each
//! firing every 2 s for four periods, the hosts 60 ms apart (their clocks and
//! cron daemons never agree exactly). Each run appends itself to a record in
//! Redis; the parent then checks that every period ran the job exactly once, and
//! exits non-zero otherwise. Talks to `REDIS_URL` like `basic`, or starts a
//! private `redis-server`.

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fleet::run_copies;
use private_server::redis_url;
use redlease::{LockClient, LockOptions};

const HOSTS: u64 = 4;
const PERIODS: u64 = 4;
/// How often cron fires the job.
const PERIOD: Duration = Duration::from_secs(2);
/// The minimum hold: the period less 800 ms of slack, so that the lock is free
/// again before the next period's first firing even when the acquire came late
/// in its own.
const MIN_HOLD: Duration = Duration::from_millis(1200);
/// How far apart the hosts fire within a period.
const SPREAD: Duration = Duration::from_millis(60);
/// The record each run appends itself to: `<period> <host>`.
const RECORD: &str = "cron:runs";

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("host") {
        let url = args.next().ok_or("host needs a url")?;
        let host: u64 = args.next().ok_or("host needs a number")?.parse()?;
        let start: u64 = args.next().ok_or("host needs a start")?.parse()?;
        return host_loop(&url, host, start);
    }
    let (url, private) = redis_url()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let () = redis::cmd("DEL").arg(RECORD).query(&mut con)?;
    // The schedule's first period starts a second from now (unix ms): time for
    // every host to start and connect.
    let start = unix_ms(SystemTime::now()) + 1000;
    run_copies(usize::try_from(HOSTS)?, "host", |i| {
        vec!["host".into(), url.clone(), i.to_string(), start.to_string()]
    })?;
    let runs: Vec<String> = redis::cmd("LRANGE")
        .arg(RECORD)
        .arg(0)
        .arg(-1)
        .query(&mut con)?;
    let mut failed = false;
    for period in 0..PERIODS {
        let hosts: Vec<&str> = runs
            .iter()
            .filter_map(|r| r.split_once(' '))
            .filter(|(p, _)| *p == period.to_string())
            .map(|(_, h)| h)
            .collect();
        println!("period {period}: run by host(s) {hosts:?}");
        failed |= hosts.len() != 1;
    }
    drop(private);
    if failed || runs.len() != usize::try_from(PERIODS)? {
        return Err(format!("not once per period: {runs:?}").into());
    }
    println!("{HOSTS} hosts, {PERIODS} periods: the job ran exactly once per period");
    Ok(())
}

/// One host: fires the job at each period's start (plus its place in the spread),
/// as cron would, and runs it only if it gets the lock.
fn host_loop(url: &str, host: u64, start: u64) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url).key_prefix("cron:lock:").build()?;
    let mut con = redis::Client::open(url)?.get_connection()?;
    let opts = LockOptions::new().wait(Duration::ZERO).min_hold(MIN_HOLD);
    let period_ms = u64::try_from(PERIOD.as_millis())?;
    let spread_ms = u64::try_from(SPREAD.as_millis())?;
    for period in 0..PERIODS {
        let fire_at = start + period * period_ms + host * spread_ms;
        let now = unix_ms(SystemTime::now());
        thread::sleep(Duration::from_millis(fire_at.saturating_sub(now)));
        let Some(guard) = client.lock_with("report", &opts)? else {
            continue; // another host runs this period's job
        };
        // The job: short, far shorter than the period.
        thread::sleep(Duration::from_millis(100));
        let () = redis::cmd("RPUSH")
            .arg(RECORD)
            .arg(format!("{period} {host}"))
            .query(&mut con)?;
        // Released, but kept until the minimum hold ends.
        if !guard.unlock()?.was_held() {
            return Err(format!("host {host}: the lock ended while the job ran").into());
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch: the shared schedule, as cron's.
fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
