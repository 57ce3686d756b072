//! The fair lock of a holder or queue head whose liveness session ended: a
//! caller that queued is told the holder's field (or, when the lock is free
//! and another's turn, the queue's head) when it names a client that declared
//! liveness, looks at its session record once per session period
//! ([`look_at`]), and once the record is gone [`BREAK`] deletes the lock,
//! waking the queue's head as the holder's release would, or [`DROP_HEAD`]
//! drops the dead head and wakes the next. A dead waiter further back goes
//! with the queue's deadlines (a redlease entry 4 s after its last attempt),
//! or as the head.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use redis::RedisResult;

use super::scripts::{BREAK, DROP_HEAD};
use super::{FAIR_SCRIPTS, alive_key, fair_keys};
use crate::net::connection::Conn;
use crate::owner::ClientTag;
use crate::scheme::redisson::{now_millis, publish_cmd};
use crate::scheme::token::live::look_at;
use crate::scheme::{Acquire, Keys};

/// After a busy attempt that queued and named `field`, the holder's (or, with
/// `pttl` -2, the queue head's): how long to wait as the look at its session
/// says (zero: broken, dropped or changed; try again), counting a break in
/// `broken`. `None` when there was no look (the field names no client that
/// declared liveness, or the record cannot share the lock's node).
pub(super) fn look(
    conn: &mut Conn,
    keys: &Keys,
    pttl: i64,
    field: &str,
    broken: &AtomicU64,
) -> RedisResult<Option<Duration>> {
    let Some(tag) = ClientTag::of_field(field) else {
        return Ok(None);
    };
    let [queue, timeouts, base] = fair_keys(&keys.lock);
    let alive = alive_key(&timeouts);
    let publish = publish_cmd(conn);
    let script = if pttl == -2 { &DROP_HEAD } else { &BREAK };
    let looked = look_at(
        conn,
        keys,
        tag,
        false,
        Some(broken),
        &FAIR_SCRIPTS,
        |c, session| {
            script
                .key(&keys.lock)
                .key(&queue)
                .key(&timeouts)
                .key(&alive)
                .key(session)
                .arg(field)
                .arg(&base)
                .arg(publish)
                .arg(now_millis())
                .invoke(c)
        },
    )?;
    Ok(match looked {
        Some(Acquire::Busy { remaining, .. }) => Some(remaining.unwrap_or(super::POLL)),
        _ => None,
    })
}
