//! The crate's error type: [`Error`], one variant per concept, and what a failed call
//! to Redis carries. Busy is never an error.
//!
//! Layout: this file is [`Error`], [`Result`] and [`NodeFailure`] (what one node of a
//! Redlock quorum said); `failure.rs` is [`RedisFailure`]: the [`Operation`], the key
//! and the limit that ran out.

use std::io;

pub(crate) mod failure;

use crate::format::LockFormat;
use failure::Limits;
pub use failure::{Operation, RedisFailure};

/// Errors returned by redlease.
///
/// Busy is never an error: a lock someone else holds is `Ok(None)` from the
/// `try_*` methods. An `Err` means redlease could not find out, or was asked
/// something it cannot do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Talking to Redis failed: no reply within the read timeout, no pooled
    /// connection in time, a refused or broken connection, or an error reply.
    /// [`RedisFailure`] says which call on which key and which limit ran out; the
    /// error from `redis` or `r2d2` is its [`source`](std::error::Error::source).
    #[error(transparent)]
    Redis(Box<RedisFailure>),
    /// The Redis user lacks an ACL permission redlease needs, found by
    /// [`build`](crate::LockClientBuilder::build) before any lock is taken.
    #[error(
        "redis user may not run {command}{}",
        if *on_keys { " on keys under the key prefix" } else { "" }
    )]
    Permission {
        /// The command refused, as Redis names it (`evalsha`, `script|load`), or,
        /// for one a script runs, which script and its commands (`a command of the
        /// release script (get, del)`).
        command: String,
        /// Whether the keys were refused (an ACL key pattern that does not cover
        /// the client's key prefix) rather than the command.
        on_keys: bool,
        /// Redis's reply.
        #[source]
        source: Box<redis::RedisError>,
    },
    /// A builder or option value is out of range.
    #[error("invalid option `{option}`: {reason}")]
    Config {
        /// The option's name, as its setter is called.
        option: &'static str,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// An argument is not usable: an empty lock name, a permit id that is not 32
    /// hex digits.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was passed: `lock key`, `permit id`.
        what: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The lease is no longer held: it expired, was taken over, or deleted.
    #[error("lock on `{key}` is no longer held")]
    LockLost {
        /// The lock key, with the client's prefix.
        key: Box<str>,
    },
    /// A wait was cancelled through its [`CancelToken`](crate::CancelToken).
    #[error("wait for lock on `{key}` was cancelled")]
    Cancelled {
        /// The lock key, with the client's prefix.
        key: Box<str>,
    },
    /// The lock was taken, but fewer replicas than asked for acknowledged it within
    /// the timeout (`WAIT`), so it was given back. Confirmation lowers, and does not
    /// remove, the risk of losing a lock on failover.
    #[error("lock on `{key}` acknowledged by {acked} of {required} replicas; given back")]
    NotReplicated {
        /// The lock key, with the client's prefix.
        key: Box<str>,
        /// Replicas that acknowledged the lock in time.
        acked: u32,
        /// Replicas asked for.
        required: u32,
    },
    /// A semaphore has another total than the one asked for; it was left as it is.
    #[error("semaphore `{key}` has {existing} permits, not {requested}")]
    PermitsMismatch {
        /// The semaphore's key, with the client's prefix.
        key: Box<str>,
        /// Its permits in all, free and held.
        existing: i64,
        /// The permits asked for.
        requested: u32,
    },
    /// A participant of a latch joined and is gone without counting down: its
    /// lease (renewed by its client while it lives) ran out or was given back
    /// unused, so the count will not reach zero. Returned by
    /// [`Latch::wait`](crate::Latch::wait) and its variants as soon as a wait
    /// sees it, at most the participant liveness after the participant's last
    /// sign of life.
    #[error("a participant of latch `{key}` is gone without counting down")]
    ParticipantDied {
        /// The latch's key, with the client's prefix.
        key: Box<str>,
        /// Who the participant was: its client's session record while it is
        /// there ([`Owner::Alive`](crate::Owner::Alive): host, pid, program),
        /// else the client tag its lease named ([`Owner::Gone`](crate::Owner::Gone)).
        who: Box<crate::owner::Owner>,
    },
    /// The key (or a key beside it, such as a fair lock's queue) holds another
    /// format than the primitive asked for: a token lock's string where a
    /// semaphore was asked for, a reentrant lock's hash without `mode` where a
    /// read-write lock was, a list, ... Nothing was written.
    #[error("`{key}` holds {found}, not {expected}")]
    WrongFormat {
        /// The key, with the client's prefix.
        key: Box<str>,
        /// What was asked for: [`LockFormat::Fair`], [`LockFormat::ReadWrite`],
        /// [`LockFormat::Semaphore`], or [`LockFormat::Any`] (by
        /// [`wait_free`](crate::LockClient::wait_free)).
        expected: LockFormat,
        /// What it holds, as far as its type tells: `a list`, `a string (a token
        /// lock or a semaphore?)`, `a hash without `mode` (a reentrant lock?)`, ...
        found: &'static str,
    },
    /// A thread holding a read lock asked for the write lock of the same name:
    /// refused at once, as it would wait for its own read.
    #[error("`{key}` is read-locked by this thread; a reader cannot upgrade to write")]
    ReadHeld {
        /// The lock key, with the client's prefix.
        key: Box<str>,
    },
    /// The deployment cannot hold what was asked for: a fair lock, read-write lock
    /// or semaphore (one server's formats) on a Redlock quorum. Made where the
    /// topology refuses; no option changes it.
    #[error("{by} cannot hold {what}")]
    Unsupported {
        /// What was asked for: `a fair lock`, `a read-write lock`, `a semaphore`.
        what: &'static str,
        /// The deployment that refused, and why: `redlock (a quorum of independent
        /// masters has no one server to hold one server's format)`.
        by: &'static str,
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
    /// A server is configured so that locks can be lost or wrongly granted (a
    /// critical [`Finding`](crate::Finding)), and the builder was told to refuse
    /// such a server
    /// ([`ServerCheck::Refuse`](crate::ServerCheck::Refuse)).
    #[error("redis server {} is unsafe for locks: {check}", finding.server())]
    UnsafeServer {
        /// The check's stable name (`eviction`, `replica`, ...).
        check: &'static str,
        /// What was found, why it matters and what to change.
        finding: Box<crate::finding::Finding>,
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

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        // A script refused by the ACL: what needs it says so (on a server with
        // conditional commands an unfenced token lock runs none, and a user
        // without scripting gets this only from the features that need one).
        if e.code() == Some("NOPERM")
            && let Some(command) = ["evalsha", "eval", "script|load"]
                .into_iter()
                .find(|c| e.detail().is_some_and(|d| d.contains(&format!("'{c}'"))))
        {
            return Error::Permission {
                command: format!("{command} (scripting)"),
                on_keys: false,
                source: Box::new(e),
            };
        }
        Error::Redis(Box::new(RedisFailure::redis(e)))
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Redis(Box::new(RedisFailure::pool(e)))
    }
}

impl Error {
    /// A connection made for one call, when the pool had none at hand, failed.
    pub(crate) fn connect(e: redis::RedisError) -> Self {
        Error::Redis(Box::new(RedisFailure::connect(e)))
    }

    /// Whether a network call ran out of time (Redis slow, paused or unreachable),
    /// including a pool that could not hand out a connection in time, and a
    /// [`NoQuorum`](Error::NoQuorum) whose every failure is a timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Redis(f) => f.is_timeout(),
            Error::NoQuorum { failures, .. } => all(failures, Error::is_timeout),
            _ => false,
        }
    }

    /// Whether the connection to Redis failed: refused, dropped or timed out (for a
    /// [`NoQuorum`](Error::NoQuorum): on every failed node). Such calls may succeed
    /// when retried.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Redis(f) => f.is_connection_error(),
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

    /// The one error for a key that holds another format than `expected`.
    pub(crate) fn wrong_format(key: &str, expected: LockFormat, found: &'static str) -> Self {
        Error::WrongFormat {
            key: key.into(),
            expected,
            found,
        }
    }

    /// Names the call, the key and the limit that ran out in a Redis failure that
    /// does not name them yet; other errors pass unchanged.
    pub(crate) fn during(self, op: Operation, key: &str, limits: Limits) -> Self {
        match self {
            Error::Redis(mut f) => {
                f.name(op, key, limits);
                Error::Redis(f)
            }
            other => other,
        }
    }
}

