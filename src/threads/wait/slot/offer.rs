//! The caller's side of a local hand-off: the offer a waiting caller puts out for
//! a releasing guard of its client, the wait for the outcome of a hand-off in
//! flight, and the lock it was handed (or one handed too late, released).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::super::Wake;
use super::super::handoff::{ABANDONED, OPEN, Offer, give_back};
use super::{Turn, WaitSlot};
use crate::scheme::{TokenBackend, new_token};

/// A lock handed to a waiting caller by a releasing guard of its client.
#[derive(Debug)]
pub(crate) struct Handoff {
    /// The caller's token, now stored under the key.
    pub(crate) value: String,
    /// When the hand-off was sent: the lease's validity counts from here.
    pub(crate) sent: Instant,
    pub(crate) fence: Option<u64>,
}

impl WaitSlot<'_> {
    /// Puts this caller's offer out; whether there is one.
    pub(super) fn post_offer(&mut self) -> bool {
        let Some(want) = self.want else {
            return false;
        };
        let value = self
            .offer_value
            .get_or_insert_with(|| new_token(self.hub.tag))
            .clone();
        // A fresh claim for each offer: the last one was withdrawn or settled.
        self.claim = Arc::new(AtomicU8::new(OPEN));
        self.hub.offers.post(
            &self.keys.channel,
            Offer {
                seq: self.seq,
                value,
                want,
                tx: self.tx.clone(),
                claim: Arc::clone(&self.claim),
            },
        );
        true
    }

    pub(super) fn withdraw_offer(&self) -> bool {
        self.hub.offers.withdraw(&self.keys.channel, self.seq)
    }

    /// Waits for the outcome of a hand-off in flight to this caller: at most the
    /// time the releaser's calls can take, then gives up on it, unless the outcome
    /// is being delivered right then (it is read, never left unread).
    pub(super) fn await_hand_off(&mut self) -> Option<Wake> {
        let mut bound = Instant::now() + 2 * self.hub.topology.subscriber(0).call_bound();
        let mut delivering = false;
        loop {
            match self.rx.recv_deadline(bound) {
                Ok(wake @ (Wake::Handed { .. } | Wake::Transferred(_) | Wake::NotHanded)) => {
                    return Some(wake);
                }
                Err(_) => {
                    let gave_up = self
                        .claim
                        .compare_exchange(OPEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok();
                    if gave_up || delivering {
                        return None;
                    }
                    // The releaser is sending it now: a send never blocks.
                    delivering = true;
                    bound = Instant::now() + Duration::from_secs(1);
                }
                // Cancel and shutdown flags are seen by the caller's next check; a
                // release message is for the head, which may be us: not lost.
                Ok(Wake::Released) => self.turn = Turn::Woken,
                Ok(_) => {}
            }
        }
    }

    pub(super) fn handed(&mut self, sent: Instant, fence: Option<u64>) -> Handoff {
        self.turn = Turn::Acquired;
        Handoff {
            value: self.offer_value.take().unwrap_or_default(),
            sent,
            fence,
        }
    }
    /// A hand-off that arrived after the caller stopped waiting for it is a lock
    /// nobody will use: release it so the next waiter gets it.
    pub(super) fn release_late_hand_off(&mut self) {
        let mut late = false;
        let mut unread = Vec::new();
        for wake in self.rx.try_iter() {
            unread.push(wake);
        }
        for wake in unread {
            match wake {
                Wake::Handed { .. } => late = true,
                Wake::Transferred(state) => give_back(self.hub, &state),
                // An unread release is passed on by the `Leave` below.
                Wake::Released if self.turn != Turn::Acquired => self.turn = Turn::Woken,
                _ => {}
            }
        }
        if let (true, Some(value), Some(want)) = (late, self.offer_value.take(), self.want) {
            let until = Instant::now() + want.ttl;
            let token = Arc::new(TokenBackend::new(self.hub.tag));
            self.hub
                .topology
                .release_later(token, self.keys.clone(), value, until);
        }
    }
}
