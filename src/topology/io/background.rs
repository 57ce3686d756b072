//! Releases a caller does not wait for: a guard dropped by a client built with
//! `release_in_background(true)` queues its release ([`Free`]) for its node's
//! I/O thread and returns. The thread takes every release queued meanwhile
//! (`worker::collect`) and sends them in one write, pipelined (`wire::send`): one round
//! trip, and one read of the replies, for many releases.
//!
//! [`Queued`] is the client's record of the names whose release is queued and
//! not yet answered. An acquire of such a name waits for the answer first
//! ([`Queued::settle`]), so it is never reported busy only because this client's
//! own release has not landed yet; the compare-and-delete would not remove the
//! new holder's value anyway (another token), so the order matters for the
//! answer only, never for safety. A release whose pipeline failed leaves the
//! record and joins the I/O thread's retried cleanups.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::lease::{LeaseState, Terms};
use crate::scheme::{Backend, Keys, Release};

/// A value to take out of Redis, tried until it expires by itself at `until`.
#[derive(Clone)]
pub(crate) struct Cleanup {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) keys: Keys,
    pub(crate) value: String,
    pub(crate) until: Instant,
}

/// A lease whose release is queued: its values are taken by the I/O thread when
/// it sends the release, or the lease itself is taken back, as it is, by a caller
/// of this client that locks the name before that ([`Queued::take_back`]).
pub(crate) struct Parked {
    pub(crate) state: Arc<LeaseState>,
    /// The values, taken at the drop from a lease that cannot pass to another
    /// holder as it is (a callback, a hold bound); else taken when sent.
    taken: Mutex<Option<(String, Vec<String>)>>,
    /// [`OPEN`], [`SENT`] or [`TAKEN`]: whoever moves it from [`OPEN`] first has
    /// the lease, the I/O thread to release it or a caller to hold it.
    claim: AtomicU8,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked")
            .field("key", &self.state.key)
            .field("claim", &self.claim.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A [`Parked`] lease nobody has claimed yet.
const OPEN: u8 = 0;
/// The I/O thread took its values to release them.
const SENT: u8 = 1;
/// A caller of this client took the lease back: nothing is sent.
const TAKEN: u8 = 2;

impl Parked {
    /// `state` parked, with its values if they were `taken` already.
    pub(crate) fn new(state: Arc<LeaseState>, taken: Option<(String, Vec<String>)>) -> Arc<Self> {
        Arc::new(Self {
            state,
            taken: Mutex::new(taken),
            claim: AtomicU8::new(OPEN),
        })
    }

    /// The values to release, once: `None` when a caller took the lease back, or
    /// when the client's shutdown released it first.
    pub(crate) fn take(&self) -> Option<(String, Vec<String>)> {
        self.claim
            .compare_exchange(OPEN, SENT, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let taken = self.taken.lock().take();
        taken.or_else(|| self.state.take_value())
    }
}

/// A guard's release, queued for its node's I/O thread.
pub(crate) struct Free {
    /// The name as the client's record knows it: the lock key with its prefix.
    pub(crate) name: String,
    /// The value to take out: empty until [`Free::take`] fills it in.
    pub(crate) cleanup: Cleanup,
    pub(crate) parked: Arc<Parked>,
    /// Publish the release message whoever waits (this client has callers of
    /// the key); otherwise only for a value a waiter marked, as a release does.
    pub(crate) always: bool,
    pub(crate) queued: Arc<Queued>,
}

impl Free {
    /// The release to send, with its value filled in, and the other values an
    /// unanswered renewal may have left (each taken out as a cleanup); `None` when
    /// there is nothing to send: a caller took the lease back (and settled the
    /// record), or the client's shutdown released it (the record is settled here).
    pub(crate) fn take(mut self) -> Option<(Free, Vec<Cleanup>)> {
        let Some((value, maybe)) = self.parked.take() else {
            self.queued.cancel(&self.name, &self.parked);
            return None;
        };
        self.cleanup.value = value;
        let others = maybe
            .into_iter()
            .map(|value| Cleanup {
                value,
                ..self.cleanup.clone()
            })
            .collect();
        Some((self, others))
    }
}

/// A client's releases queued and not yet answered, by name; and what the
/// answered ones found, for a shutdown's report.
#[derive(Debug, Default)]
pub(crate) struct Queued {
    names: Mutex<HashMap<String, Vec<Arc<Parked>>>>,
    answered: Condvar,
    /// The releases queued now: an acquire reads it, one atomic load, and looks
    /// no further while it is zero.
    pending: AtomicUsize,
    released: AtomicUsize,
    gone: AtomicUsize,
    failed: AtomicUsize,
    /// The process's exit hook knows this queue (`exit::watch`).
    pub(super) watched: AtomicBool,
}

/// What the answered background releases found, counted since the client began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) released: usize,
    pub(crate) gone: usize,
    pub(crate) failed: usize,
}

impl Queued {
    /// Records the release of `parked` under `name` as queued; before it is sent.
    pub(crate) fn add(&self, name: &str, parked: &Arc<Parked>) {
        let mut names = self.names.lock();
        names
            .entry(name.to_owned())
            .or_default()
            .push(Arc::clone(parked));
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// Records the release of `parked` as answered (`Some`) or failed (`None`),
    /// and wakes the callers waiting for it.
    pub(crate) fn done(&self, name: &str, parked: &Arc<Parked>, outcome: Option<Release>) {
        let counter = match outcome {
            Some(Release::Released) => &self.released,
            Some(_) => &self.gone,
            None => &self.failed,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.cancel(name, parked);
    }

    /// Takes the release of `parked` out of the record without counting it (its
    /// release went another way).
    pub(crate) fn cancel(&self, name: &str, parked: &Arc<Parked>) {
        let mut names = self.names.lock();
        let removed = Self::remove(&mut names, name, parked);
        drop(names);
        if removed {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            self.answered.notify_all();
        }
    }

    /// Takes `parked` out of `names`; whether it was there.
    fn remove(
        names: &mut HashMap<String, Vec<Arc<Parked>>>,
        name: &str,
        parked: &Arc<Parked>,
    ) -> bool {
        let Some(list) = names.get_mut(name) else {
            return false;
        };
        let Some(at) = list.iter().position(|p| Arc::ptr_eq(p, parked)) else {
            return false;
        };
        list.swap_remove(at);
        if list.is_empty() {
            names.remove(name);
        }
        true
    }

    /// A lease of `name` whose release is queued and not sent yet, taken back as
    /// it is (same token, validity and renewal: no round trip) for a caller that
    /// would hold it on the same `terms`; its release is then never sent. `None`
    /// when there is none (nothing queued, sent already, other terms).
    pub(crate) fn take_back(&self, name: &str, terms: Terms) -> Option<Arc<LeaseState>> {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut names = self.names.lock();
        let found = names.get(name)?.iter().find_map(|p| {
            let fits = p.taken.lock().is_none() && p.state.terms() == Some(terms);
            let won = fits
                && p.claim
                    .compare_exchange(OPEN, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            won.then(|| Arc::clone(p))
        })?;
        Self::remove(&mut names, name, &found);
        self.pending.fetch_sub(1, Ordering::SeqCst);
        drop(names);
        self.answered.notify_all();
        Some(Arc::clone(&found.state))
    }

    /// Waits until no release of `name` is queued, or until `by`: an acquire of
    /// `name` then finds the key as this client's release left it.
    pub(crate) fn settle(&self, name: &str, by: Instant) {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut names = self.names.lock();
        while names.contains_key(name) {
            if self.answered.wait_until(&mut names, by).timed_out() {
                return;
            }
        }
    }

    /// Waits until no release is queued, or until `by`; how many still are.
    /// Returns at once when none is; never waits past `by`, not even for the
    /// record's lock (the exit hook calls it from wherever `exit` was called).
    pub(crate) fn drain(&self, by: Instant) -> usize {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return 0;
        }
        let Some(mut names) = self.names.try_lock_until(by) else {
            return self.pending.load(Ordering::SeqCst);
        };
        while !names.is_empty() {
            if self.answered.wait_until(&mut names, by).timed_out() {
                break;
            }
        }
        self.pending.load(Ordering::SeqCst)
    }

    /// What the answered releases found so far.
    pub(crate) fn tally(&self) -> Tally {
        Tally {
            released: self.released.load(Ordering::SeqCst),
            gone: self.gone.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }
}

impl std::ops::Sub for Tally {
    type Output = Tally;
    fn sub(self, earlier: Tally) -> Tally {
        Tally {
            released: self.released.saturating_sub(earlier.released),
            gone: self.gone.saturating_sub(earlier.gone),
            failed: self.failed.saturating_sub(earlier.failed),
        }
    }
}
