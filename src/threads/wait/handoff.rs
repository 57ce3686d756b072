//! Local hand-off: a releasing guard passes its lock straight to the oldest caller
//! of the same client waiting for the key, instead of freeing it and letting the
//! waiter race for it.
//!
//! A waiting caller posts an [`Offer`] (the token it would write and what it wants:
//! TTL, fence, renewal terms) while it sleeps. The releaser takes the oldest offer:
//! - when the caller wants exactly the lease the releaser has (same TTL and renewal,
//!   no fence, no hold bound, no callback), the lease itself passes to it: same
//!   token, validity and renewal, no round trip at all, only a thread wake-up;
//! - otherwise the releaser runs `TOKEN_HANDOFF`, which replaces its own token by
//!   the offered one (taking a fence for it when asked) only if its own is still
//!   there: one round trip where a release and a new acquire cost two.
//!
//! The lock is never free in between. After [`STREAK`] hand-offs in a row a key is
//! released for real once, so callers of other processes get their turn: when the
//! release message reaches N other clients, this client's waiters hold off until
//! they have heard a release message from each of them (N more messages), or for
//! N times two turns at most (see `Lines::hold_off`). The others do the same, so turns go round: the client
//! that waited longest is the only one trying when a turn ends, instead of a
//! race to Redis that one process of several kept losing (it won half the turns
//! of the others, with turns as long and as many wake-ups).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::{Hub, Wake};
use crate::error::{Error, Result};
use crate::lease::{LeaseState, Terms};
use crate::metrics::bump;
use crate::scheme::{Announce, Release};
use crate::topology::{HandOff, Handed};

/// Hand-offs in a row after which a key is released for real once.
pub(crate) const STREAK: u32 = 8;
/// What a waiting caller wants of the lock it may be handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Want {
    pub(crate) ttl: Duration,
    pub(crate) fence: bool,
    /// The lease terms it would take a releaser's lease itself with, if any.
    pub(crate) terms: Option<Terms>,
}

/// A sleeping caller's standing request for the lock.
pub(crate) struct Offer {
    pub(crate) seq: u64,
    pub(crate) value: String,
    pub(crate) want: Want,
    pub(crate) tx: Sender<Wake>,
    /// Settles who has the last word on a taken offer: the releaser delivering its
    /// outcome, or the caller giving up on it. Whoever moves it from
    /// [`OPEN`] first wins, so no outcome is sent to a caller that stopped reading.
    pub(crate) claim: Arc<AtomicU8>,
}

/// An offer's [`Offer::claim`]: nobody has settled it yet.
pub(crate) const OPEN: u8 = 0;
/// The releaser is sending its outcome: the caller must read it.
pub(crate) const DELIVERING: u8 = 1;
/// The caller gave up: the releaser must not send, and undoes its hand-off.
pub(crate) const ABANDONED: u8 = 2;

impl Offer {
    /// Sends the releaser's outcome unless the caller gave up; returns it when the
    /// caller will not read it.
    fn deliver(&self, wake: Wake) -> std::result::Result<(), Wake> {
        let won = self
            .claim
            .compare_exchange(OPEN, DELIVERING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !won {
            return Err(wake);
        }
        self.tx.send(wake).map_err(|e| e.0)
    }
}

/// The offers of one client, by channel, oldest first.
#[derive(Default)]
pub(crate) struct Offers {
    by_channel: Mutex<HashMap<String, Queue>>,
    /// `by_channel.len()`, kept beside the map so a release with nobody waiting (the
    /// common case) skips the lock.
    channels: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    offers: BTreeMap<u64, Offer>,
    streak: u32,
}

impl Offers {
    pub(crate) fn post(&self, channel: &str, offer: Offer) {
        let mut map = self.by_channel.lock();
        let queue = map.entry(channel.to_owned()).or_default();
        queue.offers.insert(offer.seq, offer);
        self.channels.store(map.len(), Ordering::Release);
    }

    /// Takes back the offer `seq`; `false` when a releaser has taken it already
    /// (its outcome, `Wake::Handed` or `Wake::NotHanded`, is on the way).
    pub(crate) fn withdraw(&self, channel: &str, seq: u64) -> bool {
        let mut map = self.by_channel.lock();
        let Some(queue) = map.get_mut(channel) else {
            return false;
        };
        let found = queue.offers.remove(&seq).is_some();
        if queue.offers.is_empty() && queue.streak == 0 {
            map.remove(channel);
            self.channels.store(map.len(), Ordering::Release);
        }
        found
    }

