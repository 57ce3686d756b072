//! The guards of the named primitives, defined once by [`lease_guard!`]:
//! [`ReadGuard`] and [`WriteGuard`] of a [`ReadWriteLock`](crate::ReadWriteLock),
//! [`PermitGuard`] of a [`Semaphore`](crate::Semaphore). Each wraps a
//! [`LockGuard`] (a lease renewed in the background, released when dropped) and
//! has its methods: the same names, the same docs.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::client::ticket::Ticket;
use crate::error::Result;
use crate::lease::LeaseLost;
use crate::scheme::Release;

/// Defines a guard type around a [`LockGuard`]: `$what` names what it holds in
/// the docs (`read lock`, `permit`), `$value` the accessor of the value its
/// lease stored, under the name its users know (Redisson's hash field, permit id).
macro_rules! lease_guard {
    (
        $(#[$doc:meta])*
        $name:ident, $what:literal,
        $(#[$value_doc:meta])*
        fn $value:ident
    ) => {
        $(#[$doc])*
        #[must_use = concat!("if unused the ", $what, " is released immediately")]
        #[clippy::has_significant_drop]
        pub struct $name {
            guard: LockGuard,
            /// The value the lease stored, read once: it never changes.
            value: Box<str>,
        }

        impl From<LockGuard> for $name {
            fn from(guard: LockGuard) -> Self {
                Self {
                    value: guard.value().into(),
                    guard,
                }
            }
        }

        impl $name {
            #[doc = concat!("The ", $what, "'s key: its name with the client's prefix.")]
            pub fn key(&self) -> &str {
                self.guard.key()
            }

            $(#[$value_doc])*
            pub fn $value(&self) -> &str {
                &self.value
            }

            #[doc = concat!("Whether the ", $what, " is still ours: not known lost, and within")]
            /// [`valid_until`](Self::valid_until). A local check; never blocks.
            pub fn is_held(&self) -> bool {
                self.guard.is_held()
            }

            /// The instant until which the lease is surely valid (local monotonic
            /// clock): the last confirmed acquire or renewal, plus the TTL, minus
            /// the drift allowance.
            pub fn valid_until(&self) -> Instant {
                self.guard.valid_until()
            }

            #[doc = concat!("A channel that receives one [`LeaseLost`] if the ", $what, "'s lease is")]
            /// lost (as [`LockGuard::lost`]).
            pub fn lost(&self) -> &Receiver<LeaseLost> {
                self.guard.lost()
            }

            /// [`is_held`](Self::is_held) as a `Result`, for use with `?` right
            /// before a side effect that needs the hold.
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) once the lease is lost
            /// or past its validity.
            pub fn check(&self) -> Result<()> {
                self.guard.check()
            }

            #[doc = concat!("Makes the ", $what, "'s lease last `ttl` from now at least, if still")]
            /// ours (a key shared with other holds never has its TTL shortened).
            /// One round trip.
            ///
            /// # Errors
            /// As [`LockGuard::extend`].
            pub fn extend(&self, ttl: Duration) -> Result<()> {
                self.guard.extend(ttl)
            }

            #[doc = concat!("Releases the ", $what, " and says what Redis found:")]
            /// [`Release::Expired`] when its lease had ended first. The release
            /// message wakes waiters. One round trip, bounded by the client's
            /// timeouts.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when the release got no
            /// answer; the lease then ends with its TTL.
            pub fn unlock(self) -> Result<Release> {
                self.guard.unlock()
            }

            /// Releases after a closure under the hold returned `out`.
            pub(crate) fn finish<R>(self, out: R) -> Result<R> {
                self.guard.finish(out)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("key", &self.key())
                    .field(stringify!($value), &self.value)
                    .field("held", &self.is_held())
                    .finish_non_exhaustive()
            }
        }
    };
}

lease_guard!(
    /// A held read lock, shared with other readers. Releases its hold when
    /// dropped (also while unwinding from a panic).
    ///
    /// Made by [`ReadWriteLock::read`](crate::ReadWriteLock::read),
    /// [`try_read`](crate::ReadWriteLock::try_read),
    /// [`try_read_for`](crate::ReadWriteLock::try_read_for),
    /// [`try_read_until`](crate::ReadWriteLock::try_read_until) and
    /// [`read_with`](crate::ReadWriteLock::read_with). Renewed in the background
    /// (the name and this holder's timeout keys), like a lock's lease.
    ReadGuard, "read lock",
    /// The hash field this hold is stored under: `<client uuid>:<thread id>`
    /// (Redisson's field).
    fn field
);

lease_guard!(
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
    WriteGuard, "write lock",
    /// The hash field this hold is stored under: `<client uuid>:<thread
    /// id>:write` (Redisson's field).
    fn field
);

lease_guard!(
    /// A held permit of a [`Semaphore`](crate::Semaphore). Gives it back when
    /// dropped (also while unwinding from a panic).
    ///
    /// Made by [`Semaphore::acquire`](crate::Semaphore::acquire),
    /// [`try_acquire`](crate::Semaphore::try_acquire),
    /// [`try_acquire_for`](crate::Semaphore::try_acquire_for),
    /// [`try_acquire_until`](crate::Semaphore::try_acquire_until),
    /// [`acquire_with`](crate::Semaphore::acquire_with) and, for a permit handed
    /// over as a [`Ticket`], [`LockClient::adopt_permit`](crate::LockClient::adopt_permit).
    /// Its lease is renewed in the background like a lock's; [`is_held`](Self::is_held) and
    /// [`lost`](Self::lost) say when it ended.
    PermitGuard, "permit",
    /// The permit id: 32 hex digits, the client's tag (16 hex of its UUID) and
    /// 16 random ones; 40 for a client with
    /// [liveness](crate::LockClientBuilder::liveness), the mark `726c383a`
    /// (`rl8:`) first, so that a waiter may take back the permit once the
    /// client's session ended. Redisson's `release(permitId)` and
    /// [`Semaphore::release_by_id`](crate::Semaphore::release_by_id) take it.
    fn permit_id
);

lease_guard!(
    /// Several permits of a [`Semaphore`](crate::Semaphore), held together as
    /// one lease. Gives them all back when dropped (also while unwinding from a
    /// panic).
    ///
    /// Made by [`Semaphore::acquire_many`](crate::Semaphore::acquire_many),
    /// [`try_acquire_many`](crate::Semaphore::try_acquire_many),
    /// [`try_acquire_many_for`](crate::Semaphore::try_acquire_many_for),
    /// [`try_acquire_many_until`](crate::Semaphore::try_acquire_many_until),
    /// [`acquire_many_with`](crate::Semaphore::acquire_many_with) and
    /// [`LockClient::adopt_permits`](crate::LockClient::adopt_permits). Renewed in the
    /// background as one lease: every permit's lease moves at once, and the
    /// hold is lost as a whole when one of its permits is gone (released by id,
    /// or expired). [`unlock`](Self::unlock) gives back every permit still
    /// there and says [`Release::Released`] only when all were.
    PermitsGuard, "permits",
    /// The permit ids, 32 hex digits each (40 with liveness, as
    /// [`PermitGuard::permit_id`]),
    /// joined by commas: one id per permit, as Redisson's `acquire(permits)`
    /// returns them (its `release(List)` takes them split).
    fn permit_ids
);

impl PermitsGuard {
    /// How many permits the hold has.
    pub fn permits(&self) -> usize {
        self.value.split(',').count()
    }
}

/// A permit's [`Ticket`], made as a lock's: `ticket()` keeps the hold, and
/// `into_ticket()` lets go of it without giving the permits back.
macro_rules! permit_ticket {
    ($name:ident, $what:literal, $adopt:literal) => {
        impl $name {
            #[doc = concat!("The ", $what, "' [`Ticket`] (format")]
            /// [`LockFormat::Semaphore`](crate::LockFormat::Semaphore), printed
            /// `rl-ticket:v1:permit:-:<key>:<ids>`), for a process that is to
            /// give it back if this one dies
            /// ([`LockClient::release_ticket`](crate::LockClient::release_ticket))
            /// or take it over
            #[doc = concat!("([`LockClient::", $adopt, "`](crate::LockClient::", $adopt, ")).")]
            /// Sends nothing. `None` once released.
            pub fn ticket(&self) -> Option<Ticket> {
                self.guard.ticket()
            }

            #[doc = concat!("Lets go of the ", $what, " without giving it back, and returns its")]
            /// [`Ticket`]: the permit stays held until its lease runs out, unless
            /// a process adopts the ticket first
            #[doc = concat!("([`LockClient::", $adopt, "`](crate::LockClient::", $adopt, "))")]
            /// or releases it ([`LockClient::release_ticket`](crate::LockClient::release_ticket),
            /// which publishes the count as any release does). Nothing is sent;
            /// the renewal thread stops renewing it. Extend it first
            /// ([`extend`](Self::extend)) for a longer hand-over.
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) for a hold no longer
            /// held (the guard is dropped, which gives back what it still
            /// holds); [`Error::Shutdown`](crate::Error::Shutdown) when the
            /// client's shutdown released it first.
            ///
            /// # Examples
            /// ```no_run
            /// # fn main() -> redlease::Result<()> {
            /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
            /// let imports = client.semaphore("imports")?;
            /// imports.ensure_permits(3)?;
            /// let ticket = imports.acquire()?.into_ticket()?;
            /// // ... later, in another process:
            /// let permit = client.adopt_permit(&ticket)?;
            /// permit.unlock()?;
            /// # Ok(()) }
            /// ```
            pub fn into_ticket(self) -> Result<Ticket> {
                self.guard.into_ticket()
            }
        }
    };
}

permit_ticket!(PermitGuard, "permit", "adopt_permit");
permit_ticket!(PermitsGuard, "permits", "adopt_permits");
