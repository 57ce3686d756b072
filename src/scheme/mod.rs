//! How a lock is stored in Redis: one [`Backend`] per scheme.
//!
//! A backend turns acquire / release / extend into Redis commands and their
//! replies into outcomes. It keeps no state; the lease value it wrote travels with
//! the lease.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use crate::connection::Conn;
use crate::error::{Error, Result};

mod legacy;
mod token;

pub(crate) use legacy::LegacyBackend;
pub use legacy::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, TimestampUnit};
pub(crate) use token::TokenBackend;

/// How a lock is stored in Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `SET key token NX PX ttl`, released and renewed by compare-on-token scripts.
    /// The wire format of redis-py's `Lock`, redsync, node-redlock and redlock-rs.
    #[default]
    Token,
    /// The `SETNX`/`GETSET` timestamp lock of older clients (value: the expiry as a
    /// decimal unix timestamp), for running beside them while migrating to
    /// [`Scheme::Token`]. Opt-in only; see [`LegacyTimestamp`] for its limits.
    LegacyTimestamp(LegacyTimestamp),
}

/// What [`LockGuard::unlock`](crate::LockGuard::unlock) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Release {
    /// The lock was still ours and is now deleted.
    Released,
    /// The key was gone: the lease had expired (or was deleted) before the release.
    Expired,
    /// Someone else's value was under the key; it was left untouched.
    Taken,
}

impl Release {
    /// Whether the lock was still held when released: the critical section ran
    /// under the lock throughout, as far as Redis can tell.
    pub fn was_held(self) -> bool {
        self == Release::Released
    }
}

/// What a release found, and how many clients its release message reached (each
/// client with callers waiting for the key is subscribed to its channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freed {
    pub(crate) outcome: Release,
    pub(crate) listeners: u64,
}

impl From<Release> for Freed {
    fn from(outcome: Release) -> Self {
        Self {
            outcome,
            listeners: 0,
        }
    }
}

/// The result of one acquire attempt.
#[derive(Debug)]
pub(crate) enum Acquire {
    /// The lock is ours; `fence` is set when a fencing token was asked for.
    Acquired { fence: Option<u64> },
    /// Someone else holds it; it lasts at most `remaining` more (None: unknown,
    /// e.g. a key without TTL).
    Busy { remaining: Option<Duration> },
}

/// What one acquire attempt asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// The lease's TTL.
    pub(crate) ttl: Duration,
    /// Whether to take a fencing token.
    pub(crate) fence: bool,
    /// Whether a busy reply should say how long the holder has left (only callers
    /// about to wait need it).
    pub(crate) remaining: bool,
    /// When the caller's call must return by, if it has a bound: the caller's
    /// deadline or, if later, one read timeout after the call began. An attempt
    /// made near it waits for its reply until then (but at least [`REPLY_FLOOR`]).
    pub(crate) return_by: Option<Instant>,
}

/// The shortest wait for a reply an attempt gets near the end of its caller's wait,
/// so that a merely slow server does not turn a busy lock into a timeout.
pub(crate) const REPLY_FLOOR: Duration = Duration::from_millis(200);

/// The result of one extend or renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extend {
    Extended,
    Gone,
    Taken,
}

/// The Redis names that belong to one lock key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// The lock key, with the client's prefix.
    pub(crate) lock: String,
    /// The pub/sub channel a release publishes on.
    pub(crate) channel: String,
    /// How many bytes of `lock` are the client's key prefix.
    pub(crate) prefix: usize,
}

impl Keys {
    /// Derives the names for `key`, checking it.
    pub(crate) fn new(prefix: &str, key: &str) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::InvalidKey {
                reason: "the key is empty",
            });
        }
        let mut lock = String::with_capacity(prefix.len() + key.len());
        lock.push_str(prefix);
        lock.push_str(key);
        Ok(Self {
            channel: companion(&lock, "released"),
            lock,
            prefix: prefix.len(),
        })
    }

    /// The fencing counter: one per key prefix on a node, `<prefix>redlease:fence`,
    /// the one place that names it.
    ///
    /// Every fenced acquire and hand-off under the prefix `INCR`s it in the same
    /// script as the write it fences. Strictly increasing on the node, it is
    /// strictly increasing per key, and the number of counters does not grow with
    /// the number of lock names. It sits under the prefix so that an ACL user
    /// restricted to the prefix's keys (`~lock:*`) may touch it; lock names
    /// starting with `redlease:` are redlease's own under any prefix.
    ///
    /// Redis Cluster (not supported yet) needs a script's keys in one slot: there
    /// the counter becomes one per hash slot, `<prefix>redlease:fence:{t}`, with
    /// `t` a short tag computed to hash to the lock key's slot — at most 16384
    /// counters per prefix, still independent of the number of lock names.
    pub(crate) fn fence(&self) -> String {
        let prefix = &self.lock[..self.prefix];
        let mut name = String::with_capacity(prefix.len() + FENCE.len());
        name.push_str(prefix);
        name.push_str(FENCE);
        name
    }
}

/// The fence counter's name after the key prefix.
const FENCE: &str = "redlease:fence";

