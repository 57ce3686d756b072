//! Redisson's named primitives, each a handle made by a
//! [`LockClient`](crate::LockClient) method, and their guards. This folder is their
//! API; the wire format of each is in `scheme/` under the same name.
//!
//! Every primitive offers the lock's whole family (`x`, `try_x`, `try_x_for`,
//! `try_x_until`, `x_with` and a closure form), built on one piece of plumbing,
//! and every guard the same surface.
//!
//! Layout: `handle.rs` the plumbing every handle shares (constructor checks, the
//! deadline, the acquire, the format probe after an error); `family.rs` the one
//! definition of the acquire family, `acquire_family!`; `held.rs` the one guard
//! definition, [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard) and
//! [`PermitGuard`](crate::PermitGuard) and [`PermitsGuard`](crate::PermitsGuard); `fair.rs` [`FairLock`](crate::FairLock) (its
//! guard is the plain [`LockGuard`](crate::LockGuard)); `rwlock.rs`
//! [`ReadWriteLock`](crate::ReadWriteLock); `semaphore/`
//! [`Semaphore`](crate::Semaphore) and [`Permits`](crate::Permits) (`many.rs`: several
//! permits at once); `election/`
//! [`Election`](crate::Election), its guard [`Leadership`](crate::Leadership),
//! [`Leader`](crate::Leader) and [`Observer`](crate::Observer); `partition/`
//! [`PartitionGroup`](crate::PartitionGroup) and its [`Member`](crate::Member);
//! `latch/` the fan-in [`Latch`](crate::Latch) and its
//! [`Participant`](crate::Participant).

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod family;
pub(crate) mod handle;
pub(crate) mod held;
pub(crate) mod latch;
pub(crate) mod partition;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

#[cfg(test)]
mod tests {
    #[test]
    fn handles_and_guards_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<crate::FairLock>();
        send_sync::<crate::ReadWriteLock>();
        send_sync::<crate::Semaphore>();
        send_sync::<crate::Election>();
        send::<crate::ReadGuard>();
        send::<crate::WriteGuard>();
        send::<crate::PermitGuard>();
        send::<crate::PermitsGuard>();
        send::<crate::Leadership>();
        send::<crate::Observer>();
    }
}
