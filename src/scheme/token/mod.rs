//! The token scheme: `SET key token NX PX ttl`; release and renewal compare the token.
//!
//! The same wire format as redis-py's `Lock`, redsync, node-redlock and redlock-rs,
//! so those clients and redlease exclude each other on the same key.
//!
//! A redlease token is `rl1:`, the client's tag (16 hex digits, see
//! [`ClientTag`]) and 16 random hex digits: 32 hex digits, as long as the UUID
//! tokens before tags were, so an acquire sends the same bytes. A caller that waits
//! marks a redlease holder's token (`<token>+`: the fenced acquire's script when it
//! finds the lock busy, else the mark script after its `SET … NX GET` named the
//! holder), and only a marked lock's release publishes its release message: a
//! release nobody waits for costs what a bare compare-and-delete costs. The two
//! commands of an uncontended lock and unlock are packed by hand (`resp`): `SET NX
//! PX` and `EVALSHA <release> 1 key token`, the floor's own. A caller that may wait
//! adds `GET` once its client has a channel subscribed (see `Waiting::FirstAlone`).
//!
//! Layout: this file is the backend and its tokens; `scripts.rs` the token's Lua
//! scripts (mark, fenced acquire, release, extend) and the hand-off's.

pub(crate) mod scripts;

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::bulk::TOKEN_BULK_EXTEND;
use super::{
    Acquire, Backend, Keys, Replicas, Request, Waiting, acquired, fixed_extend_cmd, send_acquire,
    with_scripts,
};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::{ClientTag, TOKEN_LEN, TOKEN_PREFIX};
use crate::time::ttl_millis;
use scripts::{
    TOKEN_ACQUIRE_FENCED, TOKEN_EXTEND, TOKEN_MARK, TOKEN_RELEASE, TOKEN_RELEASE_SHARDED,
};

/// The token scheme's commands, for one client: its tokens carry the client's tag.
#[derive(Debug)]
pub(crate) struct TokenBackend {
    tag: ClientTag,
}

impl TokenBackend {
    /// The token scheme of the client tagged `tag`.
    pub(crate) fn new(tag: ClientTag) -> Self {
        Self { tag }
    }
}

static SCRIPTS: [&LazyLock<Script>; 6] = [
    &TOKEN_ACQUIRE_FENCED,
    &TOKEN_MARK,
    &TOKEN_RELEASE,
    &TOKEN_RELEASE_SHARDED,
    &TOKEN_EXTEND,
    &TOKEN_BULK_EXTEND,
];

impl Backend for TokenBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(new_token(self.tag))
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let Request {
            ttl,
            fence,
            wait,
            replicas,
            ..
        } = req;
        let ms = ttl_millis(ttl);
        if fence {
            let fence = keys.fence();
            let args = [
                Arg::from("EVALSHA"),
                TOKEN_ACQUIRE_FENCED.get_hash().into(),
                2.into(),
                keys.lock.as_str().into(),
                fence.as_str().into(),
                value.into(),
                ms.into(),
                (if wait == Waiting::No { "0" } else { "1" }).into(),
            ];
            let (reply, acked) = send_acquire(conn, &SCRIPTS, &args, replicas)?;
            return Ok(acquired(reply, true, acked)?.unwrap_or_else(busy));
        }
        // Without a fence no script is needed: a plain `SET NX PX`, the same one
        // command as the hand-written floor; for a caller that waits, with `GET`,
        // so that a busy reply says whether the holder is a token to mark. A lone
        // caller's first attempt leaves it out: its try after subscribing names the
        // holder (unless the server cannot: then this attempt marks, as `First`).
        let nx_get = NX_GET.load(Ordering::Relaxed);
        let alone = wait == Waiting::FirstAlone && nx_get;
        let get = wait != Waiting::No && !alone && nx_get;
        let markable = match set_nx(conn, &keys.lock, value, ms, (get, replicas))? {
            Set::Won(acked) => return Ok(Acquire::Acquired { fence: None, acked }),
            Set::Busy(_) if wait == Waiting::No => return Ok(Acquire::Busy { remaining: None }),
            Set::Busy(markable) => markable,
        };
        // A caller that waits marks a redlease holder's token, once per holder (a
        // marked one shows its mark), learning its `PTTL` in the same round trip;
        // when the holder is unknown (a server without `SET NX GET`, a key of
        // another type) the script looks. Otherwise it asks the `PTTL` only when
        // the holder's TTL is not known yet. Either is a second round trip on this
        // slow path only.
        let mark = markable.unwrap_or(wait.first() && !alone);
        let pttl: i64 = if mark {
            with_scripts(conn, &SCRIPTS, |c| {
                c.run(|c| TOKEN_MARK.key(&keys.lock).invoke(c))
            })?
        } else if wait.first() {
            conn.run(|c| redis::cmd("PTTL").arg(&keys.lock).query(c))?
        } else {
            return Ok(Acquire::Busy { remaining: None });
        };
        Ok(busy(pttl))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        // The token never changes, so there is never another value to accept.
        fixed_extend_cmd(&TOKEN_EXTEND, key, value, ttl)
    }

    fn bulk_extend(&self) -> Option<&'static LazyLock<Script>> {
        Some(&TOKEN_BULK_EXTEND)
    }

    fn publishes(&self) -> bool {
        true
    }

    fn marked(&self) -> bool {
        true
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }
    fn label(&self) -> &'static str {
        "token"
    }
}

