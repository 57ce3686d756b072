//! Redisson's named primitives, each a handle made by a
//! [`LockClient`](crate::LockClient) method, and its guard. This folder is their API;
//! the wire format of each is in `scheme/` under the same name.
//!
//! Layout: `fair.rs` [`FairLock`](crate::FairLock) (its guard is the plain
//! [`LockGuard`](crate::LockGuard)); `rwlock.rs`
//! [`ReadWriteLock`](crate::ReadWriteLock), with `rw_guard.rs` its
//! [`ReadGuard`](crate::ReadGuard) and [`WriteGuard`](crate::WriteGuard);
//! `semaphore.rs` [`Semaphore`](crate::Semaphore) and [`Permits`](crate::Permits), with
//! `permit.rs` its [`PermitGuard`](crate::PermitGuard).

pub(crate) mod fair;
pub(crate) mod permit;
pub(crate) mod rw_guard;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
