//! [`WaitSlot`]: one caller's side of a wait, from its first busy reply (or its
//! arrival behind other callers of its client) to its return.
//!
//! Layout: this file is the wait itself (the line, the sleeps, the polling step);
//! `offer.rs` the caller's side of a local hand-off (its offer to a releasing guard
//! of its client, and what it was handed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::backoff::{backoff_cap, jitter};
use super::handoff::{OPEN, Want};
use super::{Command, Hub, Waiter, Wake};
use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::metrics::bump;
use crate::scheme::Keys;
use crate::threads::cancel::{CancelToken, Watch};

/// How long a caller behind the head sleeps before it looks at the line again on
/// its own, in units of the longest polling step. It sends nothing when it wakes.
const BEHIND_STEPS: u32 = 4;

mod offer;

pub(crate) use offer::Handoff;

/// One caller's wait for one key.
pub(crate) struct WaitSlot<'a> {
    hub: &'a Hub,
    waiter: Option<&'a Waiter>,
    keys: Keys,
    seq: u64,
    tx: Sender<Wake>,
    rx: Receiver<Wake>,
    /// In the waiter thread's queue (as far as this slot knows: a release the thread
    /// sent but the slot has not read yet took it out).
    queued: bool,
    /// In the key's line.
    joined: bool,
    turn: Turn,
    backoff_step: u32,
    /// When the holder's TTL last seen runs out.
    holder_until: Option<Instant>,
    /// When the TTL last seen runs out of a holder that publishes its release
    /// whoever waits (an election's leader): while this client hears the key's
    /// channel, the head waits for the message or this instant, and does not
    /// poll. `None`: the holder last seen may release without a word.
    announced_until: Option<Instant>,
    /// Gave up at its deadline: the lock was busy at its last poll, so the next
    /// prober need not try at once.
    timed_out: bool,
    /// What this caller wants, for hand-off offers; `None` when releasers cannot
    /// hand it over.
    want: Option<Want>,
    /// The token this caller offers to be handed the lock with (made once).
    offer_value: Option<String>,
    /// The claim of the offer out now (see [`Offer::claim`]).
    claim: Arc<AtomicU8>,
    _watches: [Option<Watch>; 2],
}

