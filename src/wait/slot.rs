//! [`WaitSlot`]: one caller's side of a wait, from its first busy reply to its return.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::handoff::Offer;
use super::{Command, Hub, Waiter, Wake};
use crate::cancel::{CancelToken, Watch};
use crate::error::{Error, Result};
use crate::metrics::bump;
use crate::scheme::{Keys, TokenBackend};

/// One caller's wait for one key, from its first busy reply to its return.
pub(crate) struct WaitSlot<'a> {
    hub: &'a Hub,
    waiter: Option<&'a Waiter>,
    keys: Keys,
    seq: u64,
    tx: Sender<Wake>,
    rx: Receiver<Wake>,
    /// In the thread's queue (as far as this slot knows: a release the thread
    /// sent but the slot has not read yet took it out).
    queued: bool,
    /// Counted in the shared per-channel waiter count.
    counted: bool,
    turn: Turn,
    backoff_step: u32,
    /// TTL and fencing of the lock this caller wants, for hand-off offers; `None`
    /// when releasers cannot hand it over.
    want: Option<(Duration, bool)>,
    /// The token this caller offers to be handed the lock with (made once).
    offer_value: Option<String>,
    _watches: [Option<Watch>; 2],
}

/// A lock handed to a waiting caller by a releasing guard of its client.
#[derive(Debug)]
pub(crate) struct Handoff {
    /// The caller's token, now stored under the key.
    pub(crate) value: String,
    /// When the hand-off was sent: the lease's validity counts from here.
    pub(crate) sent: Instant,
    pub(crate) fence: Option<u64>,
}

/// Where a slot stands with the wake-ups it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Not woken since its last attempt.
    Waiting,
    /// Took a release wake-up and has not tried the lock since: if it leaves
    /// now, the wake-up goes to the next waiter.
    Woken,
    /// Got the lock: any wake-up it holds was the release it used.
    Acquired,
}

impl<'a> WaitSlot<'a> {
    /// A slot for `keys`; `waiter` is `None` when waits must poll.
    pub(crate) fn new(
        hub: &'a Hub,
        waiter: Option<&'a Waiter>,
        keys: &Keys,
        cancel: Option<&CancelToken>,
        want: Option<(Duration, bool)>,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let watches = [
            Some(hub.shutdown.watch(&tx, Wake::Shutdown)),
            cancel.map(|c| c.watch(&tx, Wake::Cancelled)),
        ];
        let seq = waiter.map_or(0, |w| w.shared.seq.fetch_add(1, Ordering::Relaxed));
        Self {
            hub,
            waiter,
            keys: keys.clone(),
            seq,
            tx,
            rx,
            queued: false,
            counted: false,
            turn: Turn::Waiting,
            backoff_step: 0,
            want: want.filter(|_| waiter.is_some()),
            offer_value: None,
            _watches: watches,
        }
    }

    /// Whether a slot is worth making before the first attempt: this client already
    /// has waiters on the key, or its channel is subscribed.
    pub(crate) fn wanted(waiter: Option<&Waiter>, keys: &Keys) -> bool {
        waiter.is_some_and(|w| {
            w.shared.healthy.load(Ordering::Acquire)
                && w.shared.interest.load(Ordering::Acquire) > 0
                && (w.shared.local.lock().contains_key(&keys.channel)
                    || w.shared.subscribed.read().contains(&keys.channel))
        })
    }

    /// Before the first attempt: join the queue when the channel is subscribed, and
    /// when this client's callers already wait for the key, wait behind them rather
    /// than barge in on the lock a waiter is about to be handed.
    ///
    /// The fair wait ends at our turn, at the holder's TTL last seen, or after
    /// the longest backoff step, whichever comes first: a lock left free with
    /// nobody woken (a holder that released without publishing) is tried soon.
    pub(crate) fn prepare(&mut self, deadline: Option<Instant>) -> Result<Option<Handoff>> {
        let Some(w) = self.waiter else {
            return Ok(None);
        };
        let (ahead, holder_until) = {
            let local = w.shared.local.lock();
            local
                .get(&self.keys.channel)
                .map_or((0, None), |l| (l.waiting, l.holder_until))
        };
        if w.shared.subscribed.read().contains(&self.keys.channel) {
            self.enqueue(w);
        }
        if ahead == 0 || !self.queued {
            return Ok(None);
        }
        self.count(None);
        let step = Instant::now() + self.hub.backoff.1;
        let bound = holder_until.map_or(step, |t| t.min(step));
        self.sleep(bound, deadline)
    }

