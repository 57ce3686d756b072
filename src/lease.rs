//! The state of one held lease, shared by its guard and the renewal thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::config::LostCallback;
use crate::metrics::{Counters, bump};
use crate::scheme::Backend;

/// Why a lease was lost; carried by [`LeaseLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the key gone: it expired, or someone deleted it.
    Expired,
    /// A renewal found another value under the key: someone else holds it now.
    Taken,
    /// Renewals kept failing (Redis unreachable or slow) until the lease's local
    /// validity ran out.
    Unreachable,
    /// The lease reached its `max_hold` or `max_renewals` bound and was left to expire.
    MaxHold,
    /// The lease was not renewed ([`Renewal::None`](crate::Renewal::None)) and its
    /// TTL ran out.
    TtlElapsed,
    /// The client was dropped: nothing renews the lease any more, and it runs out at
    /// the guard's `valid_until()`.
    Shutdown,
}

/// The message sent on [`LockGuard::lost`](crate::LockGuard::lost) and passed to the
/// `on_lost` callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseLost {
    /// The lock key, with the client's prefix.
    pub key: String,
    /// Why it was lost.
    pub reason: LossReason,
}

/// The origin of all lease clocks: deadlines are stored as nanoseconds since it.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds from [`EPOCH`] to `t` (0 for instants before it).
pub(crate) fn to_nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// The instant `nanos` after [`EPOCH`], saturating far in the future.
pub(crate) fn from_nanos(nanos: u64) -> Instant {
    let far = Duration::from_secs(u64::from(u32::MAX));
    EPOCH
        .checked_add(Duration::from_nanos(nanos))
        .unwrap_or_else(|| *EPOCH + far)
}

/// The clock-drift allowance for a TTL: 2 ms plus 1 % (the Redlock paper's factor).
pub(crate) fn drift(ttl: Duration) -> Duration {
    Duration::from_millis(2) + ttl / 100
}

/// How long a lease is valid after `sent`: `sent + ttl - drift`, where `sent` is the
/// instant before the command that set the TTL left this process.
pub(crate) fn validity_end(sent: Instant, ttl: Duration) -> Instant {
    let valid = ttl.saturating_sub(drift(ttl));
    sent.checked_add(valid)
        .unwrap_or_else(|| from_nanos(u64::MAX))
}

/// The mutable part of a lease: what is stored under the key, and whether the
/// guard has released it. Its mutex orders release against renewal: the renewal
/// thread holds it while a renewal of this value is in flight, and release sets
/// `released` under it, so no renewal is sent once release has begun.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) value: String,
    pub(crate) released: bool,
}

/// One held lease.
pub(crate) struct LeaseState {
    pub(crate) key: String,
    pub(crate) channel: String,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) held: Arc<Mutex<Held>>,
    valid_until: AtomicU64,
    ttl_ms: AtomicU64,
    lost: AtomicBool,
    lost_tx: Sender<LeaseLost>,
    on_lost: Option<LostCallback>,
}

impl std::fmt::Debug for LostCallback2<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(Fn)" } else { "None" })
    }
}

/// Shows whether a callback is set without requiring `Debug` of it.
struct LostCallback2<'a>(&'a Option<LostCallback>);

impl LeaseState {
    pub(crate) fn new(
        keys: &crate::scheme::Keys,
        backend: Arc<dyn Backend>,
        value: String,
        sent: Instant,
        ttl: Duration,
        on_lost: Option<LostCallback>,
        lost_tx: Sender<LeaseLost>,
    ) -> Self {
        let (key, channel) = (keys.lock.clone(), keys.channel.clone());
        Self {
            key,
            channel,
            backend,
            held: Arc::new(Mutex::new(Held {
                value,
                released: false,
            })),
            valid_until: AtomicU64::new(to_nanos(validity_end(sent, ttl))),
            ttl_ms: AtomicU64::new(ttl_millis(ttl)),
            lost: AtomicBool::new(false),
            lost_tx,
            on_lost,
        }
    }

    /// Marks the lease lost and tells its holder, once: the `lost()` receiver gets a
    /// message and the `on_lost` callback runs (a panic in it is caught and logged).
    pub(crate) fn notify_lost(&self, reason: LossReason, counters: &Counters) {
        if !self.mark_lost() {
            return;
        }
        bump(&counters.leases_lost, 1);
        log::warn!("lease on `{}` lost: {reason:?}", self.key);
        let msg = LeaseLost {
            key: self.key.clone(),
            reason,
        };
        let _ = self.lost_tx.try_send(msg.clone());
        if let Some(f) = &self.on_lost {
            let call = std::panic::AssertUnwindSafe(|| f(&msg));
            if std::panic::catch_unwind(call).is_err() {
                log::error!("on_lost callback for `{}` panicked", self.key);
            }
        }
    }

    /// The local deadline after which the lease must be presumed expired.
    pub(crate) fn valid_until(&self) -> Instant {
        from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// Records a renewal or extension confirmed by Redis, sent at `sent`.
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        self.ttl_ms.store(ttl_millis(ttl), Ordering::Release);
        self.valid_until
            .store(to_nanos(validity_end(sent, ttl)), Ordering::Release);
    }

    /// The TTL the lease is renewed with.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Acquire))
    }

    /// Marks the lease lost; returns whether this call did it (first time).
    fn mark_lost(&self) -> bool {
        !self.lost.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Held: not lost, not released, and within local validity.
    pub(crate) fn is_held(&self) -> bool {
        !self.is_lost() && Instant::now() < self.valid_until()
    }
}

/// Whole milliseconds of a TTL, as `PX` takes them.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl std::fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseState")
            .field("key", &self.key)
            .field("valid_until", &self.valid_until())
            .field("lost", &self.is_lost())
            .field("on_lost", &LostCallback2(&self.on_lost))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validity_is_ttl_minus_drift() {
        let now = Instant::now();
        let end = validity_end(now, Duration::from_secs(10));
        assert_eq!(end - now, Duration::from_millis(10_000 - 100 - 2));
    }

    #[test]
    fn a_ttl_below_the_drift_is_never_valid() {
        let now = Instant::now();
        assert_eq!(validity_end(now, Duration::from_millis(1)), now);
    }

    proptest! {
        #[test]
        fn validity_never_exceeds_ttl(ms in 1u64..(i64::MAX as u64 / 2)) {
            let now = Instant::now();
            let ttl = Duration::from_millis(ms);
            let end = validity_end(now, ttl);
            prop_assert!(end >= now);
            prop_assert!(end.saturating_duration_since(now) < ttl);
        }

        #[test]
        fn nanos_round_trip(ns in 0u64..(1u64 << 62)) {
            prop_assert_eq!(to_nanos(from_nanos(ns)), ns);
        }
    }
}
