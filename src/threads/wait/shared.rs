//! What the waiting callers of one client read from the waiter thread: whether
//! pub/sub is up, which channels are subscribed, and which hold a release message
//! no queued caller took.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

/// How long an unclaimed release message is kept for the next waiter to queue.
const UNCLAIMED: Duration = Duration::from_secs(1);
/// Unclaimed messages kept before the stale ones are swept.
const UNCLAIMED_SWEEP: usize = 64;

/// State the callers read from the thread.
#[derive(Default)]
pub(super) struct Shared {
    /// Whether the pub/sub connection is up; when not, waits fall back to polling.
    pub(super) healthy: AtomicBool,
    /// Channels whose subscription Redis has confirmed. The thread removes a channel
    /// here before unsubscribing, so a caller that sees it may skip the handshake.
    pub(super) subscribed: RwLock<HashSet<String>>,
    /// How many channels `subscribed` holds, kept by [`Shared::subscribed_mut`]:
    /// one atomic load tells an acquiring caller that no channel is subscribed.
    pub(super) channels: AtomicUsize,
    /// Set by the caller that publishes a kick, cleared by the thread before it
    /// reads its commands: one kick wakes the thread for every caller behind it.
    pub(super) kicked: AtomicBool,
    /// Which of the topology's subscriber nodes the thread listens on (it moves to
    /// the next when its connection fails); kicks are published there.
    pub(super) node: AtomicUsize,
    /// Channels on which a release message came that no queued caller took, and
    /// when: a caller may have found the lock busy just before it and not be
    /// queued yet. Whichever of the thread (applying the caller's `Wait`) and the
    /// caller (right after sending it) looks first takes it, so a caller that
    /// queues while the thread sleeps on its socket is not left for the thread's
    /// next tick.
    unclaimed: Mutex<HashMap<String, Instant>>,
}

impl Shared {
    /// Changes the subscribed set by `f`, and its count with it, under its lock.
    pub(super) fn subscribed_mut<R>(&self, f: impl FnOnce(&mut HashSet<String>) -> R) -> R {
        let mut subscribed = self.subscribed.write();
        let out = f(&mut subscribed);
        self.channels.store(subscribed.len(), Ordering::Release);
        out
    }

    /// Keeps a release message on `channel` that no queued caller took.
    pub(super) fn keep_unclaimed(&self, channel: &str) {
        let mut kept = self.unclaimed.lock();
        if kept.len() >= UNCLAIMED_SWEEP {
            kept.retain(|_, at| at.elapsed() < UNCLAIMED);
        }
        kept.insert(channel.to_owned(), Instant::now());
    }

    /// Takes the release message kept on `channel`, if one came less than a second
    /// ago. The thread calls it after every release it dispatched to a queued caller
    /// too (that message was claimed), the callers after queueing: the lock makes
    /// one of a caller's `Wait` and the thread's keeping see the other.
    pub(super) fn take_unclaimed(&self, channel: &str) -> bool {
        let mut kept = self.unclaimed.lock();
        if kept.is_empty() {
            return false;
        }
        kept.remove(channel)
            .is_some_and(|at| at.elapsed() < UNCLAIMED)
    }
}
