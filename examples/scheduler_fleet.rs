//! A scheduler fleet that elects a leader and survives killing it: several
//! scheduler processes campaign for one election; the leader "schedules" by
//! writing entries to a store in Redis that refuses a term lower than the
//! highest it has seen, so a deposed leader's late write can never land.
//!
//! ```text
//! cargo run --example scheduler_fleet
//! ```
//!
//! The example starts three copies of itself as schedulers
//! (`scheduler_fleet scheduler`), finds the leader's process through
//! `Election::leader` (its owner's session record names its pid), SIGKILLs it,
//! and checks that a new leader with a higher term took over; then pauses that
//! one (SIGSTOP) past its lease, lets a third lead, resumes it, and checks that
//! its late write was refused and every entry the store accepted came in term
//! order. Talks to `REDIS_URL` like
//! `basic`, or starts a private `redis-server`. Exits non-zero when a check
//! fails.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use private_server::redis_url;
use redlease::{LockClient, LockOptions};

const SCHEDULERS: usize = 3;
const ELECTION: &str = "scheduler";
const PREFIX: &str = "sched:lock:";
/// The leaders' lease: a killed leader is replaced this long after it died.
const TTL: Duration = Duration::from_secs(2);
/// How long the parent waits for anything it expects.
const PATIENCE: Duration = Duration::from_secs(30);

/// The store's write: accepted only with a term at least the highest it has
/// seen. KEYS[1] the store's highest term, KEYS[2] its log. ARGV[1] term,
/// ARGV[2] entry. Returns 1 written, 0 refused (a later leader wrote already).
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < seen then
  redis.call('INCR', KEYS[1] .. ':refused')
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
";

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("scheduler") {
        let url = args.next().ok_or("scheduler needs a url")?;
        return scheduler(&url);
    }
    let (url, private) = redis_url()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let () = redis::cmd("DEL")
        .arg("sched:store:term")
        .arg("sched:store:term:refused")
        .arg("sched:store:log")
        .query(&mut con)?;
    let me = std::env::current_exe()?;
    let mut children: Vec<Child> = (0..SCHEDULERS)
        .map(|_| Command::new(&me).args(["scheduler", &url]).spawn())
        .collect::<Result<_, _>>()?;
    let outcome = check(&url, &mut children, &mut con);
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(private);
    outcome
}

/// Kills the leader and checks the take-over and the store.
fn check(
    url: &str,
    children: &mut [Child],
    con: &mut redis::Connection,
) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url).key_prefix(PREFIX).build()?;
    let election = client.election(ELECTION)?;
    // A leader of ours: an earlier run's may still hold the name until its lease
    // runs out.
    let ours: Vec<u32> = children.iter().map(Child::id).collect();
    let pid_of = |l: &redlease::Leader| l.owner().session().map(redlease::Session::pid);
    let first = wait_for("a leader among our schedulers", || {
        Ok(election
            .leader()?
            .filter(|l| pid_of(l).is_some_and(|p| ours.contains(&p))))
    })?;
    let pid = first
        .owner()
        .session()
        .map(redlease::Session::pid)
        .ok_or("no owner")?;
    println!("term {} led by pid {pid}", first.term());
    wait_for("the first leader's entries", || {
        Ok((entries(con)?.len() >= 3).then_some(()))
    })?;
    let leader = children
        .iter_mut()
        .find(|c| c.id() == pid)
        .ok_or("the leader is none of our schedulers")?;
    leader.kill()?; // SIGKILL: no resign, no release; its lease runs out
    leader.wait()?;
    let killed = Instant::now();
    println!("killed pid {pid}");
    let next = wait_for("a new leader", || {
        Ok(election
            .leader()?
            .filter(|l| l.term() > first.term() && pid_of(l).is_some_and(|p| ours.contains(&p))))
    })?;
    let took = killed.elapsed();
    let next_pid = next.owner().session().map(redlease::Session::pid);
    println!(
        "term {} led by pid {next_pid:?}, {took:?} after the kill",
        next.term()
    );
    if next_pid == Some(pid) {
        return Err("the dead leader leads again".into());
    }
    wait_for("the new leader's entries", || {
        let log = entries(con)?;
        Ok(log.iter().any(|(t, _)| *t == next.term()).then_some(()))
    })?;

    // Now a leader that is deposed without dying: paused (SIGSTOP) past its
    // lease, it wakes up still writing under its old term.
    let paused = next_pid.ok_or("no owner")?;
    signal("-STOP", paused)?;
    println!("paused pid {paused}");
    let third = wait_for("a leader after the paused one", || {
        Ok(election.leader()?.filter(|l| {
            l.term() > next.term() && pid_of(l).is_some_and(|p| ours.contains(&p) && p != paused)
        }))
    })?;
    println!("term {} led by pid {:?}", third.term(), pid_of(&third));
    wait_for("the third leader's entries", || {
        let log = entries(con)?;
        Ok(log.iter().any(|(t, _)| *t == third.term()).then_some(()))
    })?;
    signal("-CONT", paused)?;
    let refused = wait_for("the paused leader's late write to be refused", || {
        let refused: Option<u64> = redis::cmd("GET")
            .arg("sched:store:term:refused")
            .query(con)?;
        Ok(refused.filter(|n| *n > 0))
    })?;
    let log = entries(con)?;
    if !log.windows(2).all(|w| w[0].0 <= w[1].0) {
        return Err(format!("the store accepted an entry out of term order: {log:?}").into());
    }
    let after = log.iter().skip_while(|(t, _)| *t < third.term());
    if after.clone().any(|(t, _)| *t < third.term()) {
        return Err("a deposed leader's write landed after its successor's".into());
    }
    println!(
        "{} entries accepted in term order; {refused} late write(s) of the deposed leader refused",
        log.len()
    );
    Ok(())
}

