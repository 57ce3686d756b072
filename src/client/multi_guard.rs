//! [`MultiGuard`]: the locks on several names, taken together, released when dropped.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::error::{Error, Operation, Result};
use crate::lease::LeaseLost;
use crate::metrics::bump;
use crate::scheme::Release;
use crate::threads::wait::release_all;

/// The locks on several names, all taken together. Releases every one when dropped
/// (also while unwinding from a panic).
///
/// Made by [`LockClient::lock_all`](crate::LockClient::lock_all),
/// [`try_lock_all`](crate::LockClient::try_lock_all),
/// [`try_lock_all_for`](crate::LockClient::try_lock_all_for) and
/// [`lock_all_with`](crate::LockClient::lock_all_with).
///
/// Each name is a lease of its own, as a [`LockGuard`]'s is: renewed in the
/// background, fenced when fencing is on, and lost on its own. The set is held
/// while every lease is: [`is_held`](Self::is_held) is false, and
/// [`lost`](Self::lost) fires, as soon as one of them is lost. Names are kept in
/// the order they were given.
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
    lost: OnceLock<Receiver<LeaseLost>>,
}

impl MultiGuard {
    pub(crate) fn new(guards: Vec<LockGuard>) -> Self {
        Self {
            guards,
            lost: OnceLock::new(),
        }
    }

    /// The lock keys, with the client's prefix, in the order the names were given.
    pub fn keys(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::key).collect()
    }

    /// How many names are held together.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Always false: a guard holds at least one name (an empty list is refused).
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// The fencing token of each name, in the order the names were given, when
    /// fencing was asked for (`None` otherwise).
    ///
    /// One per name, each strictly increasing per key as [`LockGuard::fence`]
    /// says; where the names were taken in one script (one server, one cluster
    /// slot) they come from one counter and increase in the order given.
    pub fn fences(&self) -> Option<Vec<u64>> {
        self.guards.iter().map(LockGuard::fence).collect()
    }

    /// The earliest of the leases' [`LockGuard::valid_until`]: until then every
    /// name is surely held.
    pub fn valid_until(&self) -> Instant {
        self.guards
            .iter()
            .map(LockGuard::valid_until)
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// Whether every lease is still ours. A local check; never blocks.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Like [`is_held`](Self::is_held), as a `Result` for use with `?`.
    ///
    /// # Errors
    /// [`Error::LockLost`] naming the first name whose lease is lost or past its
    /// validity.
    pub fn check(&self) -> Result<()> {
        self.guards.iter().try_for_each(LockGuard::check)
    }

    /// A channel that receives a [`LeaseLost`] message for each name whose lease
    /// is lost: the first message means the set is no longer held.
    ///
    /// One channel is shared by every lease (no thread per guard): the renewal
    /// thread sends on it as it does for [`LockGuard::lost`], and it disconnects
    /// once every lease has been dropped after release.
    pub fn lost(&self) -> &Receiver<LeaseLost> {
        self.lost.get_or_init(|| {
            let (tx, rx) = crossbeam_channel::bounded(self.guards.len());
            for g in &self.guards {
                g.lease().lost_to(tx.clone());
            }
            rx
        })
    }

    /// Sets every lease's remaining time to `ttl` from now, if it is still ours:
    /// one round trip per name. Each is tried even when another fails.
    ///
    /// # Errors
    /// The first error of [`LockGuard::extend`], in the order the names were given.
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        let mut first: Option<Error> = None;
        for g in &self.guards {
            if let Err(e) = g.extend(ttl) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Releases every name and says what Redis found for each, in the order the
    /// names were given; each is attempted even when another fails (a failed
    /// release leaves that lock to its TTL).
    ///
    /// One round trip for all where the names share a node (one server, one
    /// cluster slot) and no caller of this client waits for any of them; else one
    /// per name, each released as a [`LockGuard`] is (a caller of this client
    /// waiting for a name may be handed it).
    ///
    /// [`Release::Expired`] or [`Release::Taken`] for a name means its lease ended
    /// before the release: work done under the set may have overlapped another
    /// holder of that name.
    pub fn unlock(mut self) -> Vec<Result<Release>> {
        self.release()
    }

    /// Shared by `unlock` and `Drop`: releases the names not released yet.
    fn release(&mut self) -> Vec<Result<Release>> {
        let taken: Vec<_> = self
            .guards
            .iter_mut()
            .filter_map(LockGuard::take_release)
            .collect();
        let Some(hub) = taken.first().map(|(hub, _)| Arc::clone(hub)) else {
            return Vec::new();
        };
        let states: Vec<_> = taken.into_iter().map(|(_, state)| state).collect();
        let limits = hub.topology.subscriber(0).limits();
        release_all(&hub, &states)
            .into_iter()
            .zip(&states)
            .map(|(outcome, state)| {
                match &outcome {
                    Ok(Release::Released) => bump(&hub.counters.released, 1),
                    // The client's shutdown released it (and counted it):
                    // nothing sent.
                    Ok(_) | Err(Error::Shutdown) => {}
                    Err(_) => bump(&hub.counters.release_errors, 1),
                }
                outcome.map_err(|e| e.during(Operation::Release, &state.key, limits))
            })
            .collect()
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        for (outcome, key) in self.release().into_iter().zip(self.keys()) {
            match outcome {
                // The client's shutdown ended the lease and reported it.
                Err(Error::Shutdown) => {}
                // The error names the call and the key.
                Err(e) => log::warn!("dropped guard: {e}"),
                Ok(outcome) if !outcome.was_held() => {
                    log::warn!("lock `{key}` had ended before release: {outcome:?}");
                }
                Ok(_) => {}
            }
        }
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("keys", &self.keys())
            .field("fences", &self.fences())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
