//! The token lock on a server with conditional commands (Valkey 9.0 and later,
//! see [`Conn::conditional`]): release, renewal and a waiter's mark with no
//! script.
//!
//! - Release: `DELIFEQ key token` (1 released, 0 not). When it did not delete,
//!   the value may carry a waiter's mark: `DELIFEQ key token+`, the release
//!   message and `PTTL key` (-2: gone) go in one pipeline (a message sent when
//!   nothing was deleted only makes a waiter look once more). A caller whose
//!   client has waiters sends both `DELIFEQ`s, then the message, in one
//!   pipeline: the message never precedes the delete.
//! - Renewal: `SET key token IFEQ token PX ttl` (`OK`, or nil when the value
//!   differs or the key is gone); after a nil, `SET key token+ IFEQ token+ PX
//!   ttl` and `PTTL key` tell a marked token (renewed), someone else's value
//!   and a gone key apart.
//! - Mark: `SET key holder+ IFEQ holder KEEPTTL` and `PTTL key`, for a holder
//!   that `SET … NX GET` named.
//!
//! In each pipeline the first reply decides and the others count only where it
//! changed nothing: on a cluster node migrating the slot, a command after a
//! delete finds no key and is answered `ASK` (the scripts did it in one step).
//!
//! Each answers as the script it stands for (`scripts.rs`): a release 1 + the
//! clients its message reached, 0 gone, -1 someone else's; an extend 1, 0, -1.
//! The values on the wire are the scripts' own, so clients on either path share
//! a name. A key of another type is someone else's lock (`WRONGTYPE`).

use redis::{RedisResult, Value};

use crate::net::connection::Conn;
use crate::net::resp::{self, Arg};
use crate::scheme::Announce;

/// The release: the release script's answer (see the module docs).
pub(crate) fn release(
    conn: &mut Conn,
    key: &str,
    announce: Announce<'_>,
    value: &str,
) -> RedisResult<i64> {
    let publish = publish_verb(conn);
    let delete = [Arg::from("DELIFEQ"), key.into(), value.into()];
    let message = [
        Arg::from(publish),
        announce.channel.into(),
        "released".into(),
    ];
    let marked = format!("{value}+");
    let delete_marked = [Arg::from("DELIFEQ"), key.into(), marked.as_str().into()];
    let pttl = [Arg::from("PTTL"), key.into()];
    if announce.always {
        // Callers of this client wait: both values are tried and the message
        // goes after them, in one pipeline, so no waiter hears it before the
        // key is gone (it would find the lock busy and wait a polling step).
        // The first reply decides; the next ones count only when it deleted
        // nothing. (Once it deleted the key, a cluster node migrating the slot
        // answers the commands after it with `ASK`: the key is no longer there.)
        let replies = send(conn, &[&delete, &delete_marked, &message, &pttl])?;
        return match &replies[0] {
            Value::Int(1) => Ok(1 + heard(&replies[2])),
            Value::Int(_) => settle_release(&replies[1], &replies[2], &replies[3]),
            // `WRONGTYPE` (`send` returns any other error).
            _ => Ok(-1),
        };
    }
    match conn.request(&delete) {
        Ok(Value::Int(1)) => return Ok(1),
        Ok(_) => {}
        Err(e) if e.code() == Some("WRONGTYPE") => return Ok(-1),
        Err(e) => return Err(e),
    }
    // Not deleted: marked by a waiter, gone, or someone else's. The message
    // follows the delete in the pipeline (sent for nothing when the key was
    // gone or taken: a waiter then only looks once more). Its `PTTL` counts
    // only when that delete deleted nothing (see above: `ASK` after a delete).
    let replies = send(conn, &[&delete_marked, &message, &pttl])?;
    settle_release(&replies[0], &replies[1], &replies[2])
}

/// The release's answer from the replies of `DELIFEQ key token+`, the release
/// message and `PTTL key`, sent once the unmarked token was not there: released
/// (1 + the clients the message reached), gone (0: `PTTL` -2) or someone
/// else's (-1).
fn settle_release(delete: &Value, message: &Value, pttl: &Value) -> RedisResult<i64> {
    match delete {
        Value::Int(1) => Ok(1 + heard(message)),
        Value::Int(_) if matches!(pttl, Value::Int(-2)) => Ok(0),
        Value::Int(_) => Ok(-1),
        other => other_type(other).map(|()| -1),
    }
}

/// The renewal's first command: `SET key value IFEQ value PX ms` (`OK`, or nil:
/// then [`settle_extend`] tells what is there).
pub(crate) fn extend_cmd(key: &str, value: &str, ms: u64) -> redis::Cmd {
    resp::cmd(&[
        Arg::from("SET"),
        key.into(),
        value.into(),
        "IFEQ".into(),
        value.into(),
        "PX".into(),
        ms.into(),
    ])
}

