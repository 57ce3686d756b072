//! [`LockFormat`]: what a lock key holds, named once for
//! [`LockClient::inspect`](crate::LockClient::inspect) and for
//! [`Error::WrongFormat`](crate::Error::WrongFormat), which both say it.

use std::fmt;

/// How a lock key is stored, as far as its value tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockFormat {
    /// The key does not exist: the lock is free.
    Free,
    /// A string that is not a number: a token lock (redlease's `rl2:…`, or
    /// another client's token: redis-py, redsync, node-redlock).
    Token,
    /// A number of a timestamp's magnitude: a legacy timestamp lock (its expiry,
    /// in the unit [`LockInfo::timestamp_unit`](crate::LockInfo::timestamp_unit) guesses).
    LegacyTimestamp,
    /// A hash of `<uuid>:<thread>` fields with hold counts: Redisson's reentrant
    /// layout, one field per owner. A fair lock (`RFairLock`) is stored so too,
    /// with its waiters in [`LockInfo::queue`](crate::LockInfo::queue).
    Reentrant,
    /// A hash with a `mode`: Redisson's `RReadWriteLock` layout, one field per
    /// reader (`<uuid>:<thread>`) and writer (`<uuid>:<thread>:write`).
    ReadWrite,
    /// A count with an expiry set of permit ids: Redisson's
    /// `RPermitExpirableSemaphore` layout.
    Semaphore,
    /// Redisson's `RFairLock` layout: the reentrant hash, with a wait queue (a
    /// list) and the waiters' timeouts (a sorted set) beside it. What a
    /// [`FairLock`](crate::FairLock) expects in [`Error::WrongFormat`](crate::Error::WrongFormat);
    /// [`LockClient::inspect`](crate::LockClient::inspect) shows a held fair lock
    /// as [`Reentrant`](Self::Reentrant), its waiters in
    /// [`LockInfo::queue`](crate::LockInfo::queue).
    Fair,
    /// Any lock format, or none (the key is free): what
    /// [`LockClient::wait_free`](crate::LockClient::wait_free) expects in
    /// [`Error::WrongFormat`](crate::Error::WrongFormat).
    /// [`LockClient::inspect`](crate::LockClient::inspect) never shows it.
    Any,
    /// Any other type or value: no lock format
    /// ([`LockInfo::redis_type`](crate::LockInfo::redis_type) says which type,
    /// [`LockInfo::value`](crate::LockInfo::value) a string's value).
    Other,
}

impl fmt::Display for LockFormat {
    /// The format as a phrase: `a fair lock`, `a read-write lock`, `a semaphore`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.phrase())
    }
}

impl LockFormat {
    /// The format as a phrase, as [`Display`](fmt::Display) writes it.
    pub(crate) fn phrase(self) -> &'static str {
        match self {
            LockFormat::Free => "no key",
            LockFormat::Token => "a token lock",
            LockFormat::LegacyTimestamp => "a legacy timestamp lock",
            LockFormat::Reentrant => "a reentrant lock",
            LockFormat::ReadWrite => "a read-write lock",
            LockFormat::Semaphore => "a semaphore",
            LockFormat::Fair => "a fair lock",
            LockFormat::Any => "a lock",
            LockFormat::Other => "another format",
        }
    }
}
