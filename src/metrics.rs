//! Counters kept by a client, read as a [`Metrics`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    /// Redlock only: nodes on which a release found the lock still held and
    /// deleted it, summed over releases. A release over N nodes adds between 0 and
    /// N, and counts as [`released`](Self::released) when it adds a majority; so
    /// `node_releases < released × N` says some releases found the lock already
    /// gone (expired, restarted, never granted) on some nodes. Each node is counted
    /// when it answers, which may be just after `unlock` returned on a majority.
    pub node_releases: u64,
    /// Lease renewals sent (one per lease per renewal — with Redlock, per node —
    /// whether alone or in a script call that renews many, and again for one
    /// re-sent after `NOSCRIPT`).
    pub renewals: u64,
    /// Renewals that failed (error or no reply in time); retried until validity ends.
    pub renewals_failed: u64,
    /// Ticks of the renewal thread: wake-ups that found leases due and set out to
    /// renew them all. A tick makes one round trip (none if no connection could be
    /// had in time), and two more after a `NOSCRIPT` (script load, re-send).
    pub renewal_ticks: u64,
    /// Round trips the renewal thread made: one pipeline per tick carrying every
    /// lease due then, and the script loads and re-sends after a `NOSCRIPT`.
    pub renewal_round_trips: u64,
    /// Time the renewal thread spent on ticks: taking a connection, the round trips.
    pub renewal_time: Duration,
    /// Leases marked lost, for any [`LossReason`](crate::LossReason) but `Shutdown`.
    pub leases_lost: u64,
    /// Waits ended by a release message from the waiter thread.
    pub wakeups: u64,
    /// Locks a releasing guard handed straight to a waiting caller of this client.
    pub handoffs: u64,
    /// Real releases whose message other clients' waiters heard, after which this
    /// client's own waiters held off so that another process takes the key.
    pub yields: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) release_errors: AtomicU64,
    pub(crate) node_releases: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewals_failed: AtomicU64,
    pub(crate) renewal_ticks: AtomicU64,
    pub(crate) renewal_round_trips: AtomicU64,
    pub(crate) renewal_nanos: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) yields: AtomicU64,
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
            node_releases: get(&self.node_releases),
            renewals: get(&self.renewals),
            renewals_failed: get(&self.renewals_failed),
            renewal_ticks: get(&self.renewal_ticks),
            renewal_round_trips: get(&self.renewal_round_trips),
            renewal_time: Duration::from_nanos(get(&self.renewal_nanos)),
            leases_lost: get(&self.leases_lost),
            wakeups: get(&self.wakeups),
            handoffs: get(&self.handoffs),
            yields: get(&self.yields),
        }
    }
}
