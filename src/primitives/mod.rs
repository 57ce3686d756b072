//! Redisson's named primitives, each a handle made by a
//! [`LockClient`](crate::LockClient) method, and their guards. This folder is their
//! API; the wire format of each is in `scheme/` under the same name.
//!
//! Every primitive offers the lock's whole family (`x`, `try_x`, `try_x_for`,
//! `try_x_until`, `x_with` and a closure form), built on one piece of plumbing,
//! and every guard the same surface.
//!
//! Layout: `handle.rs` the plumbing every handle shares (constructor checks, the
//! deadline, the acquire, the format probe after an error); `held.rs` the one guard
//! definition, [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard) and
//! [`PermitGuard`](crate::PermitGuard); `fair.rs` [`FairLock`](crate::FairLock) (its
//! guard is the plain [`LockGuard`](crate::LockGuard)); `rwlock.rs`
//! [`ReadWriteLock`](crate::ReadWriteLock); `semaphore.rs`
//! [`Semaphore`](crate::Semaphore) and [`Permits`](crate::Permits); `election/`
//! [`Election`](crate::Election), its guard [`Leadership`](crate::Leadership),
//! [`Leader`](crate::Leader) and [`Observer`](crate::Observer); `partition/`
//! [`PartitionGroup`](crate::PartitionGroup) and its [`Member`](crate::Member).

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod handle;
pub(crate) mod held;
pub(crate) mod partition;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
