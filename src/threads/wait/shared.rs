//! What the waiting callers of one client read from the waiter thread: whether
//! pub/sub is up and which channels are subscribed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::RwLock;

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
}

impl Shared {
    /// Changes the subscribed set by `f`, and its count with it, under its lock.
    pub(super) fn subscribed_mut<R>(&self, f: impl FnOnce(&mut HashSet<String>) -> R) -> R {
        let mut subscribed = self.subscribed.write();
        let out = f(&mut subscribed);
        self.channels.store(subscribed.len(), Ordering::Release);
        out
    }
}
