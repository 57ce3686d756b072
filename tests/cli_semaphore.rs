#![cfg(feature = "cli")]
//! `redlease run --permits N` and `inspect` of a semaphore, run as processes
//! against a real `redis-server` (in the style of `tests/cli.rs`).
//!
//! Synchronisation is by files the commands write, by the server's state and by
//! process exit; every wait is bounded.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use support::cli::*;
use support::{RedisServer, eventually};

#[test]
fn n_commands_run_at_once_and_the_next_is_refused_or_waits() {
    let server = RedisServer::start();
    let dir = Scratch::new("permits");
    let go = dir.file("go");
    let holders: Vec<(PathBuf, Child)> = (0..2)
        .map(|i| {
            let started = dir.file(&format!("started-{i}"));
            let script = hold_until(&started, &go, "REDLEASE_PERMIT_ID");
            let child = run_sh(&server, &["--permits", "2"], "imports", &script);
            (started, { child }.spawn().unwrap())
        })
        .collect();
    for (started, _) in &holders {
        assert!(
            eventually(STARTUP, || has_line(started)),
            "a holder never ran"
        );
        let id = fs::read_to_string(started).unwrap();
        assert_eq!(id.trim().len(), 32, "the permit id: {id:?}");
    }
    let shown = inspect_json(&server, "imports");
    assert_eq!(shown["format"], "semaphore", "{shown}");
    assert_eq!(
        (shown["held"].as_u64(), shown["free"].as_i64()),
        (Some(2), Some(0))
    );
    let third = output(run_sh(
        &server,
        &["--permits", "2", "--wait", "0"],
        "imports",
        "true",
    ));
    assert_eq!(
        third.status.code(),
        Some(NOT_ACQUIRED),
        "{}",
        stderr(&third)
    );
    assert!(stderr(&third).contains("no permit"), "{}", stderr(&third));
    // A waiting third runs once a holder is done.
    let waiting = run_sh(
        &server,
        &["--permits", "2", "--wait", "15s"],
        "imports",
        "true",
    )
    .spawn()
    .unwrap();
    fs::write(&go, "").unwrap();
    for (_, child) in holders {
        let out = finish(child);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = finish(waiting);
    assert!(out.status.success(), "{}", stderr(&out));
    let count: i64 = server.query(redis::cmd("GET").arg("imports"));
    assert_eq!(count, 2, "every permit given back");
}

#[test]
fn a_weighted_command_takes_k_of_the_n_permits_at_once() {
    let server = RedisServer::start();
    let dir = Scratch::new("weight");
    let (started, go) = (dir.file("started"), dir.file("go"));
    let script = hold_until(&started, &go, "REDLEASE_PERMIT_ID");
    let weighted = ["--permits", "3", "--weight", "2"];
    let heavy = run_sh(&server, &weighted, "imports", &script)
        .spawn()
        .unwrap();
    assert!(eventually(STARTUP, || has_line(&started)), "never ran");
    let ids = fs::read_to_string(&started).unwrap();
    let ids: Vec<&str> = ids.trim().split(',').collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().all(|id| id.len() == 32), "{ids:?}");
    let shown = inspect_json(&server, "imports");
    assert_eq!(
        (shown["held"].as_u64(), shown["free"].as_i64()),
        (Some(2), Some(1))
    );
    // Two more do not fit beside it (nothing taken), one does.
    let busy = output(run_sh(
        &server,
        &["--permits", "3", "--weight", "2", "--wait", "0"],
        "imports",
        "true",
    ));
    assert_eq!(busy.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&busy));
    assert!(stderr(&busy).contains("no 2 permits"), "{}", stderr(&busy));
    let light = output(run_sh(
        &server,
        &["--permits", "3", "--wait", "0"],
        "imports",
        "true",
    ));
    assert!(light.status.success(), "{}", stderr(&light));
    let too_heavy = output(run_sh(
        &server,
        &["--permits", "3", "--weight", "4"],
        "imports",
        "true",
    ));
    assert_eq!(
        too_heavy.status.code(),
        Some(USAGE),
        "{}",
        stderr(&too_heavy)
    );
    assert!(
        stderr(&too_heavy).contains("--weight 4"),
        "{}",
        stderr(&too_heavy)
    );
    fs::write(&go, "").unwrap();
    let out = finish(heavy);
    assert!(out.status.success(), "{}", stderr(&out));
    let count: i64 = server.query(redis::cmd("GET").arg("imports"));
    assert_eq!(count, 3, "both given back");
}