    /// The oldest offer for `channel`, unless the key is due a real release.
    ///
    /// The streak survives the queue running empty (two threads passing a lock back
    /// and forth never have more than one offer out); only a real release ends it.
    fn take(&self, channel: &str) -> Option<Offer> {
        if self.channels.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut map = self.by_channel.lock();
        let queue = map.get_mut(channel)?;
        if queue.offers.is_empty() {
            map.remove(channel);
            self.channels.store(map.len(), Ordering::Release);
            return None;
        }
        if queue.streak >= STREAK {
            queue.streak = 0;
            return None;
        }
        let (_, offer) = queue.offers.pop_first()?;
        queue.streak += 1;
        Some(offer)
    }
}

/// Ends a holder's use of the lease `state`: passes it to the oldest waiting caller
/// of this client (the lease itself, or the lock by script), or releases it.
/// Returns what a release would have said.
///
/// Inside the lease's minimum hold the lock passes to nobody: the release keeps
/// the key until the hold ends (see `release_for_real`), and says
/// [`Release::Released`] when the key was still ours.
///
/// # Errors
/// [`Error::Shutdown`] when [`release_for_shutdown`] ended the lease first: nothing
/// is sent then. Redis failures.
pub(crate) fn release(hub: &Hub, state: &Arc<LeaseState>) -> Result<Release> {
    // A client shutting down hands nothing over: its waiters are woken with
    // `Error::Shutdown` instead.
    let holding = state.min_hold_left(Instant::now()).is_some();
    if state.backend.hands_over() && !hub.shutdown.is_cancelled() && !holding {
        while let Some(offer) = hub.offers.take(&state.channel) {
            if offer.want.terms.is_some() && offer.want.terms == state.terms() && state.is_held() {
                if offer.deliver(Wake::Transferred(Arc::clone(state))).is_ok() {
                    bump(&hub.counters.handoffs, 1);
                    return Ok(Release::Released);
                }
                // The caller is gone: the next one, or a real release.
                continue;
            }
            let Some((value, maybe)) = take_value(state) else {
                let _ = offer.deliver(Wake::NotHanded);
                return Err(Error::Shutdown);
            };
            return match hand_off(hub, state, &value, offer) {
                Some(outcome) => outcome,
                None => release_for_real(hub, state, &value, &maybe),
            };
        }
    }
    let (value, maybe) = take_value(state).ok_or(Error::Shutdown)?;
    release_for_real(hub, state, &value, &maybe)
}

/// Releases the lease `state` for the client's shutdown: the same release in Redis
/// as a guard's (owner-checked, through the backend's own release), never a
/// hand-off. `None` when its guard, or an earlier shutdown, released it already;
/// from then on the guard sends nothing (its release returns [`Error::Shutdown`]).
pub(crate) fn release_for_shutdown(hub: &Hub, state: &LeaseState) -> Option<Result<Release>> {
    let (value, maybe) = take_value(state)?;
    // No longer held from the moment its release may land.
    state.mark_lost();
    Some(release_for_real(hub, state, &value, &maybe))
}

/// Marks the lease released, sending nothing: a shutdown that ran out of time
/// leaves it to expire. Skipped while its mutex is busy (an extend in flight):
/// its guard may then still release it later.
pub(crate) fn abandon(state: &LeaseState) {
    if let Some(mut held) = state.held.try_lock() {
        held.released = true;
    }
}

/// A lease passed to a caller that had stopped waiting: pass it on, or release it.
pub(crate) fn give_back(hub: &Hub, state: &Arc<LeaseState>) {
    match release(hub, state) {
        // The client's shutdown took it.
        Ok(_) | Err(Error::Shutdown) => {}
        Err(e) => log::warn!("release of `{}` failed: {e}", state.key),
    }
}

/// Ends a lease passed over after its validity ended, off the caller's time (as a
/// late grant is): its value is deleted in the background, retried until it
/// would expire by itself.
pub(crate) fn release_later(hub: &Hub, state: &LeaseState) {
    let Some((value, _)) = take_value(state) else {
        return;
    };
    if state.min_hold_left(Instant::now()).is_some() {
        // Its key lasts until the minimum hold ends (acquire and renewals saw to
        // it): deleting it would end the hold early.
        return;
    }
    let until = Instant::now() + state.ttl();
    let backend = Arc::clone(&state.backend);
    hub.topology
        .release_later(backend, state.keys(), value, until);
}

/// Marks the lease released and takes the values it may be stored under; `None`
/// when it was released already (a shutdown took it: only it and the lease's one
/// holder release). Under the lease's mutex: waits for a renewal in flight, and
/// keeps the renewal thread from sending another once this returns.
pub(super) fn take_value(state: &LeaseState) -> Option<(String, Vec<String>)> {
    state.take_value()
}

/// Releases the lock in Redis. When the release message reached other clients'
/// waiters, this client's own waiters hold off until each of those clients may
/// have had a turn (see the module docs), so that a key released at the end of a
/// run of hand-offs goes to the process that waited longest, not back to this
/// one: that is what makes the bound of [`STREAK`] a turn-taking. Inside the
/// lease's minimum hold it keeps the key instead (compare, then a relative `PX`
/// of what is left), and wakes nobody.
pub(super) fn release_for_real(
    hub: &Hub,
    state: &LeaseState,
    value: &str,
    maybe: &[String],
) -> Result<Release> {
    // Callers of this client waiting for the key may not have marked the value
    // (only the head of a line attempts): the release publishes for them.
    let announce = Announce {
        channel: &state.channel,
        always: hub.lines.busy(&state.channel),
        // Measured now, after any renewal in flight has landed: the key is kept
        // for exactly what is left of the minimum hold.
        keep: state.min_hold_left(Instant::now()),
    };
    // Messages heard before ours: the hold-off counts from here.
    let heard = announce
        .always
        .then(|| hub.lines.heard(&state.channel))
        .flatten();
    let freed = hub
        .topology
        .release(&*state.backend, &state.key, announce, value, maybe)?;
    // Our own waiter thread is one of the listeners when we have waiters.
    if freed.listeners > 1 {
        bump(&hub.counters.yields, 1);
        hub.lines
            .hold_off(&state.channel, freed.listeners - 1, heard);
    }
    Ok(freed.outcome)
}

/// Hands the lock held with `value` to `offer` in one atomic script.
///
/// `None`: the topology cannot, or the hand-off failed in a way that leaves our lock
/// to be released the usual way. `Some(outcome)`: what a release would have said;
/// an error when Redis did not answer, both values then being removed off the
/// caller's time.
fn hand_off(hub: &Hub, state: &LeaseState, value: &str, offer: Offer) -> Option<Result<Release>> {
    let keys = state.keys();
    let hand_off = HandOff {
        ours: value,
        value: &offer.value,
        ttl: offer.want.ttl,
        fence: offer.want.fence,
    };
    let sent = Instant::now();
    let Some(reply) = hub.topology.hand_off(&keys, hand_off) else {
        let _ = offer.deliver(Wake::NotHanded);
        return None;
    };
    match reply {
        Ok(Handed::Done(fence)) => {
            bump(&hub.counters.handoffs, 1);
            if offer.deliver(Wake::Handed { sent, fence }).is_err() {
                // The caller gave up meanwhile: free the lock it was handed.
                let until = sent + offer.want.ttl;
                let backend = Arc::clone(&state.backend);
                hub.topology
                    .release_later(backend, keys, offer.value, until);
            }
            Some(Ok(Release::Released))
        }
        Ok(Handed::Refused(outcome)) => {
            let _ = offer.deliver(Wake::NotHanded);
            Some(Ok(outcome))
        }
        Err(e) => {
            // Unknown whether the script ran: take the offered token back out (it
            // would be a lock nobody holds), then release ours the usual way, or,
            // when Redis did not answer, off the caller's time too, so that the
            // caller waits one timeout, not two.
            log::debug!("hand-off of `{}` failed: {e}", state.key);
            let _ = offer.deliver(Wake::NotHanded);
            let backend = Arc::clone(&state.backend);
            let silent = e.is_connection_error();
            if silent {
                let (ours, until) = (value.to_owned(), sent + state.ttl());
                let backend = Arc::clone(&backend);
                hub.topology
                    .release_later(backend, keys.clone(), ours, until);
            }
            hub.topology
                .release_later(backend, keys, offer.value, sent + offer.want.ttl);
            silent.then_some(Err(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer() -> (Offer, crossbeam_channel::Receiver<Wake>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let want = Want {
            ttl: Duration::from_secs(1),
            fence: false,
            terms: None,
        };
        let offer = Offer {
            seq: 1,
            value: "v".into(),
            want,
            tx,
            claim: Arc::new(AtomicU8::new(OPEN)),
        };
        (offer, rx)
    }

    #[test]
    fn an_outcome_is_never_sent_to_a_caller_that_gave_up() {
        let (offer, rx) = offer();
        // The caller gives up first: the releaser must not send, and learns so.
        let claim = Arc::clone(&offer.claim);
        assert!(
            claim
                .compare_exchange(OPEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        );
        assert!(offer.deliver(Wake::NotHanded).is_err());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_delivered_outcome_cannot_be_abandoned() {
        let (offer, rx) = offer();
        assert!(offer.deliver(Wake::NotHanded).is_ok());
        let abandoned =
            offer
                .claim
                .compare_exchange(OPEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire);
        assert_eq!(abandoned, Err(DELIVERING));
        assert!(matches!(rx.try_recv(), Ok(Wake::NotHanded)));
    }

    #[test]
    fn the_streak_ends_in_a_real_release() {
        let offers = Offers::default();
        let (tx, _rx) = crossbeam_channel::unbounded();
        let mut taken = 0;
        for seq in 0..=u64::from(STREAK) {
            let (mut o, _) = offer();
            o.seq = seq;
            o.tx = tx.clone();
            offers.post("c", o);
            if offers.take("c").is_some() {
                taken += 1;
            }
        }
        assert_eq!(taken, STREAK);
    }
}
