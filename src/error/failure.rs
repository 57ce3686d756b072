//! [`RedisFailure`]: what a failed call to Redis was doing, on which lock, and which
//! limit ran out; the payload of [`Error::Redis`](crate::Error::Redis).

use std::fmt;
use std::time::Duration;

/// What a call was doing when Redis failed it; part of a [`RedisFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// Taking a lock: `lock`, the `try_lock*` methods, `lock_with`, `with_lock`.
    Acquire,
    /// Releasing a lock: [`unlock`](crate::LockGuard::unlock) or dropping the guard.
    Release,
    /// Extending a lock: [`extend`](crate::LockGuard::extend).
    Extend,
    /// Reading a lock and its owners: [`inspect`](crate::LockClient::inspect).
    Inspect,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Acquire => "acquiring",
            Operation::Release => "releasing",
            Operation::Extend => "extending",
            Operation::Inspect => "inspecting",
        })
    }
}

/// The details of an [`Error::Redis`](crate::Error::Redis): the call and key it
/// happened on, the limit that ran out, and the underlying error as
/// [`source`](std::error::Error::source).
///
/// Displays as, for example, `acquiring lock "jobs:7": no reply from redis within 1s`,
/// `releasing lock "jobs:7": no connection available within 2s`, or, for an error
/// reply, its code and message: `acquiring lock "jobs:7": redis replied NOPERM: …`.
/// Neither
/// `Display` nor `Debug` ever shows a password.
#[derive(Debug)]
pub struct RedisFailure {
    operation: Option<Operation>,
    key: Option<String>,
    limit: Option<Duration>,
    cause: Cause,
}

#[derive(Debug)]
enum Cause {
    Redis(redis::RedisError),
    Pool(r2d2::Error),
    /// A connection made for the call, when the pool had none at hand, failed.
    Connect(redis::RedisError),
}

/// How long a node waits for a reply and for a pooled connection: the limits an
/// [`Error::Redis`](crate::Error::Redis) names when one runs out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) reply: Duration,
    pub(crate) checkout: Duration,
}

impl RedisFailure {
    pub(crate) fn redis(e: redis::RedisError) -> Self {
        Self::new(Cause::Redis(e))
    }

    pub(crate) fn pool(e: r2d2::Error) -> Self {
        Self::new(Cause::Pool(e))
    }

    pub(crate) fn connect(e: redis::RedisError) -> Self {
        Self::new(Cause::Connect(e))
    }

    fn new(cause: Cause) -> Self {
        Self {
            operation: None,
            key: None,
            limit: None,
            cause,
        }
    }

    /// Names the call, the key and the limit that ran out, unless named already (by
    /// an inner call).
    pub(crate) fn name(&mut self, op: Operation, key: &str, limits: Limits) {
        if self.operation.is_none() {
            self.operation = Some(op);
            self.key = Some(key.to_owned());
        }
        if self.limit.is_none() {
            self.limit = match &self.cause {
                Cause::Pool(_) => Some(limits.checkout),
                Cause::Connect(e) if e.is_timeout() => Some(limits.checkout),
                Cause::Redis(e) if e.is_timeout() => Some(limits.reply),
                Cause::Redis(_) | Cause::Connect(_) => None,
            };
        }
    }

    /// The call that failed; `None` outside a lock call (connecting in `build`).
    pub fn operation(&self) -> Option<Operation> {
        self.operation
    }

    /// The lock key, with the client's prefix; `None` outside a lock call.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The configured limit that ran out: the read timeout when no reply came, the
    /// checkout limit when no connection was free or could be made in time. `None`
    /// for other failures.
    pub fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// The error from `redis`, when the failure is not a pool checkout.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match &self.cause {
            Cause::Redis(e) | Cause::Connect(e) => Some(e),
            Cause::Pool(_) => None,
        }
    }

    /// Whether no answer came in time: no reply, or no pooled connection.
    pub fn is_timeout(&self) -> bool {
        match &self.cause {
            Cause::Redis(e) | Cause::Connect(e) => e.is_timeout(),
            Cause::Pool(_) => true,
        }
    }

    /// Whether the connection failed: refused, dropped, timed out, or none free.
    pub fn is_connection_error(&self) -> bool {
        match &self.cause {
            Cause::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
            }
            Cause::Pool(_) | Cause::Connect(_) => true,
        }
    }
}

