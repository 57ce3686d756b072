//! Script calls and replies that several schemes share.

use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::{Acquire, Announce, Freed, Release};
use crate::net::connection::Conn;
use crate::net::resp::{self, Arg};
use crate::scheme::token::scripts::{TOKEN_KEEP, TOKEN_RELEASE, TOKEN_RELEASE_SHARDED};
use crate::time::ttl_millis;

/// Room for a script call's arguments and their bytes, so that adding them does
/// not grow the command on the hot path.
const CALL_ARGS: usize = 8;
const CALL_BYTES: usize = 256;

/// `EVALSHA <script's hash> <numkeys>`: a script call to complete with its keys and
/// arguments, for a pipeline (a renewal batch) or a guard's extend.
fn script_cmd(script: &Script, numkeys: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(CALL_ARGS, CALL_BYTES);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(numkeys);
    cmd
}

/// The token release, `TOKEN_RELEASE` on `key` for `value` (or one of `maybe`),
/// publishing as `announce` says; its reply. Sent as the floor's own
/// compare-and-delete when nobody waits: `EVALSHA <sha> 1 key value`.
pub(crate) fn release(
    conn: &mut Conn,
    key: &str,
    announce: Announce<'_>,
    (value, maybe): (&str, &[String]),
) -> RedisResult<i64> {
    if let Some(keep) = announce.keep {
        // A minimum hold not over yet: keep the key, do not free it; its waiters
        // are told to read its new `PTTL`.
        let publish = if conn.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let mut cmd = script_cmd(&TOKEN_KEEP, 1);
        cmd.arg(key)
            .arg(value)
            .arg(ttl_millis(keep))
            .arg(announce.channel)
            .arg(publish)
            .arg(if announce.always { "1" } else { "0" });
        return conn.run(|c| cmd.query(c));
    }
    let script = if conn.sharded() {
        &TOKEN_RELEASE_SHARDED
    } else {
        &TOKEN_RELEASE
    };
    let args = [
        Arg::from("EVALSHA"),
        script.get_hash().into(),
        1.into(),
        key.into(),
        value.into(),
        announce.channel.into(),
    ];
    // Without the channel the script publishes only for a marked value. Values
    // that may be ours follow the channel, so they force it (only the legacy
    // scheme has them, and it publishes always).
    let reply = match maybe {
        [] if announce.always => conn.request(&args)?,
        [] => conn.request(&args[..5])?,
        _ => {
            let mut cmd = resp::cmd(&args);
            cmd.arg(maybe);
            conn.run(|c| cmd.query(c))?
        }
    };
    Ok(redis::from_redis_value(reply)?)
}

/// The extend of a scheme whose value never changes: `script` with KEYS[1] the lock
/// key, ARGV[1] the value, ARGV[2] the TTL in ms; the value stays as it is.
pub(crate) fn fixed_extend_cmd(
    script: &Script,
    key: &str,
    value: &str,
    ttl: Duration,
) -> (redis::Cmd, String) {
    let mut cmd = script_cmd(script, 1);
    cmd.arg(key).arg(value).arg(ttl_millis(ttl));
    (cmd, value.to_owned())
}

/// Reads an acquire script's `{1, fence}` (acquired) or `{0, n}` reply: the
/// acquisition (with its fence when `fence` was asked for), or `n`, for the scheme
/// to read as busy.
pub(crate) fn acquired(
    reply: Value,
    fence: bool,
    acked: Option<u32>,
) -> RedisResult<Result<Acquire, i64>> {
    let (won, n): (i64, i64) = redis::from_redis_value(reply)?;
    if won != 1 {
        return Ok(Err(n));
    }
    let fence = fence.then(|| u64::try_from(n).unwrap_or(0));
    Ok(Ok(Acquire::Acquired { fence, acked }))
}

impl Freed {
    /// Reads a release script's reply: 1 + the clients its release message reached
    /// when released, 0 the key was gone, below 0 someone else's value.
    pub(crate) fn from_reply(n: i64) -> Self {
        match n {
            0 => Freed::from(Release::Expired),
            n if n < 0 => Freed::from(Release::Taken),
            n => Freed {
                outcome: Release::Released,
                listeners: u64::try_from(n - 1).unwrap_or(0),
            },
        }
    }
}

/// Sends an extend on `conn`: `cmd`, the [`Backend::extend_cmd`](super::Backend::extend_cmd) of `value` (or
/// one of `maybe`) built once by the caller (a legacy value depends on the time it
/// was built, and a retry must send the same), with its scripts; or, for a
/// scheme with [`conditional`](super::Backend::conditional) commands on a server that has
/// them, those (the token never changes: the value left is `value`). The reply
/// reads as [`Backend::extend_reply`](super::Backend::extend_reply) reads it.
pub(crate) fn extend_on(
    backend: &dyn super::Backend,
    conn: &mut Conn,
    (key, value, maybe): (&str, &str, &[String]),
    ttl: Duration,
    cmd: &redis::Cmd,
) -> RedisResult<Value> {
    if backend.conditional() && maybe.is_empty() && conn.conditional() {
        let n = super::token::cond::extend(conn, key, value, ttl_millis(ttl))?;
        return Ok(Value::Int(n));
    }
    with_scripts(conn, backend.scripts(), |c| c.run(|c| cmd.query(c)))
}

/// Runs `f`; if the server lost the scripts (restart, `SCRIPT FLUSH`), loads `scripts`
/// and runs `f` once more.
pub(crate) fn with_scripts<T>(
    conn: &mut Conn,
    scripts: &[&std::sync::LazyLock<redis::Script>],
    mut f: impl FnMut(&mut Conn) -> RedisResult<T>,
) -> RedisResult<T> {
    match f(conn) {
        Err(e) if is_noscript(&e) => {
            for s in scripts {
                conn.run(|c| s.load(c))?;
            }
            f(conn)
        }
        other => other,
    }
}

/// Whether a reply says the server does not know the script (after a restart or
/// `SCRIPT FLUSH`), so it must be loaded and the call repeated.
fn is_noscript(err: &redis::RedisError) -> bool {
    err.code() == Some("NOSCRIPT")
}
