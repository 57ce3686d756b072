//! [`PermitGuard`]: a held permit of a [`Semaphore`](crate::Semaphore), given
//! back when dropped.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::error::Result;
use crate::lease::LeaseLost;
use crate::scheme::Release;

/// A held permit of a [`Semaphore`](crate::Semaphore). Gives it back when dropped (also while
/// unwinding from a panic).
///
/// Made by [`Semaphore::acquire`](crate::Semaphore::acquire),
/// [`try_acquire`](crate::Semaphore::try_acquire),
/// [`try_acquire_for`](crate::Semaphore::try_acquire_for),
/// [`try_acquire_until`](crate::Semaphore::try_acquire_until) and
/// [`acquire_with`](crate::Semaphore::acquire_with). Its lease is renewed in the
/// background like a lock's; [`is_held`](Self::is_held) and [`lost`](Self::lost)
/// say when it ended.
#[must_use = "if unused the permit is given back immediately"]
#[clippy::has_significant_drop]
pub struct PermitGuard {
    guard: LockGuard,
    id: String,
    name: String,
}

impl PermitGuard {
    pub(crate) fn new(guard: LockGuard, name: String) -> Self {
        Self {
            id: guard.value(),
            guard,
            name,
        }
    }

    /// The permit id: 32 hex digits, the client's tag (16 hex of its UUID) and 16
    /// random ones. Redisson's `release(permitId)` takes it.
    pub fn permit_id(&self) -> &str {
        &self.id
    }

    /// The semaphore's name, with the client's prefix.
    pub fn semaphore(&self) -> &str {
        &self.name
    }

    /// Whether the permit is still ours: not known lost, and within
    /// [`valid_until`](Self::valid_until). A local check; never blocks.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// The instant until which the lease is surely valid (local monotonic
    /// clock): the last confirmed acquire or renewal, plus the TTL, minus the
    /// drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// A channel that receives one [`LeaseLost`] if the permit's lease is lost
    /// (as [`LockGuard::lost`]).
    pub fn lost(&self) -> &Receiver<LeaseLost> {
        self.guard.lost()
    }

    /// [`is_held`](Self::is_held) as a `Result`.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) once the lease is lost or past its validity.
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Sets the lease's remaining time to `ttl` from now, if still ours.
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.guard.extend(ttl)
    }

    /// Gives the permit back and says what Redis found: [`Release::Expired`]
    /// when its lease had ended first (it was counted back then, or now).
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when the release got no answer; the lease then ends by
    /// itself.
    pub fn release(self) -> Result<Release> {
        self.guard.unlock()
    }

    /// The same as [`release`](Self::release), named as [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub fn unlock(self) -> Result<Release> {
        self.release()
    }
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("semaphore", &self.name)
            .field("permit_id", &self.id)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