/// A new redlease token of the client tagged `tag`: [`TOKEN_PREFIX`], the tag and
/// 64 random bits in 16 hex digits.
pub(crate) fn new_token(tag: ClientTag) -> String {
    // Encoded into a buffer of its own length: one allocation, no formatter.
    let mut token = String::with_capacity(TOKEN_LEN);
    let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
    token.push_str(TOKEN_PREFIX);
    token.push_str(tag.as_str());
    // A UUID v4's two halves XORed: 64 random bits (the version nibble of one
    // half and the variant bits of the other sit over random bits of the other).
    let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
    let hex = uuid::Uuid::from_u64_pair(high ^ low, 0);
    token.push_str(&hex.simple().encode_lower(&mut buf)[..16]);
    token
}

/// Whether servers take `SET … NX GET` (Redis 7.0 and later). Cleared for good by
/// the first server that calls it a syntax error (6.2 and older), which is then
/// asked without `GET`.
static NX_GET: AtomicBool = AtomicBool::new(true);

/// What a `SET NX PX` found.
enum Set {
    /// The lock is ours (replicas that acknowledged, when asked).
    Won(Option<u32>),
    /// Someone holds it: whether its value is a redlease token no waiter has
    /// marked yet, when the server said.
    Busy(Option<bool>),
}

/// `SET key value NX PX ms`, with `GET` when `get` asks (the server can): one
/// command, which takes the lock or names its holder. A key of another type is
/// busy, holder unknown (`GET` makes it an error).
fn set_nx(
    conn: &mut Conn,
    key: &str,
    value: &str,
    ms: u64,
    (get, replicas): (bool, Option<Replicas>),
) -> RedisResult<Set> {
    let args = [
        Arg::from("SET"),
        key.into(),
        value.into(),
        "NX".into(),
        "PX".into(),
        ms.into(),
        "GET".into(),
    ];
    let args = if get { &args[..] } else { &args[..6] };
    let (reply, acked) = match send_acquire(conn, &[], args, replicas) {
        Err(e) if get && e.code() == Some("WRONGTYPE") => return Ok(Set::Busy(None)),
        Err(e) if get && e.code() == Some("ERR") && e.to_string().contains("syntax") => {
            log::debug!("the server has no `SET NX GET` ({e}); asking without `GET`");
            NX_GET.store(false, Ordering::Relaxed);
            return set_nx(conn, key, value, ms, (false, replicas));
        }
        other => other?,
    };
    Ok(match reply {
        Value::Nil if get => Set::Won(acked),
        Value::Nil => Set::Busy(None),
        Value::BulkString(holder) => Set::Busy(Some(is_unmarked_token(&holder))),
        _ => Set::Won(acked),
    })
}

/// Whether `value` is a redlease token no waiter has marked yet.
fn is_unmarked_token(value: &[u8]) -> bool {
    value.len() == TOKEN_LEN && value.starts_with(TOKEN_PREFIX.as_bytes())
}

/// A busy reply: `pttl` ≥ 0 bounds the wait, -2 (gone since) means retry now,
/// -1 (a key without TTL, not written by this scheme) gives no bound.
pub(super) fn busy(pttl: i64) -> Acquire {
    let remaining = match pttl {
        -2 => Some(Duration::ZERO),
        n => u64::try_from(n).ok().map(Duration::from_millis),
    };
    Acquire::Busy { remaining }
}
