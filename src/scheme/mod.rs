//! How a lock is stored in Redis: one [`Backend`] per scheme.
//!
//! A backend turns acquire / release / extend into Redis commands and their
//! replies into outcomes. It keeps no state; the lease value it wrote travels with
//! the lease.
//!
//! Layout: this file is the seam ([`Backend`], [`Scheme`], the outcomes of acquire,
//! release and extend). A folder per format, each with its own Lua scripts: `token/`
//! (the default; `scripts.rs` its scripts, the hand-off's included), `legacy/`
//! (deployed timestamp locks; `options.rs`, `scripts.rs`), `reentrant/` (Redisson's
//! `RLock`; `fences.rs`), `rwlock/` (`RReadWriteLock`; `scripts.rs`), `fair/`
//! (`RFairLock`; `scripts.rs`), `semaphore/` (`RPermitExpirableSemaphore`; `admin.rs`,
//! `names.rs`), `election.rs` (leader election: a fenced token lock whose acquire
//! records the term and announces the winner), `partition/` (partition groups: the
//! group's keys and each member's round; `scripts.rs`), `latch.rs` (the fan-in latch:
//! Redisson's `RCountDownLatch` count and the participants beside it). Shared by the formats: `keys.rs` a lock's Redis names, `request.rs`
//! what an acquire asks for, `call.rs` script calls and replies, `bulk.rs` the renewal
//! of many leases in one call, `replicas.rs` `WAIT` behind an acquire, `redisson.rs` Redisson's naming
//! rules, owner ids, clock and publish verb. This folder is
//! the wire side of the read-write lock, the fair lock and the semaphore; their
//! handles, under the same names, are in `primitives/`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Value};

use crate::net::connection::Conn;
use crate::owner::ClientId;

mod bulk;
mod call;
mod election;
mod fair;
mod keys;
pub(crate) mod latch;
mod legacy;
pub(crate) mod partition;
/// Redisson's naming, owner ids (one per thread in all its formats), clock and
/// publish verb, for the reentrant, fair, read-write and semaphore formats.
mod redisson;
pub(crate) mod reentrant;
mod replicas;
mod request;
mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod token;

pub(crate) use bulk::{bulk_extend_cmd, bulk_replies};
pub(crate) use call::{acquired, extend_on, fixed_extend_cmd, with_scripts};
pub(crate) use election::{
    ELECTION_SCRIPTS, ElectionBackend, LEADER, elected_channel, term_key, term_of,
};
pub(crate) use fair::{FAIR_SCRIPTS, FairBackend, fair_keys, leave_cmd};
pub(crate) use keys::{Keys, companion};
pub(crate) use legacy::LegacyBackend;
pub use legacy::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, TimestampUnit};
pub(crate) use reentrant::ReentrantBackend;
pub(crate) use replicas::{Replicas, Unreplicated, acquire_confirmed, send_acquire};
pub(crate) use request::{Announce, REPLY_FLOOR, Request, Waiting};
pub(crate) use rwlock::{
    RW_INSPECT, RW_SCRIPTS, RwBackend, UPGRADE, channel as rw_channel, write_wait,
};
pub(crate) use semaphore::{
    Admin, Found, MAX_MANY, ManyBackend, SemaphoreBackend, State, channel as semaphore_channel,
    id_bytes, id_hex, timeouts,
};
pub(crate) use token::{TokenBackend, new_token};

/// How a lock is stored in Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `SET key token NX PX ttl`, released and renewed by compare-on-token scripts,
    /// or, on a server with conditional commands (Valkey 9), by `DELIFEQ` and
    /// `SET … IFEQ` (see [`LockClientBuilder::conditional_commands`](crate::LockClientBuilder::conditional_commands)).
    /// The wire format of redis-py's `Lock`, redsync, node-redlock and redlock-rs.
    #[default]
    Token,
    /// The `SETNX`/`GETSET` timestamp lock of older clients (value: the expiry as a
    /// decimal unix timestamp), for running beside them while migrating to
    /// [`Scheme::Token`]. Opt-in only; see [`LegacyTimestamp`] for its limits.
    LegacyTimestamp(LegacyTimestamp),
    /// Redisson's reentrant `RLock`, field for field (the wire format is in the
    /// crate docs): Redisson clients and redlease exclude and wake each other.
    ///
    /// The owner is the client (a UUID v4 drawn when it is built) and the calling
    /// thread (a number kept for the thread's life), fixed when a guard is made: a
    /// guard moved to another thread still unlocks its own hold. The owner locking
    /// again gets another guard for one round trip (`HINCRBY`, as in Redisson: the
    /// count in Redis stays the true one, each guard is an ordinary lease, and a
    /// nested lock on a lease lost meanwhile waits); another thread waits. Only the
    /// outermost unlock frees the key, and only the outermost acquisition takes a
    /// fence: nested guards asking for one carry the outermost's (none if it took
    /// none). With several holds no acquire or renewal shortens the key's TTL. Such
    /// locks are never handed straight to a waiting caller, Redlock refuses them,
    /// and an acquire whose reply is lost is left to its TTL (the owner may lock
    /// again before a cleanup could run).
    Reentrant,
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
    /// The lock is ours; `fence` is set when a fencing token was asked for, `acked`
    /// (replicas that acknowledged the write) when replicas were asked for.
    Acquired {
        fence: Option<u64>,
        acked: Option<u32>,
    },
    /// Someone else holds it; it lasts at most `remaining` more (None: unknown,
    /// e.g. a key without TTL). `announces`: the holder publishes its release
    /// message whoever waits (an election's leader, whose acquire stored its
    /// token marked), so a waiter that hears the key's channel need not poll:
    /// the message or the end of `remaining` is its next look.
    Busy {
        remaining: Option<Duration>,
        announces: bool,
    },
}

