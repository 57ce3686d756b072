#![cfg(feature = "cli")]
//! `redlease wait [--timeout D] KEY`, run as a process against a real
//! `redis-server`: exit 0 when the key is free, at once or promptly after a
//! release; 75 at the timeout while it is held; 64 for bad input.

mod support;

use std::time::{Duration, Instant};

use redlease::LockClient;
use support::cli::*;
use support::{RedisServer, eventually};

/// How soon after a release `wait` exits (woken by the release, then its client
/// shut down), with the slack a loaded 2-core machine needs.
const PROMPT: Duration = Duration::from_secs(2);

fn wait(server: &RedisServer, opts: &[&str], key: &str) -> std::process::Command {
    let url = server.url();
    let mut args = vec!["wait", "--url", &url];
    args.extend_from_slice(opts);
    args.push(key);
    redlease(&args)
}

#[test]
fn wait_exits_0_at_once_for_a_free_key() {
    let server = RedisServer::start();
    let out = output(wait(&server, &["--timeout", "30s"], "nobody"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn wait_exits_75_at_the_timeout_while_the_key_is_held() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url()).build().unwrap();
    let _guard = holder.lock("job").unwrap();
    let start = Instant::now();
    let out = output(wait(&server, &["--timeout", "1s"], "job"));
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(took >= Duration::from_secs(1), "exited after {took:?}");
    assert!(stderr(&out).contains("still held"), "{}", stderr(&out));
}

#[test]
fn wait_exits_0_promptly_after_a_release() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url()).build().unwrap();
    let guard = holder.lock("job").unwrap();
    let mut child = wait(&server, &[], "job").spawn().unwrap();
    // Its first look marked the token: it waits for the release.
    assert!(eventually(STARTUP, || {
        server
            .query::<String>(redis::cmd("GET").arg("job"))
            .ends_with('+')
    }));
    assert!(child.try_wait().unwrap().is_none(), "exited while held");
    let released = Instant::now();
    let _ = guard.unlock().unwrap();
    let status = exit_within(&mut child, HUNG);
    let took = released.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(took < PROMPT, "exited {took:?} after the release");
}

#[test]
fn wait_refuses_bad_input_with_64() {
    let server = RedisServer::start();
    let _: () = server.query(redis::cmd("RPUSH").arg("queue").arg("x"));
    let out = output(wait(&server, &["--timeout", "1s"], "queue"));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("holds a list"), "{}", stderr(&out));
    let out = output(wait(&server, &["--timeout", "1s"], ""));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    let out = output(wait(&server, &["--timeout", "soon"], "job"));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

/// How soon `wait` exits after a `redlease run` holder's command exits: the
/// median of [`RUNS`] runs. The release and its message take about a millisecond
/// and each side a process exit; 40 ms leaves a loaded machine room, while a
/// poll or a tick of 50 ms anywhere on the path fails it.
const HANDED_ON: Duration = Duration::from_millis(40);
const RUNS: usize = 7;

#[test]
fn wait_exits_promptly_after_a_run_holders_command_exits() {
    let server = RedisServer::start();
    let dir = Scratch::new("wait-run");
    let (ready, go, exited) = (dir.file("ready"), dir.file("go"), dir.file("exited"));
    let script = format!(
        "touch {ready}; while [ ! -e {go} ]; do sleep 0.01; done; date +%s%N > {exited}",
        ready = ready.display(),
        go = go.display(),
        exited = exited.display(),
    );
    let mut gaps = Vec::new();
    for _ in 0..RUNS {
        for f in [&ready, &go, &exited] {
            let _ = std::fs::remove_file(f);
        }
        let mut holder = run_sh(&server, &[], "job", &script).spawn().unwrap();
        assert!(
            eventually(STARTUP, || ready.exists()),
            "the holder never ran"
        );
        let mut waiter = wait(&server, &[], "job").spawn().unwrap();
        // Its first look marked the token: it waits for the release.
        assert!(eventually(STARTUP, || {
            server
                .query::<Option<String>>(redis::cmd("GET").arg("job"))
                .is_some_and(|v| v.ends_with('+'))
        }));
        std::fs::write(&go, "").unwrap();
        let status = exit_within(&mut waiter, HUNG);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        assert_eq!(status.code(), Some(0));
        assert!(exit_within(&mut holder, HUNG).success());
        let nanos: u64 = std::fs::read_to_string(&exited)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        gaps.push(now.saturating_sub(Duration::from_nanos(nanos)));
    }
    gaps.sort();
    let median = gaps[RUNS / 2];
    eprintln!("command exit to wait's exit: median {median:?} of {gaps:?}");
    assert!(median < HANDED_ON, "median {median:?} of {gaps:?}");
}
