#![cfg(feature = "cli")]
//! `redlease latch NAME --count N -- COMMAND` and `redlease latch-wait NAME`,
//! run as processes against a real `redis-server`: eight participants, one of
//! them killed (SIGKILL) before its count down, seen within its liveness; all
//! counting down, the waiter exits 0; a failed command seen at once; bad input.

mod support;

use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient};
use support::cli::*;
use support::{RedisServer, eventually};

/// `latch-wait`'s exit code when a participant is gone without counting down.
const DIED: i32 = 80;
/// The participants' liveness, and how long after it a loaded 2-core machine
/// may take to see a killed participant (the waiter's look, a 200 ms stall).
const LIVENESS: Duration = Duration::from_secs(1);
const SEEN_WITHIN: Duration = Duration::from_millis(1500);

/// `redlease latch --url <server> --liveness 1s --count N NAME -- sh -c SCRIPT`.
fn participant(server: &RedisServer, count: &str, name: &str, script: &str) -> Child {
    let url = server.url();
    let args = [
        "latch",
        "--url",
        &url,
        "--liveness",
        "1s",
        "--count",
        count,
        name,
        "--",
        "sh",
        "-c",
        script,
    ];
    redlease(args).spawn().unwrap()
}

/// `redlease latch-wait --url <server> OPTS NAME`.
fn latch_wait(server: &RedisServer, opts: &[&str], name: &str) -> std::process::Command {
    let url = server.url();
    let mut args = vec!["latch-wait", "--url", &url];
    args.extend_from_slice(opts);
    args.push(name);
    redlease(&args)
}

/// How many participants joined the latch `name`.
fn joined(server: &RedisServer, name: &str) -> i64 {
    let record = format!("{{{name}}}:latch");
    let joined: Option<i64> = server.query(redis::cmd("HGET").arg(record).arg("joined"));
    joined.unwrap_or(0)
}

#[test]
fn a_killed_participant_fails_the_waiters_within_its_liveness() {
    let server = RedisServer::start();
    let scratch = Scratch::new("latch-kill");
    let go = scratch.file("go");
    let started = scratch.file("started");
    let hold = hold_until(&started, &go, "REDLEASE_LATCH");
    let mut workers: Vec<Child> = (0..8)
        .map(|_| participant(&server, "8", "merge", &hold))
        .collect();
    assert!(eventually(STARTUP, || joined(&server, "merge") == 8));
    // Our own waiter, timed, and the tool's.
    let client = LockClient::builder(server.url()).build().unwrap();
    let latch = client.open_latch("merge").unwrap();
    let waiter = thread::spawn(move || {
        let r = latch.wait_for(Duration::from_secs(30));
        (Instant::now(), r)
    });
    let cli_waiter = latch_wait(&server, &[], "merge").spawn().unwrap();
    let mut victim = workers.remove(3);
    let killed = Instant::now();
    victim.kill().unwrap();
    let _ = victim.wait();
    let (seen, result) = waiter.join().unwrap();
    let took = seen.saturating_duration_since(killed);
    eprintln!("a killed participant was seen {took:?} after SIGKILL (liveness {LIVENESS:?})");
    assert!(
        matches!(result, Err(Error::ParticipantDied { .. })),
        "{result:?}"
    );
    assert!(took <= SEEN_WITHIN, "{took:?}");
    let out = finish(cli_waiter);
    assert_eq!(out.status.code(), Some(DIED), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("without counting down"),
        "{}",
        stderr(&out)
    );
    // The others count down and exit 0; the count stays at 1.
    std::fs::write(&go, "").unwrap();
    for w in workers {
        let out = finish(w);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let count: Option<i64> = server.query(redis::cmd("GET").arg("merge"));
    assert_eq!(count, Some(1));
}

#[test]
fn the_waiter_exits_0_once_every_participant_counted_down() {
    let server = RedisServer::start();
    let waiter = latch_wait(&server, &["--count", "8", "--wait", "20s"], "merge")
        .spawn()
        .unwrap();
    assert!(eventually(STARTUP, || {
        server.query::<Option<i64>>(redis::cmd("GET").arg("merge")) == Some(8)
    }));
    let workers: Vec<Child> = (0..8)
        .map(|_| participant(&server, "8", "merge", "true"))
        .collect();
    for w in workers {
        let out = finish(w);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = finish(waiter);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_failed_command_leaves_without_counting_down_and_the_waiter_exits_80() {
    let server = RedisServer::start();
    let scratch = Scratch::new("latch-fail");
    let go = scratch.file("go");
    let started = scratch.file("started");
    let hold = format!("{}; exit 3", hold_until(&started, &go, "REDLEASE_LATCH"));
    let worker = participant(&server, "2", "merge", &hold);
    assert!(eventually(STARTUP, || joined(&server, "merge") == 1));
    let waiter = latch_wait(&server, &[], "merge").spawn().unwrap();
    let channel = "redisson_countdownlatch__channel__{merge}";
    assert!(eventually(STARTUP, || {
        let r: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
        r.1 > 0
    }));
    std::fs::write(&go, "").unwrap();
    let out = finish(worker);
    assert_eq!(out.status.code(), Some(3), "the command's status");
    let left = Instant::now();
    let mut waiter = waiter;
    // Woken by the leave, not by the lease's expiry.
    let status = exit_within(&mut waiter, HUNG);
    assert_eq!(status.code(), Some(DIED));
    eprintln!(
        "latch-wait exited {:?} after the failed participant",
        left.elapsed()
    );
    let count: Option<i64> = server.query(redis::cmd("GET").arg("merge"));
    assert_eq!(count, Some(2));
}

#[test]
fn bad_input_exits_64_with_a_clear_message() {
    let server = RedisServer::start();
    let url = server.url();
    let out = output(redlease([
        "latch", "--url", &url, "--count", "0", "merge", "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(
        stderr(&out).contains("at least 1 participant"),
        "{}",
        stderr(&out)
    );
    let out = output(redlease([
        "latch", "--url", &url, "--count", "2", "", "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(stderr(&out).contains("name is empty"), "{}", stderr(&out));
    let out = output(latch_wait(&server, &[], "nothing"));
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(stderr(&out).contains("no latch"), "{}", stderr(&out));
    let out = output(latch_wait(
        &server,
        &["--count", "1", "--wait", "300ms"],
        "slow",
    ));
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
}
