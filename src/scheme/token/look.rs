//! A look at a token lock that takes nothing: what a caller polling a Redlock
//! quorum sends each node before it tries, so that a poll that finds no majority
//! free writes nothing it must take back.
//!
//! One `GET` per node, as one server's poll is one `SET … NX GET`; a holder whose
//! token no waiter has marked yet is marked as that poll marks it (the mark
//! script, once per holder), so that its release wakes the waiter.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::scripts::TOKEN_MARK;
use super::{SCRIPTS, is_unmarked_token, remaining};
use crate::net::connection::Conn;
use crate::scheme::with_scripts;

/// What a look at one node found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// No key: the lock is free on this node.
    Free,
    /// Held; by a holder that lasts at most this more, when the look learned it
    /// (it marked the holder), `None` otherwise.
    Held(Option<Duration>),
}

/// Looks at `key` on one node: `GET`, and the mark script when the value is a
/// redlease token no waiter has marked. A key of another type is held by someone
/// else (`GET` calls it `WRONGTYPE`).
pub(crate) fn look(conn: &mut Conn, key: &str) -> RedisResult<Look> {
    let holder = match conn.run(|c| redis::cmd("GET").arg(key).query::<Value>(c)) {
        Err(e) if e.code() == Some("WRONGTYPE") => return Ok(Look::Held(None)),
        other => other?,
    };
    match holder {
        Value::Nil => Ok(Look::Free),
        Value::BulkString(v) if is_unmarked_token(&v) => {
            let pttl: i64 =
                with_scripts(conn, &SCRIPTS, |c| c.run(|c| TOKEN_MARK.key(key).invoke(c)))?;
            // Gone since the `GET`: free.
            Ok(if pttl == -2 {
                Look::Free
            } else {
                Look::Held(remaining(pttl))
            })
        }
        _ => Ok(Look::Held(None)),
    }
}
