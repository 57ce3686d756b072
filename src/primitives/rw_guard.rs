//! [`ReadGuard`] and [`WriteGuard`]: a held read or write lock of a
//! [`ReadWriteLock`](crate::ReadWriteLock), released when dropped.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::error::Result;
use crate::lease::LeaseLost;
use crate::scheme::Release;

/// Defines a guard type around a [`LockGuard`]: both sides have the same methods.
macro_rules! rw_guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[must_use = "if unused the lock is released immediately"]
        #[clippy::has_significant_drop]
        pub struct $name {
            guard: LockGuard,
        }

        impl $name {
            pub(crate) fn new(guard: LockGuard) -> Self {
                Self { guard }
            }

            /// The lock's name, with the client's prefix.
            pub fn name(&self) -> &str {
                self.guard.key()
            }

            /// The hash field this hold is stored under: `<client uuid>:<thread id>`
            /// for a read, with `:write` after it for a write (Redisson's fields).
            pub fn field(&self) -> String {
                self.guard.value()
            }

            /// Whether the hold is still ours: not known lost, and within
            /// [`valid_until`](Self::valid_until). A local check; never blocks.
            pub fn is_held(&self) -> bool {
                self.guard.is_held()
            }

            /// The instant until which the hold is surely valid (local monotonic
            /// clock): the last confirmed acquire or renewal, plus the TTL, minus
            /// the drift allowance.
            pub fn valid_until(&self) -> Instant {
                self.guard.valid_until()
            }

            /// A channel that receives one [`LeaseLost`] if the hold is lost (as
            /// [`LockGuard::lost`]).
            pub fn lost(&self) -> &Receiver<LeaseLost> {
                self.guard.lost()
            }

            /// [`is_held`](Self::is_held) as a `Result`.
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) once the hold is lost or
            /// past its validity.
            pub fn check(&self) -> Result<()> {
                self.guard.check()
            }

            /// Makes the hold last `ttl` from now at least, if still ours (the
            /// name's TTL is never shortened while it has other holds).
            ///
            /// # Errors
            /// As [`LockGuard::extend`].
            pub fn extend(&self, ttl: Duration) -> Result<()> {
                self.guard.extend(ttl)
            }

            #[doc = concat!("Releases the ", $what, " hold and says what Redis found:")]
            /// [`Release::Expired`] when it had ended first. The last hold of
            /// the name publishes the release message that wakes waiters.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when the release got no
            /// answer; the hold then ends with its TTL.
            pub fn unlock(self) -> Result<Release> {
                self.guard.unlock()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &self.name())
                    .field("held", &self.is_held())
                    .finish_non_exhaustive()
            }
        }
    };
}

rw_guard!(
    /// A held read lock, shared with other readers. Releases its hold when
    /// dropped (also while unwinding from a panic).
    ///
    /// Made by [`ReadWriteLock::read`](crate::ReadWriteLock::read),
    /// [`try_read`](crate::ReadWriteLock::try_read),
    /// [`try_read_for`](crate::ReadWriteLock::try_read_for),
    /// [`try_read_until`](crate::ReadWriteLock::try_read_until) and
    /// [`read_with`](crate::ReadWriteLock::read_with). Renewed in the background
    /// (the name and this holder's timeout keys), like a lock's lease.
    ReadGuard,
    "read"
);

rw_guard!(
    /// A held write lock, exclusive. Releases its hold when dropped (also while
    /// unwinding from a panic).
    ///
    /// Made by [`ReadWriteLock::write`](crate::ReadWriteLock::write),
    /// [`try_write`](crate::ReadWriteLock::try_write),
    /// [`try_write_for`](crate::ReadWriteLock::try_write_for),
    /// [`try_write_until`](crate::ReadWriteLock::try_write_until) and
    /// [`write_with`](crate::ReadWriteLock::write_with). Renewed in the
    /// background like a lock's lease. Its thread may also take read locks of
    /// the name while it holds it.
    WriteGuard,
    "write"
);
