//! The state of one held lease, shared by its guard and the renewal thread.
//!
//! Layout: this file is [`LeaseState`] and what its mutex guards ([`Held`]);
//! `loss.rs` how a holder hears that the lease ended ([`LossReason`],
//! [`LeaseLost`], the `on_lost` callback's [`Notice`]); `liveness.rs` the client's
//! liveness session as its leases see it ([`Liveness`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::metrics::{Counters, bump, export};
use crate::scheme::{Backend, Keys};
use crate::time::{from_nanos, to_nanos, ttl_millis, validity_end};

mod liveness;
mod loss;

pub(crate) use liveness::{Liveness, SESSION_WAKE, SessionHold};
pub use loss::{LeaseLost, LossReason};
pub(crate) use loss::{LostCallback, Notice};

/// The terms of a lease that a waiting caller can take over as it is: renewed in the
/// background with this TTL and interval, with no fence, hold bound or callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) ttl: Duration,
    pub(crate) interval: Duration,
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
    /// How many bytes of `key` are the client's key prefix.
    prefix: usize,
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
    /// The callback, and the notifier's queue it runs from.
    on_lost: Option<(LostCallback, Sender<Notice>)>,
    /// The renewal thread's channel for leases to schedule again, set when the lease
    /// is registered, so that an `extend` from the guard can have it looked at.
    pub(crate) reschedule: OnceLock<Sender<u64>>,
    /// Set when the lease can pass to another holder as it is.
    terms: Option<Terms>,
    /// The end of its minimum hold, on the local monotonic clock: a release
    /// before it keeps the key until then.
    min_hold_until: Option<Instant>,
    /// The client's liveness session the lease was taken under, if it keeps one:
    /// the lease is valid no longer than the session.
    session: Option<SessionHold>,
}