/// Sends `kill <sig>` to `pid`, one of our schedulers.
fn signal(sig: &str, pid: u32) -> Result<(), Box<dyn Error>> {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {sig} {pid} failed").into())
    }
}

/// The store's log: `(term, entry)` in the order accepted.
fn entries(con: &mut redis::Connection) -> Result<Vec<(u64, String)>, Box<dyn Error>> {
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg("sched:store:log")
        .arg(0)
        .arg(-1)
        .query(con)?;
    lines
        .iter()
        .map(|l| {
            let (term, entry) = l.split_once(' ').ok_or("a garbled entry")?;
            Ok((term.parse()?, entry.to_owned()))
        })
        .collect()
}

/// Calls `f` every 50 ms until it returns a value, for [`PATIENCE`] at most.
fn wait_for<T>(
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, Box<dyn Error>>,
) -> Result<T, Box<dyn Error>> {
    let until = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = f()? {
            return Ok(value);
        }
        if Instant::now() >= until {
            return Err(format!("no {what} within {PATIENCE:?}").into());
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// One scheduler process: campaigns, and while leader writes one entry every
/// 100 ms under its term, until its leadership ends or the store refuses its
/// term; then campaigns again.
fn scheduler(url: &str) -> Result<(), Box<dyn Error>> {
    let client = LockClient::builder(url).key_prefix(PREFIX).build()?;
    let election = client.election(ELECTION)?;
    let store = redis::Script::new(FENCED_WRITE);
    let mut con = redis::Client::open(url)?.get_connection()?;
    let pid = std::process::id();
    loop {
        let leadership = election
            .campaign_with(&LockOptions::new().ttl(TTL))?
            .ok_or("campaign ended")?;
        let term = leadership.term();
        let mut seq = 0u64;
        // The store's fence, not `is_held()`, is what keeps a deposed leader's
        // write out: a pause can fall between any check and the write.
        let mut write = |seq: u64| -> Result<bool, Box<dyn Error>> {
            let written: i64 = store
                .key("sched:store:term")
                .key("sched:store:log")
                .arg(term)
                .arg(format!("pid {pid} job {seq}"))
                .invoke(&mut con)?;
            if written == 0 {
                eprintln!("pid {pid}: term {term} deposed; its write was refused");
            }
            Ok(written == 1)
        };
        loop {
            seq += 1;
            if !write(seq)? {
                break;
            }
            // The next tick, or the loss of the lease: then the job in hand is
            // written one last time, late, as a real scheduler would.
            if leadership
                .lost()
                .recv_timeout(Duration::from_millis(100))
                .is_ok()
            {
                let _ = write(seq + 1)?;
                break;
            }
        }
    }
}