/// The result of one extend or renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extend {
    Extended,
    Gone,
    Taken,
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
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
    ) -> RedisResult<Freed> {
        let announce = Announce {
            always: announce.always || !self.marked(),
            ..announce
        };
        if self.conditional() && maybe.is_empty() && announce.keep.is_none() && conn.conditional() {
            match token::cond::release(conn, key, announce, value) {
                // An ACL without `DELIFEQ` (nothing was deleted): the script.
                Err(e) if e.code() == Some("NOPERM") => conn.refuse_conditional(),
                other => return Ok(Freed::from_reply(other?)),
            }
        }
        let n = with_scripts(conn, self.scripts(), |c| {
            call::release(c, key, announce, (value, maybe))
        })?;
        Ok(Freed::from_reply(n))
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
    /// Whether, on a server with conditional commands (`DELIFEQ`, `SET … IFEQ`:
    /// see `Conn::conditional`), its release and extend run them instead of
    /// scripts: a scheme whose value is one bare token (the token scheme).
    fn conditional(&self) -> bool {
        false
    }
    /// Reads the reply to an [`extend_cmd`](Backend::extend_cmd): both schemes'
    /// scripts answer 1 extended, 0 gone, -1 someone else's.
    fn extend_reply(&self, reply: &Value) -> RedisResult<Extend> {
        tri_state(reply)
    }
    /// The script that renews many of its leases in one call (`bulk`), for a
    /// scheme whose value never changes; each lease's reply reads as an
    /// [`extend_cmd`](Backend::extend_cmd)'s. `None`: one command per lease.
    fn bulk_extend(&self) -> Option<&'static std::sync::LazyLock<redis::Script>> {
        None
    }
    /// Whether its releases publish on the key's channel, so waiters can sleep until
    /// a release message instead of polling.
    fn publishes(&self) -> bool;
    /// Whether its waiters mark the holder's value, and a release publishes only
    /// for a marked one (or when told to by [`Announce::always`]).
    fn marked(&self) -> bool {
        false
    }
    /// The channel its releases publish on for the lock key `lock`.
    fn channel(&self, lock: &str) -> String {
        companion(lock, "released")
    }
    /// Whether a releasing guard may pass its lock to a waiting caller of its
    /// client: the lease as it is, or its value replaced by `TOKEN_HANDOFF`. Only
    /// the token scheme's value is a bare token that any holder may carry.
    fn hands_over(&self) -> bool {
        false
    }
    /// Whether the value names the owner (client and thread) instead of one
    /// acquisition. An owner may then lock again while it holds the lock, so its
    /// attempt must not queue behind waiters of its own client; and a value an
    /// unanswered acquire may have written cannot be taken out later, since the
    /// owner may have locked again meanwhile.
    fn reentrant(&self) -> bool {
        false
    }
    /// Whether holders share it (a read lock): a waiter that got it passes the
    /// release message it woke on to the next waiter, so a release wakes them all.
    fn shares(&self) -> bool {
        false
    }
    /// A lease of `value` on `key` was adopted from a ticket of `fence` (the reentrant
    /// scheme remembers it as an outermost hold's, for the owner's nested holds).
    fn adopted(&self, _key: &str, _value: &str, _fence: Option<u64>) {}
    /// A lock of a dead liveness session was broken for one of its callers by
    /// a step outside its scripts (a Redis Cluster's, see
    /// `topology/cluster/live.rs`): counted where the scheme counts its own.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    fn broke(&self) {}
    /// The scripts its commands call by `EVALSHA`, to load after `NOSCRIPT`.
    fn scripts(&self) -> &'static [&'static std::sync::LazyLock<redis::Script>];
    /// Why a lease of this format cannot keep its key for a minimum hold after
    /// its release ([`LockOptions::min_hold`](crate::LockOptions::min_hold)), said
    /// for [`Error::Unsupported`](crate::Error::Unsupported); `None` when it can
    /// (the token scheme: one key, one value, compared on release).
    fn refuses_min_hold(&self) -> Option<&'static str>;
    /// What it holds, in metrics' `scheme` label: `token`, `legacy`,
    /// `reentrant`, `fair`, `rwlock_read`, `rwlock_write`, `semaphore` or
    /// `election`.
    fn label(&self) -> &'static str;
}

impl Scheme {
    /// The scheme's name in metrics' labels.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Scheme::Token => "token",
            Scheme::LegacyTimestamp(_) => "legacy",
            Scheme::Reentrant => "reentrant",
        }
    }
}

/// The backend for a scheme, for the client `id`: its values name the client
/// (a token carries its tag, an owner field its UUID).
pub(crate) fn backend(scheme: &Scheme, id: &ClientId) -> Arc<dyn Backend> {
    match scheme {
        Scheme::Token => Arc::new(TokenBackend::new(id.tag()).counting(id.broken())),
        Scheme::LegacyTimestamp(opts) => Arc::new(LegacyBackend::new(opts.clone())),
        Scheme::Reentrant => Arc::new(ReentrantBackend::new(id)),
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