/// Whether `failures` is not empty and `test` holds for each one's error.
fn all(failures: &[NodeFailure], test: fn(&Error) -> bool) -> bool {
    !failures.is_empty() && failures.iter().all(|f| test(&f.error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::time::Duration;

    const LIMITS: Limits = Limits {
        reply: Duration::from_secs(1),
        checkout: Duration::from_secs(2),
    };

    fn timeout() -> redis::RedisError {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "Resource temporarily unavailable",
        )
        .into()
    }

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
        let e = Error::wrong_format("p:q", LockFormat::Fair, "a list");
        assert_eq!(e.to_string(), "`p:q` holds a list, not a fair lock");
        let e = Error::Invalid {
            what: "permit id",
            reason: "a permit id is 32 hex digits",
        };
        assert_eq!(
            e.to_string(),
            "invalid permit id: a permit id is 32 hex digits"
        );
    }

    #[test]
    fn no_quorum_names_the_counts_and_classifies_by_its_failures() {
        let slow = || Error::from(timeout());
        let refused = || {
            Error::from(redis::RedisError::from(io::Error::from(
                io::ErrorKind::ConnectionRefused,
            )))
        };
        let e = Error::NoQuorum {
            acquired: 1,
            required: 3,
            failures: vec![
                NodeFailure::new("redis://a:1/0".into(), slow()),
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
            failures: vec![NodeFailure::new("redis://a:1/0".into(), slow())].into(),
        };
        assert!(e.is_timeout());
    }

    #[test]
    fn a_timeout_names_the_call_the_key_and_the_limit() {
        let e = Error::from(timeout()).during(Operation::Acquire, "jobs:7", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"acquiring lock "jobs:7": no reply from redis within 1s"#
        );
        assert!(e.is_timeout() && e.is_connection_error());
        let source = e.source().expect("the redis error");
        assert!(source.downcast_ref::<redis::RedisError>().is_some());
        let Error::Redis(f) = &e else { panic!("{e:?}") };
        assert_eq!(f.operation(), Some(Operation::Acquire));
        assert_eq!(f.key(), Some("jobs:7"));
        assert_eq!(f.limit(), Some(Duration::from_secs(1)));
        // A second context (an outer call) keeps the first.
        let e = e.during(Operation::Release, "other", LIMITS);
        assert!(
            e.to_string().starts_with(r#"acquiring lock "jobs:7""#),
            "{e}"
        );
    }

    #[test]
    fn a_pool_checkout_says_no_connection_within_its_limit() {
        let pool = r2d2::Pool::builder()
            .connection_timeout(Duration::from_millis(1))
            .build_unchecked(redis::Client::open("redis://127.0.0.1:1/").unwrap());
        let Err(checkout) = pool.get() else {
            panic!("nothing listens on port 1");
        };
        let e = Error::from(checkout).during(Operation::Release, "k", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"releasing lock "k": no connection available within 2s"#
        );
        assert!(e.is_timeout());
        assert!(e.source().unwrap().downcast_ref::<r2d2::Error>().is_some());
    }

    #[test]
    fn a_connection_made_for_the_call_that_times_out_says_no_connection_within_its_limit() {
        let e = Error::connect(timeout()).during(Operation::Release, "k", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"releasing lock "k": no connection available within 2s"#
        );
        assert!(e.is_timeout() && e.is_connection_error());
        assert!(
            e.source()
                .unwrap()
                .downcast_ref::<redis::RedisError>()
                .is_some()
        );
        let refused: redis::RedisError =
            io::Error::new(io::ErrorKind::ConnectionRefused, "refused").into();
        let e = Error::connect(refused).during(Operation::Acquire, "k", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"acquiring lock "k": redis connection failed"#
        );
        assert!(!e.is_timeout() && e.is_connection_error());
    }

    #[test]
    fn other_failures_say_what_failed_without_a_limit() {
        let refused: redis::RedisError =
            io::Error::new(io::ErrorKind::ConnectionRefused, "refused").into();
        let e = Error::from(refused).during(Operation::Extend, "k", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"extending lock "k": redis connection failed"#
        );
        assert!(!e.is_timeout() && e.is_connection_error());
        let Error::Redis(f) = &e else { panic!("{e:?}") };
        assert_eq!(f.limit(), None);
        let reply = redis::RedisError::from((redis::ErrorKind::Client, "bad reply"));
        assert_eq!(Error::from(reply).to_string(), "redis command failed");
    }
}