/// A name next to `key` that Redis Cluster hashes to the same slot: a key with a
/// hash tag keeps it (`a{x}b` → `a{x}b:fence`), any other key becomes the tag
/// (`a` → `{a}:fence`).
pub(crate) fn companion(key: &str, suffix: &str) -> String {
    let mut name = String::with_capacity(key.len() + suffix.len() + 3);
    // With a tag the suffix keeps the slot; a stray `}` cannot be wrapped safely,
    // so such keys get the suffix alone (same node without Cluster).
    let wrap = !(has_hash_tag(key) || key.contains('}'));
    if wrap {
        name.push('{');
    }
    name.push_str(key);
    if wrap {
        name.push('}');
    }
    name.push(':');
    name.push_str(suffix);
    name
}

/// Whether Redis Cluster would hash only part of `key`: a `{` followed later by a
/// `}` with at least one byte between them.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// One scheme's commands.
pub(crate) trait Backend: Send + Sync + fmt::Debug {
    /// The value this attempt will write (a token, a timestamp).
    fn new_value(&self, conn: &mut Conn, ttl: Duration) -> RedisResult<String>;
    /// One attempt to take the lock, writing `value`.
    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire>;
    /// Deletes the lock if `value` (or one of `maybe`, values an unanswered renewal
    /// may have written) is still what it holds, waking waiters. Both schemes use
    /// the same compare-and-delete: it compares strings, whatever they hold.
    fn release(
        &self,
        conn: &mut Conn,
        key: &str,
        channel: &str,
        value: &str,
        maybe: &[String],
    ) -> RedisResult<Freed> {
        let n: i64 = with_scripts(conn, self.scripts(), |c| {
            c.run(|c| {
                crate::scripts::TOKEN_RELEASE
                    .key(key)
                    .arg(value)
                    .arg(channel)
                    .arg(maybe)
                    .invoke(c)
            })
        })?;
        Ok(match n {
            0 => Freed::from(Release::Expired),
            n if n < 0 => Freed::from(Release::Taken),
            n => Freed {
                outcome: Release::Released,
                listeners: u64::try_from(n - 1).unwrap_or(0),
            },
        })
    }
    /// The command that extends the lock holding `value` (or one of `maybe`) to
    /// `ttl`, and the value it leaves under the key (schemes whose value encodes the
    /// expiry rewrite it).
    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String);
    /// Reads the reply to an [`extend_cmd`](Backend::extend_cmd): both schemes'
    /// scripts answer 1 extended, 0 gone, -1 someone else's.
    fn extend_reply(&self, reply: &Value) -> RedisResult<Extend> {
        tri_state(reply)
    }
    /// Whether its releases publish on the key's channel, so waiters can sleep until
    /// a release message instead of polling.
    fn publishes(&self) -> bool;
    /// The scripts its commands call by `EVALSHA`, to load after `NOSCRIPT`.
    fn scripts(&self) -> &'static [&'static std::sync::LazyLock<redis::Script>];
}

/// The backend for a scheme.
pub(crate) fn backend(scheme: &Scheme) -> Arc<dyn Backend> {
    match scheme {
        Scheme::Token => Arc::new(TokenBackend),
        Scheme::LegacyTimestamp(opts) => Arc::new(LegacyBackend::new(opts.clone())),
    }
}

/// Reads a script's `1 / 0 / -1` reply as an [`Extend`].
pub(crate) fn tri_state(reply: &Value) -> RedisResult<Extend> {
    match redis::from_redis_value_ref::<i64>(reply)? {
        1 => Ok(Extend::Extended),
        0 => Ok(Extend::Gone),
        _ => Ok(Extend::Taken),
    }
}

/// Runs `f`; if the server lost the scripts (restart, `SCRIPT FLUSH`), loads `scripts`
/// and runs `f` once more.
pub(crate) fn with_scripts<T>(
    conn: &mut Conn,
    scripts: &[&std::sync::LazyLock<redis::Script>],
    mut f: impl FnMut(&mut Conn) -> RedisResult<T>,
) -> RedisResult<T> {
    match f(conn) {
        Err(e) if crate::scripts::is_noscript(&e) => {
            for s in scripts {
                conn.run(|c| s.load(c))?;
            }
            f(conn)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_share_the_cluster_slot() {
        assert_eq!(companion("lock:a", "fence"), "{lock:a}:fence");
        assert_eq!(companion("lock:{a}", "fence"), "lock:{a}:fence");
        assert_eq!(companion("x{}y", "fence"), "x{}y:fence");
        assert_eq!(companion("a}b", "fence"), "a}b:fence");
    }

    #[test]
    fn empty_keys_are_rejected() {
        assert!(matches!(Keys::new("p:", ""), Err(Error::InvalidKey { .. })));
        let k = Keys::new("p:", "k").unwrap();
        assert_eq!(k.lock, "p:k");
        assert_eq!(k.channel, "{p:k}:released");
    }

    #[test]
    fn one_fence_counter_serves_every_key_under_a_prefix() {
        for key in ["a", "order:999", "user:{42}:invoice"] {
            assert_eq!(
                Keys::new("lock:", key).unwrap().fence(),
                "lock:redlease:fence"
            );
        }
        assert_eq!(Keys::new("", "a").unwrap().fence(), "redlease:fence");
        assert_eq!(
            Keys::new("app:", "a").unwrap().fence(),
            "app:redlease:fence"
        );
    }
}