/// Reads [`extend_cmd`]'s reply: `Some` of the extend script's answer, `None`
/// when [`settle_extend`] must tell (a nil).
pub(crate) fn extend_reply(reply: &Value) -> Option<i64> {
    match reply {
        Value::Nil => None,
        Value::ServerError(e) if e.code() == "WRONGTYPE" => Some(-1),
        _ => Some(1),
    }
}

/// After [`extend_cmd`] found the value differing or gone: renews a marked token
/// (`value+`), else tells someone else's value (-1) from a gone key (0).
pub(crate) fn settle_extend(conn: &mut Conn, key: &str, value: &str, ms: u64) -> RedisResult<i64> {
    let marked = format!("{value}+");
    let set = [
        Arg::from("SET"),
        key.into(),
        marked.as_str().into(),
        "IFEQ".into(),
        marked.as_str().into(),
        "PX".into(),
        ms.into(),
    ];
    let pttl = [Arg::from("PTTL"), key.into()];
    let replies = send(conn, &[&set, &pttl])?;
    Ok(match (&replies[0], &replies[1]) {
        (Value::Nil, Value::Int(-2)) => 0,
        (Value::Nil | Value::ServerError(_), _) => -1,
        _ => 1,
    })
}

/// The extend of one lease: [`extend_cmd`], then [`settle_extend`] after a nil.
pub(crate) fn extend(conn: &mut Conn, key: &str, value: &str, ms: u64) -> RedisResult<i64> {
    let reply = conn.run(|c| extend_cmd(key, value, ms).query::<Value>(c));
    let reply = match reply {
        Err(e) if e.code() == Some("WRONGTYPE") => return Ok(-1),
        other => other?,
    };
    match extend_reply(&reply) {
        Some(n) => Ok(n),
        None => settle_extend(conn, key, value, ms),
    }
}

/// A waiter's mark on `holder`, the unmarked token `SET … NX GET` found: `SET key
/// holder+ IFEQ holder KEEPTTL` (nothing changes if the holder changed meanwhile),
/// with the key's `PTTL`, which it returns.
pub(crate) fn mark(conn: &mut Conn, key: &str, holder: &[u8]) -> RedisResult<i64> {
    let mut marked = holder.to_vec();
    marked.push(b'+');
    let set = [
        Arg::from("SET"),
        key.into(),
        Arg::Bytes(&marked),
        "IFEQ".into(),
        Arg::Bytes(holder),
        "KEEPTTL".into(),
    ];
    let pttl = [Arg::from("PTTL"), key.into()];
    let replies = send(conn, &[&set, &pttl])?;
    match &replies[1] {
        Value::Int(n) => Ok(*n),
        Value::ServerError(e) => Err(e.clone().into()),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "PTTL",
            format!("{other:?}"),
        ))),
    }
}

/// `PUBLISH`, or `SPUBLISH` on a Redis Cluster node that has sharded pub/sub.
fn publish_verb(conn: &Conn) -> &'static str {
    if conn.sharded() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

/// The clients a release message reached; 0 when the `PUBLISH` was refused (a
/// user without channel permissions: the lock is released all the same, and its
/// waiters poll).
fn heard(reply: &Value) -> i64 {
    match reply {
        Value::Int(n) => *n,
        _ => 0,
    }
}

/// A `DELIFEQ` reply that is no count: a key of another type is someone else's
/// lock (`Ok`), any other error is the call's.
fn other_type(reply: &Value) -> RedisResult<()> {
    match reply {
        Value::Int(_) => Ok(()),
        Value::ServerError(e) if e.code() == "WRONGTYPE" => Ok(()),
        Value::ServerError(e) => Err(e.clone().into()),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "DELIFEQ",
            format!("{other:?}"),
        ))),
    }
}

/// Sends `commands` as one pipeline and reads their replies: errors kept as
/// replies, but for the first command's, which decides the call: an error there
/// (a redirection, `READONLY` after a failover, an ACL refusal) is the call's, as
/// from a single command, but for `WRONGTYPE` (a key of another type: someone
/// else's lock). On a cluster node importing the key's slot, each command is
/// preceded by `ASKING`.
fn send(conn: &mut Conn, commands: &[&[Arg<'_>]]) -> RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let asking = conn.asking;
    for (i, args) in commands.iter().enumerate() {
        // `Conn::run` sends the first `ASKING` itself.
        if asking && i > 0 {
            pipe.cmd("ASKING");
        }
        pipe.add_command(resp::cmd(args));
    }
    let sent = if asking {
        2 * commands.len() - 1
    } else {
        commands.len()
    };
    let replies = conn.pipeline(&pipe, sent)?;
    let replies: Vec<Value> = if asking {
        replies.into_iter().step_by(2).collect()
    } else {
        replies
    };
    for reply in &replies {
        conn.note_reply(reply);
    }
    if let Some(Value::ServerError(e)) = replies.first()
        && e.code() != "WRONGTYPE"
    {
        if e.code() == "READONLY" {
            // A demoted master: a new connection finds the new one.
            conn.broken = true;
        }
        return Err(e.clone().into());
    }
    Ok(replies)
}