#[test]
fn another_n_for_an_existing_semaphore_is_bad_input_naming_both() {
    let server = RedisServer::start();
    let out = output(run_sh(&server, &["--permits", "3"], "imports", "true"));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = output(run_sh(&server, &["--permits", "5"], "imports", "true"));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    let msg = stderr(&out);
    assert!(msg.contains("has 3 permits") && msg.contains('5'), "{msg}");
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    let count: i64 = server.query(redis::cmd("GET").arg("imports"));
    assert_eq!(count, 3, "left as it was");
}

#[test]
fn bad_permits_and_a_key_of_another_format_are_bad_input() {
    let server = RedisServer::start();
    for (opts, says) in [
        (&["--permits", "0"][..], "at least 1"),
        (&["--permits", "4294967296"][..], "beyond"),
        (&["--permits", "two"][..], "not a number"),
        (&["--permits", "2", "--fence"][..], "cannot be used with"),
    ] {
        let out = output(run_sh(&server, opts, "imports", "true"));
        assert_eq!(out.status.code(), Some(USAGE), "{opts:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{opts:?}: {}", stderr(&out));
    }
    let _: () = server.query(redis::cmd("RPUSH").arg("queue").arg("job"));
    let out = output(run_sh(&server, &["--permits", "2"], "queue", "true"));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("a list"), "{}", stderr(&out));
    let len: i64 = server.query(redis::cmd("LLEN").arg("queue"));
    assert_eq!(len, 1, "nothing written");
}

#[test]
fn a_lost_permit_stops_the_command_with_the_lost_code() {
    let server = RedisServer::start();
    let dir = Scratch::new("permits");
    let (started, go) = (dir.file("started"), dir.file("go"));
    let child = run_sh(
        &server,
        &["--permits", "1", "--ttl", "1500ms", "--kill-grace", "2s"],
        "imports",
        &hold_until(&started, &go, "REDLEASE_PERMIT_ID"),
    )
    .spawn()
    .unwrap();
    assert!(eventually(STARTUP, || has_line(&started)));
    // Someone removes every permit held: the next renewal finds ours gone.
    let _: () = server.query(redis::cmd("DEL").arg("{imports}:timeout"));
    let out = finish(child);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("permit of `imports` lost"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_killed_holders_permit_comes_back_when_its_lease_ends() {
    let server = RedisServer::start();
    let dir = Scratch::new("permits");
    let (started, go) = (dir.file("started"), dir.file("go"));
    let mut holder = run_sh(
        &server,
        &["--permits", "1", "--ttl", "2s"],
        "imports",
        &hold_until(&started, &go, "REDLEASE_PERMIT_ID"),
    )
    .spawn()
    .unwrap();
    assert!(eventually(STARTUP, || has_line(&started)));
    // The holder dies without a word: no release, no renewal.
    holder.kill().unwrap();
    let _ = holder.wait();
    let killed = std::time::Instant::now();
    let next = output(run_sh(
        &server,
        &["--permits", "1", "--wait", "15s"],
        "imports",
        "true",
    ));
    let waited = killed.elapsed();
    // Its command went with it (its keeper ended it); were it still running,
    // this would let it end.
    fs::write(&go, "").unwrap();
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        waited < Duration::from_secs(2) + Duration::from_millis(1500),
        "the permit came back after {waited:?}"
    );
    let count: i64 = server.query(redis::cmd("GET").arg("imports"));
    assert_eq!(count, 1);
}
