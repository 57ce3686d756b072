//! The state of one held lease, shared by its guard and the renewal thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::config::LostCallback;
use crate::metrics::{Counters, bump};
use crate::renewal::Command;
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
    /// The client was dropped: nothing renews the lease any more. Unlike the other
    /// reasons this is a warning, not a loss: the lease stays valid, and
    /// [`is_held`](crate::LockGuard::is_held) true, until the guard's `valid_until()`.
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
    /// Values a renewal may have written in place of `value` (schemes whose value
    /// encodes the expiry): sent, but no reply came. Release and the next renewal
    /// accept any of them as ours. Empty for the token scheme, whose value stays.
    pub(crate) maybe: Vec<String>,
    pub(crate) released: bool,
}

/// How many unconfirmed values a lease remembers (oldest forgotten first).
const MAYBE_KEPT: usize = 8;

impl Held {
    /// A renewal that would have left `written` got no reply: it may have landed.
    pub(crate) fn unconfirmed(&mut self, written: String) {
        if written != self.value && !self.maybe.contains(&written) {
            if self.maybe.len() == MAYBE_KEPT {
                self.maybe.remove(0);
            }
            self.maybe.push(written);
        }
    }

    /// A renewal that left `written` was confirmed.
    pub(crate) fn confirmed(&mut self, written: String) {
        self.value = written;
        self.maybe.clear();
    }
}

