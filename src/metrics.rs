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
    /// Locks this client's waiters broke because their holder's liveness
    /// session had ended (see
    /// [`LockClientBuilder::liveness`](crate::LockClientBuilder::liveness)).
    pub dead_holders_broken: u64,
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
            dead_holders_broken: 0,
        }
    }
}

/// What the `metrics` feature records through the `metrics` crate's facade, so
/// that the application's exporter (Prometheus, `StatsD`, …) shows it. Without the
/// feature every function is empty and [`Hold`] has no size: nothing is measured.
///
/// Labels never name a lock (their number would grow without bound):
/// `redlease_acquisitions_total{outcome, scheme}`, `redlease_wait_seconds{scheme}`,
/// `redlease_hold_seconds{scheme}`, `redlease_leases_held{scheme}`,
/// `redlease_leases_lost_total{reason}`, `redlease_renewals_total{outcome}`,
/// `redlease_dead_holders_broken_total`.
/// `scheme` is what the lease holds, its backend's
/// `Backend::label`: `token`, `legacy`, `reentrant`,
/// `fair`, `rwlock_read`, `rwlock_write` or `semaphore`.
pub(crate) mod export {
    #[cfg(feature = "metrics")]
    use std::time::Instant;

    /// A start time, taken only with the feature (no clock read without it).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Timer(#[cfg(feature = "metrics")] Instant);

    impl Timer {
        pub(crate) fn start() -> Self {
            Timer(
                #[cfg(feature = "metrics")]
                Instant::now(),
            )
        }

        #[cfg(feature = "metrics")]
        fn seconds(self) -> f64 {
            self.0.elapsed().as_secs_f64()
        }
    }

    /// When a guard began holding its lease, and what the lease holds.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Hold {
        #[cfg(feature = "metrics")]
        began: Timer,
        #[cfg(feature = "metrics")]
        scheme: &'static str,
    }

    impl Hold {
        /// A guard of a `scheme` lease begins holding: one more lease held.
        #[cfg_attr(not(feature = "metrics"), expect(unused_variables))]
        pub(crate) fn start(scheme: &'static str) -> Self {
            #[cfg(feature = "metrics")]
            ::metrics::gauge!("redlease_leases_held", "scheme" => scheme).increment(1.0);
            Hold {
                #[cfg(feature = "metrics")]
                began: Timer::start(),
                #[cfg(feature = "metrics")]
                scheme,
            }
        }

        /// The guard released (or handed on) its lease.
        #[cfg_attr(not(feature = "metrics"), expect(clippy::unused_self))]
        pub(crate) fn end(self) {
            #[cfg(feature = "metrics")]
            {
                let scheme = self.scheme;
                ::metrics::gauge!("redlease_leases_held", "scheme" => scheme).decrement(1.0);
                ::metrics::histogram!("redlease_hold_seconds", "scheme" => scheme)
                    .record(self.began.seconds());
            }
        }
    }

    /// A lock call returned `out` (acquired, busy or an error) after waiting
    /// since `began`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables))]
    pub(crate) fn acquisition<T, E>(
        out: &Result<Option<T>, E>,
        scheme: &'static str,
        began: Timer,
    ) {
        #[cfg(feature = "metrics")]
        {
            let outcome = match out {
                Ok(Some(_)) => "acquired",
                Ok(None) => "busy",
                Err(_) => "error",
            };
            let labels = [("outcome", outcome), ("scheme", scheme)];
            ::metrics::counter!("redlease_acquisitions_total", &labels).increment(1);
            ::metrics::histogram!("redlease_wait_seconds", "scheme" => scheme)
                .record(began.seconds());
        }
    }

    /// A lease was lost, for `reason` (`expired`, `taken`, …).
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables))]
    pub(crate) fn lost(reason: &'static str) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!("redlease_leases_lost_total", "reason" => reason).increment(1);
    }

    /// A waiter broke the lock of a holder whose liveness session had ended.
    pub(crate) fn broken() {
        #[cfg(feature = "metrics")]
        ::metrics::counter!("redlease_dead_holders_broken_total").increment(1);
    }

    /// A waiter took back `n` semaphore permits of holders whose liveness
    /// session had ended.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables))]
    pub(crate) fn broken_permits(n: u64) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!("redlease_dead_holders_broken_total").increment(n);
    }

    /// A renewal was answered: `extended`, `lost` or `failed`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables))]
    pub(crate) fn renewal(outcome: &'static str) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!("redlease_renewals_total", "outcome" => outcome).increment(1);
    }
}
