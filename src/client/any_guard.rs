//! [`AnyGuard`]: the lock on one name out of several, saying which it took.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::error::Result;
use crate::lease::LeaseLost;
use crate::scheme::Release;

/// The lock on one name of a list, taken by
/// [`LockClient::lock_any`](crate::LockClient::lock_any),
/// [`try_lock_any`](crate::LockClient::try_lock_any),
/// [`try_lock_any_for`](crate::LockClient::try_lock_any_for) or
/// [`lock_any_with`](crate::LockClient::lock_any_with). Releases it when dropped
/// (also while unwinding from a panic).
///
/// It is a [`LockGuard`] that also says which name it took:
/// [`index`](Self::index) (in the list given) and [`name`](Self::name). The
/// lease is renewed in the background and fenced when fencing is on, as a
/// [`LockGuard`]'s is; the fence is the taken name's own.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct AnyGuard {
    index: usize,
    name: String,
    guard: LockGuard,
}

impl AnyGuard {
    pub(crate) fn new(index: usize, name: String, guard: LockGuard) -> Self {
        Self { index, name, guard }
    }

    /// The position, in the list given, of the name taken.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The name taken, as given (without the client's key prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock key of the name taken (with the client's prefix).
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The taken name's fencing token, when fencing was asked for: see
    /// [`LockGuard::fence`].
    pub fn fence(&self) -> Option<u64> {
        self.guard.fence()
    }

    /// Until when the lease is surely held: see [`LockGuard::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// Whether the lease is still ours: see [`LockGuard::is_held`].
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Like [`is_held`](Self::is_held), as a `Result`.
    ///
    /// # Errors
    /// As [`LockGuard::check`].
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// A channel that receives a message when the lease is lost: see
    /// [`LockGuard::lost`].
    pub fn lost(&self) -> &Receiver<LeaseLost> {
        self.guard.lost()
    }

    /// Sets the lease's remaining time to `ttl` from now: see
    /// [`LockGuard::extend`].
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.guard.extend(ttl)
    }

    /// The plain guard of the name taken (its index and name forgotten).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Releases the lock and says what Redis found: see [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    pub fn unlock(self) -> Result<Release> {
        self.guard.unlock()
    }
}
