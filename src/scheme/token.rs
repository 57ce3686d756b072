//! The token scheme: `SET key token NX PX ttl`; release and renewal compare the token.
//!
//! The same wire format as redis-py's `Lock`, redsync, node-redlock and redlock-rs,
//! so those clients and redlease exclude each other on the same key.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::{
    Acquire, Backend, Keys, Request, acquired, fixed_extend_cmd, script_cmd, send_acquire,
};
use crate::connection::Conn;
use crate::scripts::{TOKEN_ACQUIRE_FENCED, TOKEN_EXTEND, TOKEN_RELEASE, TOKEN_RELEASE_SHARDED};
use crate::time::ttl_millis;

/// The token scheme's commands.
#[derive(Debug)]
pub(crate) struct TokenBackend;

static SCRIPTS: [&LazyLock<Script>; 4] = [
    &TOKEN_ACQUIRE_FENCED,
    &TOKEN_RELEASE,
    &TOKEN_RELEASE_SHARDED,
    &TOKEN_EXTEND,
];

impl Backend for TokenBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        // Encoded into a buffer of its own length: one allocation, no formatter.
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let token = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
        Ok(token.to_owned())
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
            remaining,
            replicas,
            ..
        } = req;
        let ms = ttl_millis(ttl);
        if fence {
            let mut cmd = script_cmd(&TOKEN_ACQUIRE_FENCED, 2);
            cmd.arg(&keys.lock).arg(keys.fence()).arg(value).arg(ms);
            let (reply, acked) = send_acquire(conn, &SCRIPTS, cmd, replicas)?;
            return Ok(acquired(reply, true, acked)?.unwrap_or_else(busy));
        }
        // Without a fence no script is needed: a plain `SET NX PX`, the same one
        // command as the hand-written floor. Only a caller about to wait asks for the
        // holder's `PTTL`, in a second round trip on that slow path.
        // Sized up front: six arguments, so building it costs one allocation.
        let data = keys.lock.len() + value.len() + 32;
        let mut set = redis::Cmd::with_capacity(6, data);
        set.arg("SET")
            .arg(&keys.lock)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(ms);
        let (set, acked) = send_acquire(conn, &[], set, replicas)?;
        if !matches!(set, Value::Nil) {
            return Ok(Acquire::Acquired { fence: None, acked });
        }
        if !remaining {
            return Ok(Acquire::Busy { remaining: None });
        }
        let pttl: i64 = conn.run(|c| redis::cmd("PTTL").arg(&keys.lock).query(c))?;
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

    fn publishes(&self) -> bool {
        true
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }
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
