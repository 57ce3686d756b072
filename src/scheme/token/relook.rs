//! Looks at a token holder's liveness session outside a waiter's own busy
//! attempt (`live.rs` is that one): the look that falls due when a live
//! holder's session would end, sent in place of the waiter's next attempt
//! ([`again`]); the one-off break of a caller that does not wait (a partition
//! group's member, [`break_cmd`]); and the holders a Redis Cluster looks at in
//! two steps, their record being in another slot ([`take_cross`]).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::RedisResult;

use super::live::{ALIVE_KEPT, alive_until, known_alive, look};
use super::scripts::TOKEN_BREAK;
use crate::net::connection::Conn;
use crate::owner::{ClientTag, KEPT_MARK};
use crate::scheme::{Acquire, Keys};

/// The holders a look found alive, by lock key: the holder's token and when the
/// caller that waits for the key is to look again (see [`again`]).
static LOOK_AGAIN: LazyLock<Mutex<HashMap<String, (String, Instant)>>> =
    LazyLock::new(Mutex::default);

/// The attempt of a caller waiting for a key whose holder a look found alive,
/// once the look is due (the session would have ended): the look alone, one
/// command in place of the attempt (the script compares the holder, so a key
/// freed or taken since answers at once, and the caller then tries as before).
/// `None` when no look is due for the key, or the key may be free now (the
/// caller's own attempt follows). Without it, each look of a waiter on a live
/// holder would cost an attempt besides: two commands per session period.
pub(crate) fn again(
    conn: &mut Conn,
    keys: &Keys,
    broken: Option<&AtomicU64>,
) -> RedisResult<Option<Acquire>> {
    // No look was ever due in this process (no liveness holder met): the
    // usual attempt, without taking the lock.
    if !LOOKED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let token = {
        let mut looks = LOOK_AGAIN.lock();
        let now = Instant::now();
        // Not due yet (a poll, a release message): the attempt tells more.
        match looks.get(&keys.lock) {
            Some((_, at)) if *at > now => return Ok(None),
            None => return Ok(None),
            Some(_) => {}
        }
        match looks.remove(&keys.lock) {
            // A caller that stopped waiting long ago left it: not looked at.
            Some((token, at)) if now < at + STALE_LOOK => token,
            _ => return Ok(None),
        }
    };
    Ok(look(conn, keys, token.as_bytes(), false, broken)?.filter(
        |busy| !matches!(busy, Acquire::Busy { remaining: Some(left), .. } if left.is_zero()),
    ))
}

/// Set once a look is noted in [`LOOK_AGAIN`].
static LOOKED: AtomicBool = AtomicBool::new(false);

/// How long after it a look not made is dropped: its caller stopped waiting.
const STALE_LOOK: Duration = Duration::from_secs(5);

/// Notes that the caller waiting for `lock`, held by `token`, looks again at
/// its holder in `left`.
pub(super) fn look_again_in(lock: &str, token: &str, left: Duration) {
    let mut looks = LOOK_AGAIN.lock();
    let now = Instant::now();
    if looks.len() >= ALIVE_KEPT {
        looks.retain(|_, (_, at)| *at > now);
    }
    looks.insert(lock.to_owned(), (token.to_owned(), now + left));
    LOOKED.store(true, Ordering::Relaxed);
}

/// Token holders of liveness sessions whose record a Redis Cluster keeps in
/// another slot than their lock, by lock key: the holder's token and its
/// session record, for the cluster's look in a step of its own (see
/// [`take_cross`]).
static CROSS_LOOKS: LazyLock<Mutex<HashMap<String, (String, String)>>> =
    LazyLock::new(Mutex::default);

/// Set once [`CROSS_LOOKS`] was written to.
static CROSS_LOOKED: AtomicBool = AtomicBool::new(false);

/// Notes the holder `token` of `lock`, a liveness session's whose record
/// `session` lives in another slot, for the cluster's look ([`take_cross`]).
pub(super) fn note_cross(lock: &str, token: &str, session: String) {
    CROSS_LOOKS
        .lock()
        .insert(lock.to_owned(), (token.to_owned(), session));
    CROSS_LOOKED.store(true, Ordering::Relaxed);
}

/// The holder of `lock` a waiter's attempt just named, when it is the token of
/// a liveness session whose record lives in another slot: its token and its
/// session record.
pub(crate) fn take_cross(lock: &str) -> Option<(String, String)> {
    if !CROSS_LOOKED.load(Ordering::Relaxed) {
        return None;
    }
    CROSS_LOOKS.lock().remove(lock)
}

/// The scripts a [`break_cmd`] may load after `NOSCRIPT`.
pub(crate) static BREAK_SCRIPTS: [&LazyLock<redis::Script>; 1] = [&TOKEN_BREAK];

/// For a caller that tries a lock once and does not wait (a partition group's
/// member, whose rounds try each of its partitions): the session record of
/// `holder`, the value `lock` (under `prefix`) was found to hold, when it is
/// the token of a client that declared liveness, and [`TOKEN_BREAK`] (marking
/// nothing) as one `EVALSHA` to send to the lock's server, which removes the
/// value if the record is gone. Read its reply with [`broke`].
pub(crate) fn break_cmd(prefix: &str, lock: &str, holder: &str) -> Option<(String, redis::Cmd)> {
    if holder.ends_with(KEPT_MARK) {
        return None;
    }
    let token = holder.strip_suffix('+').unwrap_or(holder);
    let tag = ClientTag::of_token(token).filter(ClientTag::declares_liveness)?;
    let session = tag.session_key(prefix);
    if known_alive(&session).is_some() {
        return None;
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(TOKEN_BREAK.get_hash())
        .arg(2)
        .arg(lock)
        .arg(&session)
        .arg(token)
        .arg("0");
    Some((session, cmd))
}

/// Reads [`break_cmd`]'s reply for the session `session` (noting a live one,
/// as a waiter's look does): whether the holder's value was removed, counted
/// in `broken` and the metric then.
pub(crate) fn broke(
    reply: &redis::Value,
    session: String,
    sent: Instant,
    broken: &AtomicU64,
) -> bool {
    let Ok((pttl, session_pttl)) = redis::from_redis_value::<(i64, i64)>(reply.clone()) else {
        return false;
    };
    if pttl == -4 {
        broken.fetch_add(1, Ordering::Relaxed);
        crate::metrics::export::broken();
        return true;
    }
    if pttl >= 0
        && let Ok(s) = u64::try_from(session_pttl)
    {
        alive_until(session, sent + Duration::from_millis(s + 1));
    }
    false
}