    /// After a busy reply: wait until it is worth trying again.
    ///
    /// Subscribes first when needed (so no release is missed between the failed
    /// attempt and the wait), then sleeps until a release message, the holder's
    /// `remaining` TTL, a backoff step (when polling), or `deadline`.
    pub(crate) fn pause(
        &mut self,
        remaining: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<Handoff>> {
        // The attempt that found the lock busy used any wake-up we had.
        self.turn = Turn::Waiting;
        self.count(remaining);
        let now = Instant::now();
        let pubsub = self
            .waiter
            .filter(|w| w.shared.healthy.load(Ordering::Acquire));
        let until = match (pubsub, remaining) {
            (Some(w), remaining) => {
                if !self.queued {
                    self.enqueue(w);
                    if w.shared.subscribed.read().contains(&self.keys.channel) {
                        // Queued on a live subscription: one more attempt covers a
                        // release between the busy reply and the queueing.
                        return Ok(None);
                    }
                    self.kick(w);
                }
                // A holder that never publishes is waited out by its TTL.
                let bound = remaining.unwrap_or_else(|| self.backoff());
                now + bound + Duration::from_millis(1)
            }
            (None, Some(r)) => now + self.backoff().min(r + Duration::from_millis(1)),
            (None, None) => now + self.backoff(),
        };
        self.sleep(until, deadline)
    }

    /// Marks the wait as ended by an acquisition: a wake-up it still holds was
    /// meant for it, and is not passed on.
    pub(crate) fn acquired(&mut self) {
        self.turn = Turn::Acquired;
    }

    /// Sleeps until a wake-up, `until` or `deadline`. While asleep the caller has an
    /// offer out, so a releasing guard of this client can hand it the lock.
    fn sleep(&mut self, until: Instant, deadline: Option<Instant>) -> Result<Option<Handoff>> {
        let mut until = deadline.map_or(until, |d| d.min(until));
        let posted = self.post_offer();
        let result = loop {
            match self.rx.recv_deadline(until) {
                Ok(Wake::Handed { sent, fence }) => return Ok(Some(self.handed(sent, fence))),
                // Our offer was taken and not used: we are still waiting.
                Ok(Wake::NotHanded) => return Ok(None),
                Ok(Wake::Retry) if !self.healthy() => {
                    // The connection broke: a release may be lost, so poll.
                    until = until.min(Instant::now() + self.backoff());
                }
                Ok(wake) => break self.woken(wake),
                Err(_) => break Ok(None),
            }
        };
        if posted && !self.withdraw_offer() {
            // A releaser took the offer and is handing the lock over right now:
            // its answer comes within its network timeouts.
            if let Some(handoff) = self.await_hand_off() {
                return Ok(Some(handoff));
            }
        }
        result
    }

    /// What a wake-up other than a hand-off means for the wait.
    fn woken(&mut self, wake: Wake) -> Result<Option<Handoff>> {
        match wake {
            Wake::Released => {
                self.queued = false;
                self.turn = Turn::Woken;
                self.backoff_step = 0;
                bump(&self.hub.counters.wakeups, 1);
                Ok(None)
            }
            Wake::Cancelled => Err(Error::Cancelled {
                key: self.keys.lock.clone(),
            }),
            Wake::Shutdown => Err(Error::Shutdown),
            Wake::Retry | Wake::Handed { .. } | Wake::NotHanded => Ok(None),
        }
    }

    /// Puts this caller's offer out; whether there is one.
    fn post_offer(&mut self) -> bool {
        let Some((ttl, fence)) = self.want else {
            return false;
        };
        let value = self
            .offer_value
            .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
            .clone();
        self.hub.offers.post(
            &self.keys.channel,
            Offer {
                seq: self.seq,
                value,
                ttl,
                fence,
                tx: self.tx.clone(),
            },
        );
        true
    }

    fn withdraw_offer(&self) -> bool {
        self.hub.offers.withdraw(&self.keys.channel, self.seq)
    }

    /// Waits for the outcome of a hand-off in flight to this caller.
    fn await_hand_off(&mut self) -> Option<Handoff> {
        let bound = Instant::now() + 2 * self.hub.topology.subscriber().call_bound();
        loop {
            match self.rx.recv_deadline(bound) {
                Ok(Wake::Handed { sent, fence }) => return Some(self.handed(sent, fence)),
                Ok(Wake::NotHanded) | Err(_) => return None,
                // Cancel and shutdown flags are seen by the caller's next check.
                Ok(wake) => {
                    let _ = self.woken(wake);
                }
            }
        }
    }

    fn handed(&mut self, sent: Instant, fence: Option<u64>) -> Handoff {
        self.turn = Turn::Acquired;
        Handoff {
            value: self.offer_value.take().unwrap_or_default(),
            sent,
            fence,
        }
    }

    fn healthy(&self) -> bool {
        self.waiter
            .is_some_and(|w| w.shared.healthy.load(Ordering::Acquire))
    }

    fn enqueue(&mut self, w: &Waiter) {
        let cmd = Command::Wait {
            channel: self.keys.channel.clone(),
            seq: self.seq,
            tx: self.tx.clone(),
        };
        self.queued = w.tx.send(cmd).is_ok();
    }

    /// Wakes the thread out of its socket read, so it subscribes now rather than at
    /// its next tick: one `PUBLISH` to the thread's own control channel, sent by
    /// the first of the callers that queue before the thread reads its commands.
    fn kick(&self, w: &Waiter) {
        if w.shared.kicked.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.hub.topology.publish(&w.kick, "");
    }

    fn count(&mut self, remaining: Option<Duration>) {
        let Some(w) = self.waiter else { return };
        let mut local = w.shared.local.lock();
        if !local.contains_key(&self.keys.channel) {
            w.shared.note(1, 0);
        }
        let entry = local.entry(self.keys.channel.clone()).or_default();
        if !self.counted {
            entry.waiting += 1;
            self.counted = true;
        }
        if let Some(r) = remaining {
            entry.holder_until = Instant::now().checked_add(r);
        }
    }

    /// The next polling delay: exponential from the client's minimum to its maximum,
    /// with full jitter.
    fn backoff(&mut self) -> Duration {
        let (min, max) = self.hub.backoff;
        let step = backoff_cap(min, max, self.backoff_step);
        self.backoff_step = self.backoff_step.saturating_add(1);
        jitter(min, step)
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        let Some(w) = self.waiter else { return };
        self.release_late_hand_off();
        let woken = self.turn == Turn::Woken;
        if self.queued || woken {
            // A wake-up this slot took but did not use, or one the thread sent it
            // that it never read, belongs to the next waiter. The thread checks
            // the unread one after taking the slot out of its queue, so none can
            // arrive after the check.
            let _ = w.tx.send(Command::Leave {
                channel: self.keys.channel.clone(),
                seq: self.seq,
                pass: woken,
                unread: (self.turn != Turn::Acquired).then(|| self.rx.clone()),
            });
        }
        if self.counted {
            let mut local = w.shared.local.lock();
            if let Some(entry) = local.get_mut(&self.keys.channel) {
                entry.waiting -= 1;
                if entry.waiting == 0 {
                    local.remove(&self.keys.channel);
                    w.shared.note(0, 1);
                }
            }
        }
    }
}

impl WaitSlot<'_> {
    /// A hand-off that arrived after the caller stopped waiting for it is a lock
    /// nobody will use: release it so the next waiter gets it.
    fn release_late_hand_off(&mut self) {
        let mut late = false;
        for wake in self.rx.try_iter() {
            match wake {
                Wake::Handed { .. } => late = true,
                // An unread release is passed on by the `Leave` below.
                Wake::Released if self.turn != Turn::Acquired => self.turn = Turn::Woken,
                _ => {}
            }
        }
        if let (true, Some(value), Some((ttl, _))) = (late, self.offer_value.take(), self.want) {
            let until = Instant::now() + ttl;
            let token = std::sync::Arc::new(TokenBackend);
            self.hub
                .topology
                .release_later(token, self.keys.clone(), value, until);
        }
    }
}

