#![cfg(feature = "cli")]
//! `redlease run` stopped by SIGTERM or SIGINT while its command runs: the signal
//! goes to the command, SIGKILL follows `--kill-grace` later when the command
//! ignores it, then the lock is released and redlease exits 128 + N.
//!
//! Synchronisation is by files the commands write and by process exit; every wait
//! is bounded, with room for a 200 ms stall of a loaded 2-core machine.

mod support;

use std::fs;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::cli::{STARTUP, Scratch, finish, has_line, run_sh, stderr};
use support::{RedisServer, eventually};

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

#[test]
fn a_command_ignoring_the_signal_is_killed_after_the_grace_and_the_lock_released() {
    for (sig, code) in [(Signal::SIGTERM, 128 + 15), (Signal::SIGINT, 128 + 2)] {
        let server = RedisServer::start();
        let dir = Scratch::new("cli-shutdown");
        let f = dir.file("out");
        // `trap '' TERM INT` is inherited by `sleep`: only SIGKILL stops the group.
        let script = format!(
            "trap '' TERM INT; echo started > {0}; sleep 30; echo finished >> {0}",
            f.display()
        );
        let opts = ["--ttl", "30s", "--kill-grace", "1s"];
        let child = run_sh(&server, &opts, "job", &script).spawn().unwrap();
        assert!(eventually(STARTUP, || has_line(&f)));
        assert!(exists(&server, "job"), "held while the command runs");
        let sent = Instant::now();
        signal(&child, sig);
        let out = finish(child);
        let took = sent.elapsed();
        assert_eq!(out.status.code(), Some(code), "{sig}: {}", stderr(&out));
        assert!(
            took >= Duration::from_secs(1),
            "{sig}: SIGKILL before the grace: {took:?}"
        );
        assert!(
            took < Duration::from_millis(1000 + 2500),
            "{sig}: exited {took:?} after the signal"
        );
        assert!(!exists(&server, "job"), "{sig}: the lock was not released");
        assert_eq!(fs::read_to_string(&f).unwrap(), "started\n");
        assert!(stderr(&out).contains("killed"), "{}", stderr(&out));
    }
}

#[test]
fn a_command_that_exits_on_sigterm_within_the_grace_is_not_killed() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli-shutdown");
    let f = dir.file("out");
    // The default action of SIGTERM ends `sh` (and `sleep`, in its group) at once.
    let script = format!("echo started > {}; sleep 30", f.display());
    let opts = ["--ttl", "30s", "--kill-grace", "10s"];
    let child = run_sh(&server, &opts, "job", &script).spawn().unwrap();
    assert!(eventually(STARTUP, || has_line(&f)));
    let sent = Instant::now();
    signal(&child, Signal::SIGTERM);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "waited for the grace: {:?}",
        sent.elapsed()
    );
    assert!(!exists(&server, "job"));
    assert_eq!(stderr(&out), "", "nothing to report");
}
