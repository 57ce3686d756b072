//! What a process's waiters know of the liveness sessions of the holders they
//! met, shared by all of them: the sessions found alive and until when; the
//! looks due when a live holder's session would end (`live.rs` sends them in
//! place of a waiter's attempt); the holders a Redis Cluster looks at in two
//! steps, their record being in another slot (`topology/cluster/live.rs`).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The sessions a look found alive, and until when they surely are (their
/// record's `PTTL` then): a caller polling a busy lock looks at its holder's
/// session once per session period, whatever its polling interval, and the
/// process's callers share the answer. Expired entries go when it grows.
static ALIVE: LazyLock<Mutex<HashMap<String, Instant>>> = LazyLock::new(Mutex::default);

/// Entries [`ALIVE`] holds before it drops the expired ones.
pub(super) const ALIVE_KEPT: usize = 1024;

/// How long a look found the session `key` still alive for, from now.
pub(crate) fn known_alive(key: &str) -> Option<Duration> {
    let until = *ALIVE.lock().get(key)?;
    let left = until.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

/// Notes that the session `key` lives at least until `until`.
pub(crate) fn alive_until(key: String, until: Instant) {
    let mut alive = ALIVE.lock();
    if alive.len() >= ALIVE_KEPT {
        let now = Instant::now();
        alive.retain(|_, t| *t > now);
    }
    alive.insert(key, until);
}

/// The holders a look found alive, by lock key: the holder's token and when the
/// caller that waits for the key is to look again (see [`due`]).
static LOOK_AGAIN: LazyLock<Mutex<HashMap<String, (String, Instant)>>> =
    LazyLock::new(Mutex::default);

/// The token whose look is due for the caller waiting for `lock`, taken out:
/// `None` when none was noted, or it is not due yet (a poll, a release
/// message: the attempt tells more), or it was left long ago by a caller that
/// stopped waiting.
pub(super) fn due(lock: &str) -> Option<String> {
    // No look was ever noted in this process (no liveness holder met): no lock
    // is taken.
    if !LOOKED.load(Ordering::Relaxed) {
        return None;
    }
    let mut looks = LOOK_AGAIN.lock();
    let now = Instant::now();
    if looks.get(lock).is_none_or(|(_, at)| *at > now) {
        return None;
    }
    looks
        .remove(lock)
        .and_then(|(token, at)| (now < at + STALE_LOOK).then_some(token))
}

/// Set once a look is noted in [`LOOK_AGAIN`].
static LOOKED: AtomicBool = AtomicBool::new(false);

/// How long after it a look not made is dropped: its caller stopped waiting.
const STALE_LOOK: Duration = Duration::from_secs(5);

/// Notes that the caller waiting for `lock`, held by `token`, looks again at
/// its holder in `left`.
pub(super) fn look_again_in(lock: &str, token: &str, left: Duration) {
    let mut looks = LOOK_AGAIN.lock();
    let now = Instant::now();
    if looks.len() >= ALIVE_KEPT {
        looks.retain(|_, (_, at)| *at > now);
    }
    looks.insert(lock.to_owned(), (token.to_owned(), now + left));
    LOOKED.store(true, Ordering::Relaxed);
}

/// Token holders of liveness sessions whose record a Redis Cluster keeps in
/// another slot than their lock, by lock key: the holder's token and its
/// session record, for the cluster's look in a step of its own (see
/// [`take_cross`]).
static CROSS_LOOKS: LazyLock<Mutex<HashMap<String, (String, String)>>> =
    LazyLock::new(Mutex::default);

/// Set once [`CROSS_LOOKS`] was written to.
static CROSS_LOOKED: AtomicBool = AtomicBool::new(false);

/// Notes the holder `token` of `lock`, a liveness session's whose record
/// `session` lives in another slot, for the cluster's look ([`take_cross`]).
pub(super) fn note_cross(lock: &str, token: &str, session: String) {
    CROSS_LOOKS
        .lock()
        .insert(lock.to_owned(), (token.to_owned(), session));
    CROSS_LOOKED.store(true, Ordering::Relaxed);
}

/// The holder of `lock` a waiter's attempt just named, when it is the token of
/// a liveness session whose record lives in another slot: its token and its
/// session record.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) fn take_cross(lock: &str) -> Option<(String, String)> {
    if !CROSS_LOOKED.load(Ordering::Relaxed) {
        return None;
    }
    CROSS_LOOKS.lock().remove(lock)
}
