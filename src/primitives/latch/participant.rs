//! [`Participant`]: one joined participant of a [`Latch`], holding its lease.

use std::fmt;

use super::Latch;
use crate::client::guard::LockGuard;
use crate::error::{Error, Result};

/// A participant of a [`Latch`], from [`Latch::join`]: its lease, renewed by
/// the client's renewal thread while this value lives.
///
/// [`count_down`](Self::count_down) counts it down and gives the lease back.
/// Dropping it without counting down gives the lease back too, unused: the
/// latch's waiters then return [`Error::ParticipantDied`], as they do when the
/// process dies and the lease runs out.
#[must_use = "a participant dropped without counting down fails the latch's waiters"]
#[clippy::has_significant_drop]
pub struct Participant {
    latch: Latch,
    /// The lease; `None` once counted down.
    guard: Option<LockGuard>,
    /// The lease's token, as the latch lists it.
    token: String,
}

impl Participant {
    pub(super) fn new(latch: Latch, guard: LockGuard, token: String) -> Self {
        Self {
            latch,
            guard: Some(guard),
            token,
        }
    }

    /// The lease's key, as the latch lists it.
    pub fn key(&self) -> &str {
        self.guard.as_ref().map_or("", LockGuard::key)
    }

    /// Whether the lease is still held (renewed in time).
    pub fn is_held(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_held)
    }

    /// Counts down (Redisson's `countDown`, publishing `0` on Redisson's
    /// channel when the count reaches zero), removes the participant from the
    /// latch in the same script, then gives the lease back. Returns the count
    /// after it. Sends two script calls; never waits for anyone.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lease ran out first (a stall longer than the
    /// liveness: the waiters may already have returned
    /// [`Error::ParticipantDied`]) and nothing was counted; Redis failures (the
    /// count down may or may not have happened: the lease is given back all
    /// the same).
    pub fn count_down(mut self) -> Result<u64> {
        let Some(guard) = self.guard.take() else {
            return Err(Error::Shutdown);
        };
        if let Err(e) = guard.check() {
            // Lost: nothing is counted. The lease goes, and the waiters learn.
            drop(guard);
            let _ = self.latch.wake();
            return Err(e);
        }
        let counted = self.latch.count_down_for((guard.key(), &self.token))?;
        let Some(count) = counted else {
            return Err(Error::LockLost {
                key: guard.key().into(),
            });
        };
        if let Err(e) = guard.unlock() {
            // Counted: the lease only has to go, and runs out if this failed.
            log::debug!("latch `{}`: giving a lease back: {e}", self.latch.key());
        }
        Ok(count)
    }

    /// Leaves without counting down, giving the lease back at once and waking
    /// the waiters (a `1`, Redisson's "new count" message, on its channel:
    /// Redisson's waiters read the count again and wait on): they return
    /// [`Error::ParticipantDied`] naming this client. Dropping the participant
    /// does the same.
    ///
    /// # Errors
    /// Redis failures of the release (the lease then runs out within the
    /// liveness) or of the message (the waiters then see the lease gone at its
    /// expiry time).
    pub fn leave(mut self) -> Result<()> {
        self.go()
    }

    /// Gives the lease back unused, then wakes the waiters.
    fn go(&mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        // Released before the message, so that the waiters it wakes find the
        // lease gone.
        let _ = guard.unlock()?;
        self.latch.wake()
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        if let Err(e) = self.go() {
            log::warn!("latch `{}`: leaving: {e}", self.latch.key());
        }
    }
}

impl fmt::Debug for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Participant")
            .field("latch", &self.latch.key())
            .field("lease", &self.key())
            .finish_non_exhaustive()
    }
}