/// Numbers the leases of this process, so the renewal thread can find one by id.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One held lease.
pub(crate) struct LeaseState {
    pub(crate) id: u64,
    pub(crate) key: String,
    pub(crate) channel: String,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) held: Arc<Mutex<Held>>,
    valid_until: AtomicU64,
    ttl_ms: AtomicU64,
    /// Known lost: `is_held()` is false from then on.
    lost: AtomicBool,
    /// The holder was told (message and callback), which happens at most once.
    told: AtomicBool,
    /// The `lost()` channel's sender, made when the guard first asks for the
    /// channel (most never do), and the message once there is one.
    lost_slot: Mutex<(Option<Sender<LeaseLost>>, Option<LeaseLost>)>,
    on_lost: Option<LostCallback>,
    /// The renewal thread's channel, set when the lease is registered, so that an
    /// `extend` from the guard can have the lease's schedule looked at again.
    pub(crate) renewer: OnceLock<Sender<Command>>,
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
        keys: crate::scheme::Keys,
        backend: Arc<dyn Backend>,
        value: String,
        sent: Instant,
        ttl: Duration,
        on_lost: Option<LostCallback>,
    ) -> Self {
        let crate::scheme::Keys { lock: key, channel } = keys;
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key,
            channel,
            backend,
            held: Arc::new(Mutex::new(Held {
                value,
                maybe: Vec::new(),
                released: false,
            })),
            valid_until: AtomicU64::new(to_nanos(validity_end(sent, ttl))),
            ttl_ms: AtomicU64::new(ttl_millis(ttl)),
            lost: AtomicBool::new(false),
            told: AtomicBool::new(false),
            lost_slot: Mutex::new((None, None)),
            on_lost,
            renewer: OnceLock::new(),
        }
    }

    /// Marks the lease lost (for every reason but [`LossReason::Shutdown`], which
    /// leaves it valid until `valid_until`) and tells its holder, once: the `lost()`
    /// receiver gets a message and the `on_lost` callback runs (a panic in it is
    /// caught and logged). Must be called with no lease's `held` mutex locked, since
    /// the callback may release guards.
    pub(crate) fn notify_lost(&self, reason: LossReason, counters: &Counters) {
        let newly_lost = reason != LossReason::Shutdown && self.mark_lost();
        if newly_lost {
            bump(&counters.leases_lost, 1);
        }
        if self.told.swap(true, Ordering::AcqRel) {
            return;
        }
        if reason == LossReason::Shutdown {
            log::info!("lease on `{}` no longer renewed: client dropped", self.key);
        } else {
            log::warn!("lease on `{}` lost: {reason:?}", self.key);
        }
        let msg = LeaseLost {
            key: self.key.clone(),
            reason,
        };
        {
            let mut slot = self.lost_slot.lock();
            if let Some(tx) = &slot.0 {
                let _ = tx.try_send(msg.clone());
            }
            slot.1 = Some(msg.clone());
        }
        if let Some(f) = &self.on_lost {
            let call = std::panic::AssertUnwindSafe(|| f(&msg));
            if std::panic::catch_unwind(call).is_err() {
                log::error!("on_lost callback for `{}` panicked", self.key);
            }
        }
    }

    /// A receiver for the loss message: made on first use, and holding the message
    /// already if the lease was lost before. Disconnects when the lease is dropped.
    pub(crate) fn lost_receiver(&self) -> Receiver<LeaseLost> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut slot = self.lost_slot.lock();
        if let Some(msg) = &slot.1 {
            let _ = tx.try_send(msg.clone());
        }
        slot.0 = Some(tx);
        rx
    }

    /// The local deadline after which the lease must be presumed expired.
    pub(crate) fn valid_until(&self) -> Instant {
        from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// Records an extension to `ttl` confirmed by Redis, sent at `sent` by the guard:
    /// later renewals use `ttl` too. If the validity now ends sooner, the renewal
    /// thread is asked to look at the lease's schedule again.
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        let before = self.valid_until();
        self.ttl_ms.store(ttl_millis(ttl), Ordering::Release);
        self.renewed(sent, ttl);
        if self.valid_until() < before
            && let Some(renewer) = self.renewer.get()
        {
            // Fails only once the thread is gone: nothing to reschedule then.
            let _ = renewer.send(Command::Reschedule(self.id));
        }
    }

    /// Records a renewal for `ttl` confirmed by Redis, sent at `sent` by the renewal
    /// thread; the lease's own TTL is unchanged (a renewal clipped to `max_hold` is
    /// shorter).
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
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

    fn lease(
        on_lost: Option<LostCallback>,
    ) -> (LeaseState, crossbeam_channel::Receiver<LeaseLost>) {
        let keys = crate::scheme::Keys::new("", "k").unwrap();
        let backend = crate::scheme::backend(&crate::config::Scheme::Token);
        let ttl = Duration::from_secs(10);
        let state = LeaseState::new(keys, backend, "v".into(), Instant::now(), ttl, on_lost);
        let rx = state.lost_receiver();
        (state, rx)
    }

    #[test]
    fn a_lease_is_reported_lost_once() {
        let calls = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&calls);
        let (state, rx) = lease(Some(Arc::new(move |_: &LeaseLost| {
            counted.fetch_add(1, Ordering::SeqCst);
        })));
        let counters = Counters::default();
        assert!(state.is_held());
        state.notify_lost(LossReason::Expired, &counters);
        state.notify_lost(LossReason::Taken, &counters);
        assert!(!state.is_held());
        assert_eq!(rx.try_recv().unwrap().reason, LossReason::Expired);
        assert!(rx.try_recv().is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(counters.snapshot().leases_lost, 1);
    }

    #[test]
    fn shutdown_is_told_but_leaves_the_lease_valid() {
        let (state, rx) = lease(None);
        let counters = Counters::default();
        state.notify_lost(LossReason::Shutdown, &counters);
        assert!(state.is_held());
        assert_eq!(rx.try_recv().unwrap().reason, LossReason::Shutdown);
        assert_eq!(counters.snapshot().leases_lost, 0);
        // A loss found later (by an extend) still ends it, without a second message.
        state.notify_lost(LossReason::Expired, &counters);
        assert!(!state.is_held());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_panicking_callback_is_caught() {
        let (state, rx) = lease(Some(Arc::new(|_: &LeaseLost| panic!("expected"))));
        state.notify_lost(LossReason::Taken, &Counters::default());
        assert_eq!(rx.try_recv().unwrap().reason, LossReason::Taken);
    }

    #[test]
    fn only_an_extend_that_shortens_the_validity_reschedules() {
        let (state, _rx) = lease(None);
        let (tx, rx) = crossbeam_channel::unbounded();
        state.renewer.set(tx).unwrap();
        state.confirm(Instant::now(), Duration::from_secs(20));
        assert!(rx.try_recv().is_err());
        assert_eq!(state.ttl(), Duration::from_secs(20));
        state.confirm(Instant::now(), Duration::from_secs(1));
        assert!(matches!(rx.try_recv(), Ok(Command::Reschedule(id)) if id == state.id));
        // A renewal by the thread moves the validity only, never the lease's TTL.
        state.renewed(Instant::now(), Duration::from_millis(5));
        assert_eq!(state.ttl(), Duration::from_secs(1));
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