impl fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(op), Some(key)) = (self.operation, &self.key) {
            write!(f, "{op} lock {key:?}: ")?;
        }
        match (&self.cause, self.limit) {
            (Cause::Pool(_), Some(limit)) => write!(f, "no connection available within {limit:?}"),
            (Cause::Pool(_), None) => f.write_str("no redis connection available"),
            (Cause::Connect(_), Some(limit)) => {
                write!(f, "no connection available within {limit:?}")
            }
            (Cause::Redis(e), limit) if e.is_timeout() => match limit {
                Some(limit) => write!(f, "no reply from redis within {limit:?}"),
                None => f.write_str("no reply from redis in time"),
            },
            // The server's own words: an operator tells `TRYAGAIN` from `NOPERM`
            // or a script's error by them.
            (Cause::Redis(e), _) if e.code().is_some() => reply(f, e),
            _ if self.is_connection_error() => f.write_str("redis connection failed"),
            _ => f.write_str("redis command failed"),
        }
    }
}

/// An error reply as `redis replied <code>: <message>`.
fn reply(f: &mut fmt::Formatter<'_>, e: &redis::RedisError) -> fmt::Result {
    let code = e.code().unwrap_or("ERR");
    match e.detail() {
        Some(detail) => write!(f, "redis replied {code}: {detail}"),
        None => write!(f, "redis replied {code}"),
    }
}

impl std::error::Error for RedisFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Redis(e) | Cause::Connect(e) => Some(e),
            Cause::Pool(e) => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const LIMITS: Limits = Limits {
        reply: Duration::from_secs(1),
        checkout: Duration::from_secs(2),
    };

    /// The error `redis` makes of the error reply `line` (`-CODE message`).
    fn replied(line: &str) -> redis::RedisError {
        let value = redis::parse_redis_value(format!("{line}\r\n").as_bytes()).unwrap();
        value.extract_error().unwrap_err()
    }

    #[test]
    fn an_error_reply_is_quoted_with_its_code_and_message() {
        let e = Error::from(replied(
            "-TRYAGAIN Multiple keys request during rehashing of slot",
        ))
        .during(Operation::Acquire, "k", LIMITS);
        assert_eq!(
            e.to_string(),
            r#"acquiring lock "k": redis replied TRYAGAIN: Multiple keys request during rehashing of slot"#
        );
        let e = Error::from(replied("-ASK 3999 127.0.0.1:6381"));
        assert_eq!(e.to_string(), "redis replied ASK: 3999 127.0.0.1:6381");
        let e = Error::from(replied("-ERR Error running script (call to f_1): boom")).during(
            Operation::Release,
            "k",
            LIMITS,
        );
        assert_eq!(
            e.to_string(),
            r#"releasing lock "k": redis replied ERR: Error running script (call to f_1): boom"#
        );
        // A refused script is a permission error, naming scripting.
        let e = Error::from(replied(
            "-NOPERM this user has no permissions to run the 'evalsha' command",
        ));
        assert_eq!(e.to_string(), "redis user may not run evalsha (scripting)");
        let e = Error::from(replied(
            "-NOPERM this user has no permissions to run the 'set' command",
        ));
        assert!(
            e.to_string().starts_with("redis replied NOPERM: this user"),
            "{e}"
        );
        // An error reply is not a connection failure, and names no limit.
        assert!(!e.is_connection_error() && !e.is_timeout());
        let Error::Redis(f) = e.during(Operation::Extend, "k", LIMITS) else {
            panic!("not a redis error");
        };
        assert_eq!(f.limit(), None);
    }
}