/// What a waiting caller does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Try to take the lock now.
    Attempt,
    /// A releasing guard of this client handed the lock over with a new token.
    Handed(Handoff),
    /// A releasing guard of this client passed its lease itself.
    Transferred(Arc<LeaseState>),
    /// The deadline passed: give up without another attempt.
    GaveUp,
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
        want: Option<Want>,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let watches = [
            Some(hub.shutdown.watch(&tx, Wake::Shutdown)),
            cancel.map(|c| c.watch(&tx, Wake::Cancelled)),
        ];
        Self {
            hub,
            waiter,
            keys: keys.clone(),
            seq: hub.lines.next_seq(),
            tx,
            rx,
            queued: false,
            joined: false,
            turn: Turn::Waiting,
            backoff_step: 0,
            holder_until: None,
            announced_until: None,
            timed_out: false,
            want,
            offer_value: None,
            claim: Arc::new(AtomicU8::new(OPEN)),
            _watches: watches,
        }
    }

    /// Before the first attempt of a caller that arrived while others of its client
    /// were acquiring or waiting for the key: join the line, and unless at its head,
    /// wait behind it rather than race the others (or barge in on the lock a waiter
    /// is about to be handed).
    pub(crate) fn first_turn(&mut self, deadline: Option<Instant>) -> Result<Next> {
        if self.join() {
            return Ok(Next::Attempt);
        }
        if let Some(w) = self.healthy_waiter() {
            self.enqueue(w);
        }
        self.wait(deadline)
    }

    /// After a busy reply: wait until it is worth trying again.
    ///
    /// Subscribes first when needed (so no release is missed between the failed
    /// attempt and the wait). The head of the line sleeps until a release message,
    /// a polling step (capped, jittered, never past the holder's `remaining` TTL) or
    /// `deadline`; callers behind it send nothing and sleep until a release message,
    /// a hand-off, their turn at the head, or `deadline`. A holder that `announces`
    /// its release is not polled while the key's channel is heard: the head then
    /// sleeps until the message, the end of `remaining`, or a change of the
    /// subscription (a lost connection, a confirmation).
    pub(crate) fn pause(
        &mut self,
        remaining: Option<Duration>,
        announces: bool,
        deadline: Option<Instant>,
    ) -> Result<Next> {
        // The attempt that found the lock busy used any wake-up we had.
        self.turn = Turn::Waiting;
        self.join();
        self.holder_until = self.hub.lines.note_holder(&self.keys.channel, remaining);
        // Trusted only with this reply's TTL: the line's may be an older holder's.
        self.announced_until = self
            .holder_until
            .filter(|_| announces && remaining.is_some());
        if let Some(w) = self.healthy_waiter()
            && !self.queued
        {
            self.enqueue(w);
            // A release between the busy reply and the queueing: the thread keeps
            // a message nobody was queued for (for a second), and this caller takes
            // it here if the thread has not read its `Wait` yet (the thread may
            // sleep on its socket until its next tick). A channel not yet
            // subscribed is subscribed now, and the confirmation makes the head
            // try again.
            if w.shared.take_unclaimed(&self.keys.channel)
                && self.hub.lines.held_off(&self.keys.channel).is_none()
            {
                self.turn = Turn::Woken;
                self.holder_until = None;
                bump(&self.hub.counters.wakeups, 1);
                return Ok(Next::Attempt);
            }
            if !w.shared.subscribed.read().contains(&self.keys.channel) {
                self.kick(w);
            }
        }
        self.wait(deadline)
    }

    /// Whether the next attempt should ask how long the holder has left: when
    /// nothing is known of it, or its TTL last seen has run out.
    pub(crate) fn needs_remaining(&self) -> bool {
        self.holder_until.is_none_or(|t| t <= Instant::now())
    }

    /// Marks the wait as ended by an acquisition: a wake-up it still holds was
    /// meant for it, and is not passed on.
    pub(crate) fn acquired(&mut self) {
        self.turn = Turn::Acquired;
    }

    fn wait(&mut self, deadline: Option<Instant>) -> Result<Next> {
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                self.timed_out = true;
                return Ok(Next::GaveUp);
            }
            let head = self.is_head();
            let held_off = self.hub.lines.held_off(&self.keys.channel);
            let until = if let Some(t) = held_off.filter(|_| head) {
                t
            } else if head {
                let after = |t: Instant| t + Duration::from_millis(1);
                match self.announced_until {
                    // Its release message wakes us; its death, the end of its TTL.
                    Some(end) if self.hears_release() => after(end),
                    // A holder that never publishes is waited out by its TTL at most.
                    _ => {
                        let step = now + self.backoff();
                        self.holder_until.map_or(step, |t| step.min(after(t)))
                    }
                }
            } else {
                now + self.hub.backoff.1 * BEHIND_STEPS
            };
            let until = deadline.map_or(until, |d| d.min(until));
            match self.sleep(until) {
                Some(Wake::Handed { sent, fence }) => {
                    return Ok(Next::Handed(self.handed(sent, fence)));
                }
                Some(Wake::Transferred(state)) => {
                    self.turn = Turn::Acquired;
                    return Ok(Next::Transferred(state));
                }
                // Our offer was taken and not used: the lock may be free.
                Some(Wake::NotHanded) => return Ok(Next::Attempt),
                Some(Wake::Released) => {
                    self.queued = false;
                    self.turn = Turn::Woken;
                    self.backoff_step = 0;
                    // The holder's TTL last seen is stale: the key may be someone
                    // else's now, or kept for a minimum hold that ends sooner
                    // (whose key publishes nothing when it expires). A busy reply
                    // to the next attempt says how long the holder has left.
                    self.holder_until = None;
                    bump(&self.hub.counters.wakeups, 1);
                    // Other clients' waiters go first for a moment: try after it.
                    if self.hub.lines.held_off(&self.keys.channel).is_none() {
                        return Ok(Next::Attempt);
                    }
                    // Queued again for the next message, which may end the hold-off.
                    self.turn = Turn::Waiting;
                    if let Some(w) = self.healthy_waiter() {
                        self.enqueue(w);
                    }
                }
                Some(Wake::Probe { now }) => {
                    self.backoff_step = 0;
                    // Whoever holds the key now was not seen by this caller.
                    self.announced_until = None;
                    if now {
                        return Ok(Next::Attempt);
                    }
                }
                // Subscribed: a release before it may have been missed. Connection
                // lost: the head's polling covers it.
                Some(Wake::Retry) if head && self.healthy_waiter().is_some() => {
                    return Ok(Next::Attempt);
                }
                Some(Wake::Cancelled) => {
                    return Err(Error::Cancelled {
                        key: self.keys.lock.as_str().into(),
                    });
                }
                Some(Wake::Shutdown) => return Err(Error::Shutdown),
                None if head && deadline.is_none_or(|d| Instant::now() < d) => {
                    return Ok(Next::Attempt);
                }
                Some(Wake::Retry) | None => {}
            }
        }
    }

    /// Sleeps until a wake-up or `until` (`None`). While asleep the caller has an
    /// offer out, so a releasing guard of this client can hand it the lock.
    fn sleep(&mut self, until: Instant) -> Option<Wake> {
        let posted = self.post_offer();
        let woke = self.rx.recv_deadline(until).ok();
        let outcome = matches!(
            woke,
            Some(Wake::Handed { .. } | Wake::Transferred(_) | Wake::NotHanded)
        );
        if posted && !self.withdraw_offer() && !outcome {
            // A releaser took the offer and is handing the lock over right now:
            // its answer comes within its network timeouts.
            if let Some(got) = self.await_hand_off() {
                return Some(got);
            }
            if woke.is_none() {
                return Some(Wake::NotHanded);
            }
        }
        woke
    }

    /// Whether a release message would wake this caller now: it is queued on a
    /// confirmed subscription of the key's channel over a connection that is up.
    /// When the connection drops or the server ends the subscription, the waiter
    /// thread sends [`Wake::Retry`], and the caller polls (and looks again once
    /// subscribed: a release meanwhile may have been missed).
    fn hears_release(&self) -> bool {
        self.queued
            && self
                .healthy_waiter()
                .is_some_and(|w| w.shared.subscribed.read().contains(&self.keys.channel))
    }

    fn healthy_waiter(&self) -> Option<&'a Waiter> {
        self.waiter
            .filter(|w| w.shared.healthy.load(Ordering::Acquire))
    }

    /// Joins the key's line (once); whether this caller heads it.
    fn join(&mut self) -> bool {
        if self.joined {
            return self.is_head();
        }
        self.joined = true;
        self.hub.lines.join(&self.keys.channel, self.seq, &self.tx)
    }

    fn is_head(&self) -> bool {
        self.hub.lines.is_head(&self.keys.channel, self.seq)
    }

    fn enqueue(&mut self, w: &Waiter) {
        if self.queued {
            return;
        }
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
        let node = w.shared.node.load(Ordering::Acquire);
        let _ = self.hub.topology.publish(node, &w.kick, "");
    }

    /// The next polling delay: exponential from the client's minimum to its maximum,
    /// jittered within the top quarter of the step (one prober per key and client,
    /// so the jitter only keeps several clients' probers apart).
    fn backoff(&mut self) -> Duration {
        let (min, max) = self.hub.backoff;
        let step = backoff_cap(min, max, self.backoff_step);
        self.backoff_step = self.backoff_step.saturating_add(1);
        jitter(step.saturating_sub(step / 4), step)
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        self.release_late_hand_off();
        if self.joined {
            // A caller that leaves with the lock, or whose deadline ran out after a
            // busy poll, lets the next start polling; one that stops otherwise
            // (cancelled, an error) lets it try at once.
            let now = self.turn != Turn::Acquired && !self.timed_out;
            self.hub.lines.leave(&self.keys.channel, self.seq, now);
        }
        let Some(w) = self.waiter else { return };
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
    }
}
