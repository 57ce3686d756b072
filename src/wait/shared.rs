//! What the waiting callers of one client share with each other and read from the
//! waiter thread: whether pub/sub is up, which channels are subscribed, and who
//! waits for what.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

/// State the callers share with each other and read from the thread.
#[derive(Default)]
pub(super) struct Shared {
    /// Whether the pub/sub connection is up; when not, waits fall back to polling.
    pub(super) healthy: AtomicBool,
    /// Channels whose subscription Redis has confirmed. The thread removes a channel
    /// here before unsubscribing, so a caller that sees it may skip the handshake.
    pub(super) subscribed: RwLock<HashSet<String>>,
    /// Per channel: this client's callers waiting on it, and when the holder's TTL
    /// last seen runs out. Kept by the callers for fair queueing.
    pub(super) local: Mutex<HashMap<String, Local>>,
    /// Set by the caller that publishes a kick, cleared by the thread before it
    /// reads its commands: one kick wakes the thread for every caller behind it.
    pub(super) kicked: AtomicBool,
    pub(super) seq: AtomicU64,
    /// `local.len() + subscribed.len()`, kept beside them so the common case — a
    /// key nobody waits for — is told apart without taking either lock.
    pub(super) interest: AtomicUsize,
}

impl Shared {
    /// Counts `added` channels into and `removed` channels out of [`Shared::interest`].
    pub(super) fn note(&self, added: usize, removed: usize) {
        self.interest.fetch_add(added, Ordering::AcqRel);
        self.interest.fetch_sub(removed, Ordering::AcqRel);
    }
}

/// One channel's local waiters.
#[derive(Default)]
pub(super) struct Local {
    pub(super) waiting: usize,
    pub(super) holder_until: Option<Instant>,
}
