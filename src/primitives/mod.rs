//! Redisson's named primitives.

pub(crate) mod fair;
pub(crate) mod permit;
pub(crate) mod rw_guard;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
