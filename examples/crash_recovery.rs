//! A leader that dies without a word, and its standby taking over within the
//! leader's liveness, not after the lock's 30 s TTL.
//!
//! ```text
//! cargo run --example crash_recovery
//! ```
//!
//! The example starts a copy of itself as the leader (`crash_recovery leader`):
//! a client with `liveness(2 s)` that takes the lock `nightly-report` (fenced)
//! and holds it. This process is the standby: it waits for the same lock, then
//! kills the leader with SIGKILL (an OOM kill, a lost machine: no release is
//! sent). The standby holds the lock about two seconds later, with a higher
//! fence, although the dead leader's lock key still had 28 s of TTL. Talks to
//! `REDIS_URL` like `basic`, or starts a private `redis-server`.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use private_server::redis_url;
use redlease::{LockClient, LockOptions};

const NAME: &str = "example:nightly-report";
const LIVENESS: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(30);

/// The leader: locks, says its fence, and holds until it is killed (at most
/// a minute).
fn leader(url: &str) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url)
        .ttl(TTL)
        .liveness(LIVENESS)
        .build()?;
    let guard = client
        .lock_with(NAME, &LockOptions::new().fencing(true))?
        .ok_or("no lock")?;
    println!("fence {}", guard.fence().unwrap_or(0));
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("leader") {
        return leader(&args.next().ok_or("leader needs a url")?);
    }
    let (url, _private) = redis_url()?;
    let mut leader = Command::new(std::env::current_exe()?)
        .args(["leader", &url])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(leader.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let old_fence: u64 = line.trim().trim_start_matches("fence ").parse()?;
    println!("leader holds `{NAME}` (fence {old_fence}, TTL {TTL:?}, liveness {LIVENESS:?})");

    // The standby declares no liveness itself: any redlease client that waits
    // breaks the lock of a holder whose liveness session ended.
    let standby = LockClient::builder(url.as_str()).ttl(TTL).build()?;
    let killed = std::thread::scope(|s| -> Result<Instant, Box<dyn Error + Send + Sync>> {
        let waiting = s.spawn(|| {
            let opts = LockOptions::new().fencing(true).wait(TTL);
            standby.lock_with(NAME, &opts)
        });
        std::thread::sleep(Duration::from_millis(200));
        leader.kill()?; // SIGKILL: no release, no goodbye
        let killed = Instant::now();
        leader.wait()?;
        let guard = waiting
            .join()
            .map_err(|_| "the standby panicked")??
            .ok_or("the standby's wait ran out")?;
        let took = killed.elapsed();
        let fence = guard.fence().unwrap_or(0);
        println!("standby holds `{NAME}` {took:.2?} after the leader was killed (fence {fence})");
        if fence <= old_fence || took >= TTL / 2 {
            return Err("the standby did not take over in time with a higher fence".into());
        }
        Ok(killed)
    });
    let killed = killed.map_err(|e| e.to_string())?;
    println!(
        "locks broken because their holder's session ended: {} ({:.2?} after the kill)",
        standby.metrics().dead_holders_broken,
        killed.elapsed()
    );
    Ok(())
}