impl LeaseState {
    pub(crate) fn new(
        keys: Keys,
        backend: Arc<dyn Backend>,
        value: String,
        sent: Instant,
        ttl: Duration,
        on_lost: Option<(LostCallback, Sender<Notice>)>,
    ) -> Self {
        let Keys {
            lock: key,
            channel,
            prefix,
            ..
        } = keys;
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key,
            channel,
            prefix,
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
            reschedule: OnceLock::new(),
            terms: None,
            min_hold_until: None,
            session: None,
        }
    }

    /// Ties the lease to the client's liveness session (see [`Liveness`]).
    pub(crate) fn with_session(mut self, session: Option<SessionHold>) -> Self {
        self.session = session;
        self
    }

    /// Whether the lease was taken under a liveness session that has ended since.
    pub(crate) fn session_ended(&self) -> bool {
        self.session.as_ref().is_some_and(SessionHold::ended)
    }

    /// Marks the lease lost (for every reason but [`LossReason::Shutdown`], which
    /// leaves it valid until `valid_until`) and tells its holder, once: the `lost()`
    /// receiver gets a message, and the `on_lost` callback is queued for the
    /// notifier thread, so user code never runs on the thread that reports losses.
    /// With the notifier gone (client dropped) the callback runs here.
    pub(crate) fn notify_lost(&self, reason: LossReason, counters: &Counters) {
        let newly_lost = reason != LossReason::Shutdown && self.mark_lost();
        // A shutdown's release ends the lease on purpose: not a loss to count.
        if newly_lost && reason != LossReason::Released {
            bump(&counters.leases_lost, 1);
            export::lost(reason.label());
        }
        if self.told.swap(true, Ordering::AcqRel) {
            return;
        }
        if reason == LossReason::Shutdown {
            log::info!("lease on `{}` no longer renewed: client dropped", self.key);
        } else if reason == LossReason::Released {
            log::debug!("lease on `{}` ended by the client's shutdown", self.key);
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
        if let Some((callback, notices)) = &self.on_lost {
            let notice = Notice {
                callback: Arc::clone(callback),
                msg,
            };
            if let Err(unsent) = notices.send(notice) {
                unsent.0.run();
            }
        }
    }

    /// A receiver for the loss message: made on first use, and holding the message
    /// already if the lease was lost before. Disconnects when the lease is dropped.
    pub(crate) fn lost_receiver(&self) -> Receiver<LeaseLost> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.lost_to(tx);
        rx
    }

    /// Sends the loss message to `tx` (with room for it) from now on, at once if
    /// the lease was lost before: several leases may share one channel (a guard of
    /// several names).
    pub(crate) fn lost_to(&self, tx: Sender<LeaseLost>) {
        let mut slot = self.lost_slot.lock();
        if let Some(msg) = &slot.1 {
            let _ = tx.try_send(msg.clone());
        }
        slot.0 = Some(tx);
    }

    /// Marks the lease as one another holder can take over as it is, on `terms`.
    pub(crate) fn with_terms(mut self, terms: Option<Terms>) -> Self {
        self.terms = terms;
        self
    }

    /// Gives the lease a minimum hold that ends at `until` (local monotonic clock).
    pub(crate) fn with_min_hold(mut self, until: Option<Instant>) -> Self {
        self.min_hold_until = until;
        self
    }

    /// What is left at `now` of the lease's minimum hold; `None` when it has none
    /// or it has ended (less than a millisecond left counts as ended).
    pub(crate) fn min_hold_left(&self, now: Instant) -> Option<Duration> {
        let left = self.min_hold_until?.saturating_duration_since(now);
        (left >= Duration::from_millis(1)).then_some(left)
    }

    /// The terms another holder can take the lease over on, as the lease is now (an
    /// `extend` may have changed its TTL); `None` if it cannot pass as it is.
    pub(crate) fn terms(&self) -> Option<Terms> {
        self.terms.map(|t| Terms {
            ttl: self.ttl(),
            ..t
        })
    }

    /// The Redis names of the lease's key: the lock key, its release channel, and
    /// where the client's prefix ends (for the fence counter).
    pub(crate) fn keys(&self) -> Keys {
        Keys {
            lock: self.key.clone(),
            channel: self.channel.clone(),
            prefix: self.prefix,
            slot_tag: None,
        }
    }

    /// The local deadline after which the lease must be presumed expired: its
    /// own validity, or its liveness session's when that ends first.
    pub(crate) fn valid_until(&self) -> Instant {
        let own = self.valid_until.load(Ordering::Acquire);
        match &self.session {
            Some(s) => from_nanos(own.min(s.valid_until_nanos())),
            None => from_nanos(own),
        }
    }

    /// The lease's own validity on the lease clock, in nanoseconds, without its
    /// session's: what its renewals are scheduled by.
    pub(crate) fn valid_until_nanos(&self) -> u64 {
        self.valid_until.load(Ordering::Acquire)
    }

    /// Records an extension to `ttl` confirmed by Redis, sent at `sent` by the guard:
    /// later renewals use `ttl` too. If the validity now ends sooner, the renewal
    /// thread is asked to look at the lease's schedule again.
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        let before = self.valid_until();
        self.ttl_ms.store(ttl_millis(ttl), Ordering::Release);
        self.renewed(sent, ttl);
        if self.valid_until() < before
            && let Some(renewer) = self.reschedule.get()
        {
            // Fails only once the thread is gone: nothing to reschedule then.
            let _ = renewer.send(self.id);
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

    /// Marks the lease lost, without telling its holder (a release for the
    /// client's shutdown is under way); returns whether this call did it.
    pub(crate) fn mark_lost(&self) -> bool {
        !self.lost.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Marks the lease released and takes the values it may be stored under;
    /// `None` when released already. Under the lease's mutex: no renewal is sent
    /// once this returns.
    pub(crate) fn take_value(&self) -> Option<(String, Vec<String>)> {
        let mut held = self.held.lock();
        if held.released {
            return None;
        }
        held.released = true;
        // Nothing reads the values once `released` is set.
        Some((
            std::mem::take(&mut held.value),
            std::mem::take(&mut held.maybe),
        ))
    }

    /// Held: not lost, not released, and within local validity.
    pub(crate) fn is_held(&self) -> bool {
        !self.is_lost() && Instant::now() < self.valid_until()
    }
}

impl std::fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseState")
            .field("key", &self.key)
            .field("valid_until", &self.valid_until())
            .field("lost", &self.is_lost())
            .field("on_lost", &self.on_lost.as_ref().map(|_| "Fn"))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(
        on_lost: Option<(LostCallback, Sender<Notice>)>,
    ) -> (LeaseState, crossbeam_channel::Receiver<LeaseLost>) {
        let id = crate::owner::ClientId::new();
        let backend = crate::scheme::backend(&crate::scheme::Scheme::Token, &id);
        let keys = Keys::new("", "k", &*backend).unwrap();
        let ttl = Duration::from_secs(10);
        let state = LeaseState::new(keys, backend, "v".into(), Instant::now(), ttl, on_lost);
        let rx = state.lost_receiver();
        (state, rx)
    }

    fn counting() -> (LostCallback, Arc<AtomicU64>) {
        let calls = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&calls);
        let f: LostCallback = Arc::new(move |_: &LeaseLost| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        (f, calls)
    }

    #[test]
    fn a_lease_is_reported_lost_once_and_its_callback_queued_not_run() {
        let (f, calls) = counting();
        let (notices_tx, notices) = crossbeam_channel::unbounded();
        let (state, rx) = lease(Some((f, notices_tx)));
        let counters = Counters::default();
        assert!(state.is_held());
        state.notify_lost(LossReason::Expired, &counters);
        state.notify_lost(LossReason::Taken, &counters);
        assert!(!state.is_held());
        assert_eq!(rx.try_recv().unwrap().reason, LossReason::Expired);
        assert!(rx.try_recv().is_err());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "user code ran on the reporting thread"
        );
        let queued: Vec<Notice> = notices.try_iter().collect();
        assert_eq!(queued.len(), 1);
        for notice in queued {
            notice.run();
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(counters.snapshot().leases_lost, 1);
    }

    #[test]
    fn without_a_notifier_the_callback_runs_in_place() {
        let (f, calls) = counting();
        let (notices_tx, notices) = crossbeam_channel::unbounded();
        drop(notices);
        let (state, _rx) = lease(Some((f, notices_tx)));
        state.notify_lost(LossReason::Taken, &Counters::default());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
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
        let f: LostCallback = Arc::new(|_: &LeaseLost| panic!("expected"));
        let (notices_tx, notices) = crossbeam_channel::unbounded();
        drop(notices);
        let (state, rx) = lease(Some((f, notices_tx)));
        state.notify_lost(LossReason::Taken, &Counters::default());
        assert_eq!(rx.try_recv().unwrap().reason, LossReason::Taken);
    }

    #[test]
    fn only_an_extend_that_shortens_the_validity_reschedules() {
        let (state, _rx) = lease(None);
        let (tx, rx) = crossbeam_channel::unbounded();
        state.reschedule.set(tx).unwrap();
        state.confirm(Instant::now(), Duration::from_secs(20));
        assert!(rx.try_recv().is_err());
        assert_eq!(state.ttl(), Duration::from_secs(20));
        state.confirm(Instant::now(), Duration::from_secs(1));
        assert!(matches!(rx.try_recv(), Ok(id) if id == state.id));
        // A renewal by the thread moves the validity only, never the lease's TTL.
        state.renewed(Instant::now(), Duration::from_millis(5));
        assert_eq!(state.ttl(), Duration::from_secs(1));
    }
}
