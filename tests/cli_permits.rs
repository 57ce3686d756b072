#![cfg(feature = "cli")]
//! `redlease run --permits N` and `inspect` of a semaphore, run as processes
//! against a real `redis-server` (in the style of `tests/cli.rs`).
//!
//! Synchronisation is by files the commands write, by the server's state and by
//! process exit; every wait is bounded.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use support::{RedisServer, eventually};

const HUNG: Duration = Duration::from_secs(20);
const STARTUP: Duration = Duration::from_secs(10);
const USAGE: i32 = 64;
const NOT_ACQUIRED: i32 = 75;
const LOST: i32 = 79;

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A scratch directory for the files commands write, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redlease-permits-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn redlease(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlease"));
    cmd.args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `redlease run --url <server> OPTS NAME -- sh -c SCRIPT`.
fn run_sh(server: &RedisServer, opts: &[&str], name: &str, script: &str) -> Command {
    let url = server.url();
    let mut args = vec!["run", "--url", &url];
    args.extend_from_slice(opts);
    args.extend_from_slice(&[name, "--", "sh", "-c", script]);
    redlease(&args)
}

fn finish(mut child: Child) -> Output {
    let exited = eventually(HUNG, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redlease did not exit within {HUNG:?}");
    }
    child.wait_with_output().unwrap()
}

fn output(mut cmd: Command) -> Output {
    finish(cmd.spawn().unwrap())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn has_line(path: &Path) -> bool {
    fs::read_to_string(path).is_ok_and(|s| s.contains('\n'))
}

/// Writes `$REDLEASE_PERMIT_ID` to `started`, then waits for `go` to exist.
fn hold_until(started: &Path, go: &Path) -> String {
    format!(
        "echo \"$REDLEASE_PERMIT_ID\" > {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        go.display()
    )
}

fn inspect_json(server: &RedisServer, name: &str) -> Value {
    let out = output(redlease(&[
        "inspect",
        "--json",
        "--url",
        &server.url(),
        name,
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn n_commands_run_at_once_and_the_next_is_refused_or_waits() {
    let server = RedisServer::start();
    let dir = Scratch::new();
    let go = dir.file("go");
    let holders: Vec<(PathBuf, Child)> = (0..2)
        .map(|i| {
            let started = dir.file(&format!("started-{i}"));
            let script = hold_until(&started, &go);
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
    let dir = Scratch::new();
    let (started, go) = (dir.file("started"), dir.file("go"));
    let child = run_sh(
        &server,
        &["--permits", "1", "--ttl", "1500ms", "--kill-grace", "2s"],
        "imports",
        &hold_until(&started, &go),
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
    let dir = Scratch::new();
    let (started, go) = (dir.file("started"), dir.file("go"));
    let mut holder = run_sh(
        &server,
        &["--permits", "1", "--ttl", "2s"],
        "imports",
        &hold_until(&started, &go),
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
    // Its command, orphaned, may stop now.
    fs::write(&go, "").unwrap();
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        waited < Duration::from_secs(2) + Duration::from_millis(1500),
        "the permit came back after {waited:?}"
    );
    let count: i64 = server.query(redis::cmd("GET").arg("imports"));
    assert_eq!(count, 1);
}
