//! The crate's error type.

use std::io;

/// Errors returned by redlease.
///
/// Busy is never an error: a lock someone else holds is `Ok(None)` from the
/// `try_*` methods. An `Err` means redlease could not find out, or was asked
/// something it cannot do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Redis command failed, timed out, or the connection broke.
    #[error("redis command failed")]
    Redis(#[from] redis::RedisError),
    /// No pooled connection could be had within the connect timeout.
    #[error("no redis connection available")]
    Pool(#[from] r2d2::Error),
    /// A builder or option value is out of range.
    #[error("invalid option `{option}`: {reason}")]
    Config {
        /// The option's name, as its setter is called.
        option: &'static str,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// The lock key is not usable.
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// What is wrong with the key.
        reason: &'static str,
    },
    /// The lease is no longer held: it expired, was taken over, or deleted.
    #[error("lock on `{key}` is no longer held")]
    LockLost {
        /// The lock key, with the client's prefix.
        key: String,
    },
    /// A wait was cancelled through its [`CancelToken`](crate::CancelToken).
    #[error("wait for lock on `{key}` was cancelled")]
    Cancelled {
        /// The lock key, with the client's prefix.
        key: String,
    },
    /// The lock was taken, but fewer replicas than asked for acknowledged it within
    /// the timeout (`WAIT`), so it was given back. Confirmation lowers, and does not
    /// remove, the risk of losing a lock on failover.
    #[error("lock acknowledged by {acked} of {required} replicas; given back")]
    NotReplicated {
        /// Replicas that acknowledged the lock in time.
        acked: u32,
        /// Replicas asked for.
        required: u32,
    },
    /// The client was closed while the call was waiting or starting.
    #[error("lock client is shut down")]
    Shutdown,
    /// A background thread could not be started.
    #[error("could not spawn a background thread")]
    Spawn(#[source] io::Error),
}

/// The result type of redlease.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether a network call ran out of time (Redis slow, paused or unreachable),
    /// including a pool that could not hand out a connection in time.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Redis(e) => e.is_timeout(),
            Error::Pool(_) => true,
            _ => false,
        }
    }

    /// Whether the connection to Redis failed: refused, dropped or timed out.
    /// Such calls may succeed when retried.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
            }
            Error::Pool(_) => true,
            _ => false,
        }
    }

    /// Whether the lease was lost (see [`Error::LockLost`]).
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    pub(crate) fn config(option: &'static str, reason: &'static str) -> Self {
        Error::Config { option, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_small() {
        assert!(
            std::mem::size_of::<Error>() <= 40,
            "{}",
            std::mem::size_of::<Error>()
        );
    }

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }

    #[test]
    fn display_is_lowercase_without_source_text() {
        let e = Error::config("ttl", "must be at least 1 ms");
        assert_eq!(e.to_string(), "invalid option `ttl`: must be at least 1 ms");
        let e = Error::LockLost { key: "a".into() };
        assert_eq!(e.to_string(), "lock on `a` is no longer held");
        assert!(e.is_lock_lost());
        assert!(!e.is_timeout());
    }
}
