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
    /// The client was closed while the call was waiting or starting.
    #[error("lock client is shut down")]
    Shutdown,
    /// A background thread could not be started.
    #[error("could not spawn a background thread")]
    Spawn(#[source] io::Error),
    /// Redlock: fewer nodes than a majority granted the request (an acquire, an
    /// extend, a release, the `PING`s of `build()`), and the others failed, so the
    /// outcome is unknown. What each failed node said is in `failures`.
    #[error("quorum not reached: {acquired} of {required} nodes")]
    NoQuorum {
        /// Nodes that granted the request in time.
        acquired: usize,
        /// Nodes needed: a majority of all nodes.
        required: usize,
        /// Each node that failed, with its error.
        failures: Box<[NodeFailure]>,
    },
}

/// One node's failure in a Redlock call, carried by [`Error::NoQuorum`].
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node's address, without credentials (`redis://host:port/db`).
    pub node: String,
    /// What went wrong there: a Redis or pool error, or a timeout
    /// ([`Error::is_timeout`]) when the node did not answer within the node timeout
    /// or granted a lock only after the lease's validity had ended.
    pub error: Error,
}

impl NodeFailure {
    pub(crate) fn new(node: String, error: Error) -> Self {
        Self { node, error }
    }
}

/// The result type of redlease.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether a network call ran out of time (Redis slow, paused or unreachable),
    /// including a pool that could not hand out a connection in time, and a
    /// [`NoQuorum`](Error::NoQuorum) whose every failure is a timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Redis(e) => e.is_timeout(),
            Error::Pool(_) => true,
            Error::NoQuorum { failures, .. } => all(failures, Error::is_timeout),
            _ => false,
        }
    }

    /// Whether the connection to Redis failed: refused, dropped or timed out (for a
    /// [`NoQuorum`](Error::NoQuorum): on every failed node). Such calls may succeed
    /// when retried.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
            }
            Error::Pool(_) => true,
            Error::NoQuorum { failures, .. } => all(failures, Error::is_connection_error),
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

/// Whether `failures` is not empty and `test` holds for each one's error.
fn all(failures: &[NodeFailure], test: fn(&Error) -> bool) -> bool {
    !failures.is_empty() && failures.iter().all(|f| test(&f.error))
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

    #[test]
    fn no_quorum_names_the_counts_and_classifies_by_its_failures() {
        let timeout = || Error::Redis(io::Error::new(io::ErrorKind::TimedOut, "slow").into());
        let refused = || Error::Redis(io::Error::new(io::ErrorKind::ConnectionRefused, "x").into());
        let e = Error::NoQuorum {
            acquired: 1,
            required: 3,
            failures: vec![
                NodeFailure::new("redis://a:1/0".into(), timeout()),
                NodeFailure::new("redis://b:2/0".into(), refused()),
            ]
            .into(),
        };
        assert_eq!(e.to_string(), "quorum not reached: 1 of 3 nodes");
        assert!(e.is_connection_error());
        assert!(!e.is_timeout(), "one failure was a refusal");
        let e = Error::NoQuorum {
            acquired: 0,
            required: 2,
            failures: vec![NodeFailure::new("redis://a:1/0".into(), timeout())].into(),
        };
        assert!(e.is_timeout());
    }
}
