//! What the fleet tests (elections, minimum holds, `lock_all`, `wait_free`,
//! shutdown) build again and again: callers waiting on threads of their own,
//! answered with the moment they returned; the listeners of a name's release
//! channel; and the checks that a key is kept for a minimum hold and freed at
//! its end.

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded};
use redlease::{LockClient, LockGuard, LockOptions, Release};

use super::{RedisServer, eventually};

/// A wait that never runs out within a test.
pub const LONG: Duration = Duration::from_secs(60);
/// How long a caller is watched not returning, to show that it waits.
pub const STILL: Duration = Duration::from_millis(400);
/// A key's expiry seen this early is the server's rounding of a `PX` to the
/// millisecond, not an early release.
pub const ROUNDING: Duration = Duration::from_millis(5);

/// Runs `f` on a thread of its own: its answer and when it came.
pub fn spawned<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Receiver<(T, Instant)> {
    let (tx, rx) = bounded(1);
    thread::spawn(move || {
        let answer = f();
        let _ = tx.send((answer, Instant::now()));
    });
    rx
}

/// Asserts that the caller behind `rx` has not answered within [`STILL`]
/// (`waiting` says what it would have done), runs `release`, and returns the
/// caller's answer (awaited for [`LONG`] at most) and how long after the
/// release it came.
pub fn answer_after<T>(
    rx: &Receiver<(T, Instant)>,
    waiting: &str,
    release: impl FnOnce(),
) -> (T, Duration) {
    assert!(rx.recv_timeout(STILL).is_err(), "{waiting}");
    let released = Instant::now();
    release();
    let (answer, at) = rx.recv_timeout(LONG).expect("no answer after the release");
    let took = at.saturating_duration_since(released);
    println!("answered {took:?} after the release");
    (answer, took)
}

/// `n` locks `<prefix><i>` taken by `client` without waiting, from `threads`
/// threads at once (each name must be free).
pub fn taken(client: &LockClient, prefix: &str, n: usize, threads: usize) -> Vec<LockGuard> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t..n)
                        .step_by(threads)
                        .map(|i| client.try_lock(&format!("{prefix}{i}")).unwrap().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// The release channel of the lock key `key` (a token lock's, as
/// `{lock:job}:released`).
pub fn released(key: &str) -> String {
    format!("{{{key}}}:released")
}

/// Waits (10 s at most) until some client subscribes to `channel`: a waiter
/// listens for the release.
pub fn listening(server: &RedisServer, channel: &str) {
    assert!(
        eventually(Duration::from_secs(10), || server.subscribers(channel) > 0),
        "nobody subscribed to {channel}"
    );
}

/// Options of an acquire that does not wait and holds the lock `d` at least.
pub fn held(d: Duration) -> LockOptions {
    LockOptions::new().wait(Duration::ZERO).min_hold(d)
}

/// `name` taken by `client` without waiting, held `d` at least, and the moment
/// before the acquire was sent (the earliest the hold can have begun).
pub fn hold(client: &LockClient, name: &str, d: Duration) -> (LockGuard, Instant) {
    let began = Instant::now();
    let guard = client.lock_with(name, &held(d)).unwrap().unwrap();
    (guard, began)
}

/// Whether every name of a multi-guard's unlock was released.
pub fn all_released(released: &[redlease::Result<Release>]) -> bool {
    released.iter().all(|r| matches!(r, Ok(Release::Released)))
}

/// Checks that a key read at some moment up to `read_to` expires when a hold of
/// `d` that began at `began` (before the acquire was sent) ends: its `pttl` is at
/// most `d`, and no less than what was left of the hold at `read_to`.
pub fn assert_kept_for(pttl: i64, d: Duration, began: Instant, read_to: Instant) {
    let longest = i64::try_from(d.as_millis()).unwrap();
    let shortest = longest - i64::try_from((read_to - began).as_millis()).unwrap();
    assert!(
        pttl <= longest && pttl >= shortest - 2,
        "PTTL {pttl} ms outside [{shortest}, {longest}]"
    );
}

/// Asserts that `key`, read now, is kept (marked `~`) until a hold of `d` that
/// began at `began` ends, as [`assert_kept_for`] checks.
pub fn assert_kept(server: &RedisServer, key: &str, d: Duration, began: Instant) {
    let v = server
        .value(key)
        .unwrap_or_else(|| panic!("{key} was deleted inside its hold"));
    assert!(v.ends_with('~'), "{key} holds {v}, not a kept token");
    assert_kept_for(server.pttl(key), d, began, Instant::now());
}

/// Asserts that `what` happened at `at`, when a hold ending at `end` ended: not
/// before it (but for [`ROUNDING`]), and less than `after` after it.
pub fn assert_at_end(what: &str, at: Instant, end: Instant, after: Duration) {
    let late = at.saturating_duration_since(end);
    println!("{what} {late:?} after the hold's end");
    assert!(at + ROUNDING >= end, "{what} {:?} early", end - at);
    assert!(late < after, "{what} {late:?} late");
}
