//! How the releases guards queued go on the wire: one pipelined write for a
//! batch ([`send`]), the release script's call each, or on a server with
//! conditional commands (Valkey 9) a `DELIFEQ` each; and what each answer says.

use redis::{RedisResult, Value};

use super::background::{Cleanup, Free};
use crate::metrics::{Counters, bump};
use crate::net::connection::Conn;
use crate::net::node::Node;
use crate::scheme::token::cond;
use crate::scheme::token::scripts::{TOKEN_RELEASE, TOKEN_RELEASE_SHARDED};
use crate::scheme::{Announce, Freed, Release, with_scripts};

/// Sends `batch` in one pipelined write on a pooled connection of `node`, and
/// records each answer. Returns the releases that got none (the node failed or
/// did not answer in time), for the caller to retry as cleanups.
pub(super) fn send(node: &Node, counters: &Counters, batch: Vec<Free>) -> Vec<Cleanup> {
    let mut failed = Vec::new();
    let batch: Vec<Free> = batch
        .into_iter()
        .filter_map(Free::take)
        .map(|(free, others)| {
            failed.extend(others);
            free
        })
        .collect();
    if batch.is_empty() {
        return failed;
    }
    let answers = node
        .with_retry(|conn| {
            with_scripts(conn, &[&TOKEN_RELEASE, &TOKEN_RELEASE_SHARDED], |c| {
                pipelined(c, &batch)
            })
        })
        .inspect_err(|e| log::debug!("background releases failed: {e}"))
        .ok();
    for (i, free) in batch.into_iter().enumerate() {
        let answer = answers.as_ref().and_then(|a| a.get(i)).and_then(read);
        if let Some(outcome) = answer {
            if outcome == Release::Released {
                bump(&counters.released, 1);
            } else {
                log::debug!("background release of `{}`: {outcome:?}", free.name);
            }
            free.queued.done(&free.name, &free.parked, Some(outcome));
        } else {
            bump(&counters.release_errors, 1);
            free.queued.done(&free.name, &free.parked, None);
            failed.push(free.cleanup);
        }
    }
    failed
}

/// The token release of each of `batch`, as a guard's release sends it
/// (`EVALSHA <sha> 1 key value [channel]`), in one pipeline; errors kept as
/// replies. A `NOSCRIPT` fails the whole call, so the scripts are loaded and it
/// is sent again (see [`with_scripts`]): the releases it ran found their key
/// gone the second time, which only their count in a report shows.
fn pipelined(conn: &mut Conn, batch: &[Free]) -> RedisResult<Vec<Value>> {
    if conn.conditional() {
        return conditional(conn, batch);
    }
    let script = if conn.sharded() {
        &TOKEN_RELEASE_SHARDED
    } else {
        &TOKEN_RELEASE
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for free in batch {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg(&free.cleanup.keys.lock)
            .arg(&free.cleanup.value);
        if free.always {
            cmd.arg(&free.cleanup.keys.channel);
        }
    }
    // Replies read one at a time, stopping at the first that fails (as a renewal
    // batch reads them); any error left means the reply stream is unknown.
    let replies = conn.pipeline(&pipe, batch.len());
    conn.broken |= replies.is_err();
    let replies = replies?;
    if let Some(Value::ServerError(e)) = replies
        .iter()
        .find(|r| matches!(r, Value::ServerError(e) if e.code() == "NOSCRIPT"))
    {
        return Err(e.clone().into());
    }
    for r in &replies {
        conn.note_reply(r);
    }
    Ok(replies)
}

/// The releases of `batch` on a server with conditional commands (Valkey 9): one
/// `DELIFEQ key token` each (and the release message beside it where `always`
/// asks), in one pipeline; a release that deleted nothing (a value a waiter
/// marked, a key gone or someone else's) is then told apart as a guard's release
/// tells it (`token::cond::release`). Answers as the release script would; an
/// error reply is kept, and an ACL that refuses `DELIFEQ` turns the node's
/// connections to scripts (the failed ones retry as cleanups).
fn conditional(conn: &mut Conn, batch: &[Free]) -> RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    // A release this client's callers wait for goes alone (`cond::release`,
    // its message after its deletes); it is rare: such a drop is not queued.
    let mut at = Vec::with_capacity(batch.len());
    let mut sent = 0;
    for free in batch {
        at.push((!free.always).then_some(sent));
        if !free.always {
            let keys = &free.cleanup.keys;
            pipe.cmd("DELIFEQ").arg(&keys.lock).arg(&free.cleanup.value);
            sent += 1;
        }
    }
    let replies = if sent == 0 {
        Vec::new()
    } else {
        let replies = conn.pipeline(&pipe, sent);
        conn.broken |= replies.is_err();
        replies?
    };
    for r in &replies {
        conn.note_reply(r);
    }
    let mut answers = Vec::with_capacity(batch.len());
    for (free, at) in batch.iter().zip(at) {
        let announce = Announce {
            channel: &free.cleanup.keys.channel,
            always: free.always,
            keep: None,
        };
        let (key, value) = (&free.cleanup.keys.lock, &free.cleanup.value);
        let answer = match at.map(|i| &replies[i]) {
            Some(Value::Int(1)) => Value::Int(1),
            // Not deleted (a waiter's mark, gone, taken), or sent alone.
            Some(Value::Int(_)) | None => match cond::release(conn, key, announce, value) {
                Ok(n) => Value::Int(n),
                // An error reply (a slot moving: `ASK`, `MOVED`) fails this
                // release alone: it is retried as a cleanup on this node until
                // its value would expire by itself.
                Err(e) if e.code().is_some() && !conn.broken => Value::Nil,
                Err(e) => return Err(e),
            },
            Some(Value::ServerError(e)) if e.code() == "NOPERM" => {
                conn.refuse_conditional();
                Value::ServerError(e.clone())
            }
            Some(other) => other.clone(),
        };
        answers.push(answer);
    }
    Ok(answers)
}

/// A release script's reply, if it is one.
fn read(reply: &Value) -> Option<Release> {
    let n: i64 = redis::from_redis_value_ref(reply).ok()?;
    Some(Freed::from_reply(n).outcome)
}