/// The upper end of backoff step `step`: `min` doubled `step` times, at most `max`.
fn backoff_cap(min: Duration, max: Duration, step: u32) -> Duration {
    min.saturating_mul(1 << step.min(16)).min(max).max(min)
}

/// A delay drawn uniformly from `lo..=hi` (full jitter); `lo` when `hi < lo`.
fn jitter(lo: Duration, hi: Duration) -> Duration {
    let lo = u64::try_from(lo.as_micros()).unwrap_or(u64::MAX);
    let hi = u64::try_from(hi.as_micros()).unwrap_or(u64::MAX).max(lo);
    Duration::from_micros(fastrand::u64(lo..=hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_from_the_minimum_up_to_the_maximum() {
        let caps: Vec<u64> = (0..6)
            .map(|step| u64::try_from(backoff_cap(4 * MS, 50 * MS, step).as_millis()).unwrap())
            .collect();
        assert_eq!(caps, [4, 8, 16, 32, 50, 50]);
    }

    #[test]
    fn backoff_survives_huge_steps_and_durations() {
        assert_eq!(backoff_cap(4 * MS, 200 * MS, u32::MAX), 200 * MS);
        let huge = Duration::from_secs(u64::MAX);
        assert_eq!(backoff_cap(huge, huge, 40), huge);
        assert_eq!(jitter(huge, huge), Duration::from_micros(u64::MAX));
    }

    proptest! {
        #[test]
        fn jittered_delays_stay_within_the_step(
            min_us in 1u64..1_000_000,
            extra_us in 0u64..1_000_000,
            step in 0u32..64,
        ) {
            let min = Duration::from_micros(min_us);
            let max = min + Duration::from_micros(extra_us);
            let cap = backoff_cap(min, max, step);
            prop_assert!(min <= cap && cap <= max);
            let delay = jitter(min, cap);
            prop_assert!(min <= delay && delay <= cap);
        }
    }
}
