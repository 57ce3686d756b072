//! Tests that must count their process's threads run in a process of their own:
//! the test binary re-executes itself running just that test.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::eventually;

/// Set in the re-executed process: the test runs there, alone.
pub const ALONE_ENV: &str = "REDLEASE_TEST_ALONE";

/// Re-executes this test binary running only `test`, with `env` set.
pub fn spawn_self(test: &str, env: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Re-executes this test binary running only the ignored test `test` (a
/// holder process of the other tests), with `env` set, and returns once it
/// printed a line ending in `ready`: the child and the lines it printed before
/// (the test harness's own words may begin a line). Its later output is read
/// and dropped, so that it never blocks on a full pipe. Panics if it ends
/// before `ready`.
pub fn spawn_until_ready(test: &str, env: &[(&str, String)]) -> (Child, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut before = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.ends_with("ready") {
            std::thread::spawn(move || lines.for_each(drop));
            return (child, before);
        }
        before.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the holder process `{test}` ended before it was ready");
}

/// SIGKILLs a holder started by [`spawn_until_ready`] (no release, no last
/// word) and reaps it: the instant of the kill.
pub fn kill_and_reap(mut child: Child) -> std::time::Instant {
    child.kill().unwrap();
    let killed = std::time::Instant::now();
    child.wait().unwrap();
    killed
}

/// Waits (bounded) for a child started by [`spawn_self`]; panics with its output unless it
/// exited 0 having run exactly one test.
pub fn finish(mut child: Child, timeout: Duration) -> Output {
    let exited = eventually(timeout, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        exited && out.status.success() && stdout.contains("1 passed"),
        "child (exited in time: {exited}, {}):\n{stdout}\n{stderr}",
        out.status
    );
    out
}

/// Names of this process's threads that start with `redlease-`.
pub fn redlease_threads() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let comm = task.unwrap().path().join("comm");
        // A thread may exit between the listing and the read.
        if let Ok(name) = std::fs::read_to_string(comm) {
            let name = name.trim_end().to_owned();
            if name.starts_with("redlease-") {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}
