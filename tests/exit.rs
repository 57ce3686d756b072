//! A process that ends without dropping its client: its client lives in a
//! `static` (never dropped), and it drops 100 guards whose releases are queued
//! for the I/O thread (`release_in_background`), then returns from `main`, calls
//! `std::process::exit`, or calls it from inside a lock's closure. The process's
//! exit hook sends what is queued before the process is gone, so no key is left.
//!
//! Each test re-executes this test binary running only itself ([`CHILD_ENV`]
//! set): the child is the process that exits. Its client reaches Redis through a
//! proxy that the parent slows down (100 ms each way) just before the child drops
//! its guards, so the I/O thread is still waiting on its first write when the
//! child starts to exit: without the hook, most releases would never be sent.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redlease::LockClient;
use support::proxy::Proxy;
use support::{RedisServer, eventually};

/// Set in the child: how it ends (`return`, `exit`, `callback`).
const CHILD_ENV: &str = "REDLEASE_TEST_EXIT_CHILD";
/// Set in the child: the Redis URL its client connects to (the proxy's).
const URL_ENV: &str = "REDLEASE_TEST_EXIT_URL";
/// The guards the child drops just before it ends.
const GUARDS: usize = 100;
/// The child's read timeout: the hook waits this long at most. Room for the two
/// slowed round trips (~400 ms) its queue needs, and for stalls of a loaded machine.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How much later than the exit the keys may be found gone: 100 ms, plus 400 ms
/// for the parent's own look (a `SCAN`) to run through a 200 ms stall twice. The
/// hook deletes the keys before the process is gone, so the first look finds none;
/// without it they stay for their TTL (30 s), far beyond this and the poll's 2 s.
const GONE_WITHIN: Duration = Duration::from_millis(100 + 400);
/// Generous bounds for the steps a loaded machine may stall in.
const SLACK: Duration = Duration::from_secs(30);

/// The child's client: kept in a `static`, as a program shares one client, so it
/// is never dropped.
static CLIENT: LazyLock<LockClient> = LazyLock::new(|| {
    LockClient::builder(std::env::var(URL_ENV).unwrap())
        .key_prefix("lock:")
        .read_timeout(READ_TIMEOUT)
        .release_in_background(true)
        .build()
        .unwrap()
});

/// The releases queued by a process whose static client ends with `main` are sent
/// before it exits.
#[test]
fn queued_releases_are_sent_when_main_returns_with_a_static_client() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let guards = hold_then_wait();
        drop(guards);
        // Returns from the test, then from the harness's `main`.
        return;
    }
    check_child_leaves_no_key(
        "queued_releases_are_sent_when_main_returns_with_a_static_client",
        "return",
    );
}

/// The releases queued by a process that calls `std::process::exit` are sent
/// before it exits.
#[test]
fn queued_releases_are_sent_when_the_process_calls_exit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let guards = hold_then_wait();
        drop(guards);
        std::process::exit(0);
    }
    check_child_leaves_no_key(
        "queued_releases_are_sent_when_the_process_calls_exit",
        "exit",
    );
}

/// `exit` called from inside a lock's closure neither deadlocks nor leaves the
/// queued releases unsent; the lock held by the closure's guard, which is never
/// dropped, is left to its TTL.
#[test]
fn exit_from_inside_a_lock_closure_sends_the_queued_releases() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let guards = hold_then_wait();
        CLIENT
            .with_lock("outer", || {
                drop(guards);
                std::process::exit(0);
            })
            .unwrap();
        unreachable!("the closure exits");
    }
    let server = check_child_leaves_no_key(
        "exit_from_inside_a_lock_closure_sends_the_queued_releases",
        "callback",
    );
    assert!(
        server.exists("lock:outer"),
        "a guard alive at exit is not released"
    );
}

/// In the child: takes the guards, says so on stdout, and waits for the parent's
/// line on stdin (it slows the proxy first).
fn hold_then_wait() -> Vec<redlease::LockGuard> {
    let guards: Vec<_> = (0..GUARDS)
        .map(|i| CLIENT.try_lock(&format!("item:{i}")).unwrap().unwrap())
        .collect();
    let mut out = std::io::stdout();
    out.write_all(b"held\n").unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    guards
}

/// Runs the child that ends as `how`; checks it ends, and that no key of its
/// guards is left within [`GONE_WITHIN`] of its exit. Returns the server.
fn check_child_leaves_no_key(test: &str, how: &str) -> RedisServer {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut child = spawn_child(test, how, &proxy.url());
    let Some(stdout) = child.stdout.take() else {
        unreachable!("piped")
    };
    // The child's line, read on a thread so the wait for it is bounded; the rest
    // of its output is read to its end there too (the harness's report after a
    // return would fail on a closed pipe).
    let (held_tx, held) = crossbeam_channel::bounded(1);
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        // The harness's own lines come first, and its `test … ... ` starts the
        // child's line; EOF ends the loop too.
        let mut line = String::new();
        while !line.trim_end().ends_with("held") {
            line.clear();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
        }
        let _ = held_tx.send(line);
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    let line = held.recv_timeout(SLACK);
    if !line
        .as_deref()
        .is_ok_and(|l| l.trim_end().ends_with("held"))
    {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let _ = reader.join();
        panic!(
            "the child did not take its locks ({line:?}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(keys(&server).len(), GUARDS);

    // The I/O thread's first write now waits 200 ms for its answer, and the
    // releases queued behind it are still queued when the child starts to exit.
    proxy.delay(Duration::from_millis(100));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);

    // The hook waits READ_TIMEOUT at most: the child exits well within SLACK.
    let exited = eventually(SLACK, || child.try_wait().unwrap().is_some());
    let seen = Instant::now();
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    // The pipe closed with the child: the reader ends.
    let stdout = reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(exited, "the child did not exit:\n{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "child: {}\n{stdout}\n{stderr}",
        out.status
    );

    // Polled up to 2 s so a failure shows what was left, but it must be gone
    // within GONE_WITHIN of the exit.
    let gone = eventually(Duration::from_secs(2), || keys(&server).is_empty());
    let after = seen.elapsed();
    let left = keys(&server).len();
    assert!(gone, "{left} of {GUARDS} keys left 2 s after the exit");
    assert!(
        after <= GONE_WITHIN,
        "the keys went {after:?} after the exit"
    );
    server
}

/// The lock keys of the child's guards on the server (`SCAN`, all of them).
fn keys(server: &RedisServer) -> Vec<String> {
    let mut conn = server.conn();
    let iter: redis::Iter<'_, String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg("lock:item:*")
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter(&mut conn)
        .unwrap();
    iter.map(Result::unwrap).collect()
}

/// This test binary again, running only `test`, as the child that ends as `how`.
fn spawn_child(test: &str, how: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, how)
        .env(URL_ENV, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
