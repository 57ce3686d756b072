//! Counters kept by a client, read as a [`Metrics`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a client's counters, from [`LockClient::metrics`](crate::LockClient::metrics).
///
/// All counts start at zero when the client is built and only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Acquire attempts sent to Redis.
    pub attempts: u64,
    /// Locks acquired.
    pub acquired: u64,
    /// Releases that found the lock still held and deleted it.
    pub released: u64,
    /// Releases (including by `Drop`) that failed with an error.
    pub release_errors: u64,
    /// Renewal commands sent (one per lease per renewal).
    pub renewals: u64,
    /// Renewals that failed (error or no reply in time); retried until validity ends.
    pub renewals_failed: u64,
    /// Round trips the renewal thread made; each carries every lease due then.
    pub renewal_round_trips: u64,
    /// Leases marked lost, for any [`LossReason`](crate::LossReason).
    pub leases_lost: u64,
    /// Waits ended by a release message from the waiter thread.
    pub wakeups: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) release_errors: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewals_failed: AtomicU64,
    pub(crate) renewal_round_trips: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) wakeups: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Metrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            attempts: get(&self.attempts),
            acquired: get(&self.acquired),
            released: get(&self.released),
            release_errors: get(&self.release_errors),
            renewals: get(&self.renewals),
            renewals_failed: get(&self.renewals_failed),
            renewal_round_trips: get(&self.renewal_round_trips),
            leases_lost: get(&self.leases_lost),
            wakeups: get(&self.wakeups),
        }
    }
}
