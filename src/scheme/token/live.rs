//! The token lock of a holder whose liveness session ended: a caller that found
//! the lock busy and will wait looks at the holder's session record in the same
//! script that marks the holder, and removes the holder's value once the record
//! is gone (see [`TOKEN_BREAK`]).
//!
//! Only a value whose writer declared liveness is ever looked at
//! ([`ClientTag::declares_liveness`]): a redlease client's values without it,
//! older versions', Redisson's, redis-py's and legacy timestamps stay bound by
//! their TTL. In a Redis Cluster the record sits in another slot than the lock:
//! the holder is noted for the cluster's look in two steps
//! (`topology/cluster/live.rs`).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::RedisResult;

use super::scripts::TOKEN_BREAK;
use super::sessions::{ALIVE_KEPT, alive_until, due, known_alive, look_again_in, note_cross};
use super::{SCRIPTS, remaining};
use crate::net::connection::Conn;
use crate::owner::{ClientTag, KEPT_MARK};
use crate::scheme::{Acquire, Keys, with_scripts};

/// Set once a server refused the look (a user without `EVALSHA`): later looks
/// are skipped, and the locks of dead sessions wait for their TTL.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The sessions whose record a Redis Cluster keeps in another slot than a lock
/// of theirs: no script sees both, so they are not looked at again.
static CROSS_SLOT: LazyLock<Mutex<std::collections::HashSet<String>>> =
    LazyLock::new(Mutex::default);

/// A Lua pattern for the owner field of a client that declared liveness:
/// `<uuid>:<thread>` whose UUID is of version 8 (see
/// [`ClientTag::declares_liveness`](crate::ClientTag::declares_liveness)).
/// Redisson's Java clients use version 4 UUIDs: their fields never match.
pub(crate) static LIVE_FIELD: LazyLock<String> = LazyLock::new(|| {
    let hex = |n: usize| "[0-9a-f]".repeat(n);
    format!(
        "^{}%-{}%-8{}%-{}%-{}:[0-9]+$",
        hex(8),
        hex(4),
        hex(3),
        hex(4),
        hex(12)
    )
});

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
    let Some(token) = due(&keys.lock) else {
        return Ok(None);
    };
    Ok(look(conn, keys, token.as_bytes(), false, broken)?.filter(
        |busy| !matches!(busy, Acquire::Busy { remaining: Some(left), .. } if left.is_zero()),
    ))
}

/// After a busy attempt that named `holder`: when `holder` is the token of a
/// client that declared liveness, and its session record shares the lock's
/// node, the break script's answer as a busy reply. `None` for any other
/// holder (the caller goes on as before). `mark`: the holder's token is not
/// marked yet and the caller will wait. `broken` counts a break.
pub(crate) fn look(
    conn: &mut Conn,
    keys: &Keys,
    holder: &[u8],
    mark: bool,
    broken: Option<&AtomicU64>,
) -> RedisResult<Option<Acquire>> {
    let Ok(holder) = std::str::from_utf8(holder) else {
        return Ok(None);
    };
    if holder.ends_with(KEPT_MARK) {
        return Ok(None);
    }
    let token = holder.strip_suffix('+').unwrap_or(holder);
    let Some(tag) = ClientTag::of_token(token) else {
        return Ok(None);
    };
    let cross = keys.slot_tag.is_some();
    let busy = look_at(conn, keys, tag, mark, broken, &SCRIPTS, |c, session| {
        TOKEN_BREAK
            .key(&keys.lock)
            .key(session)
            .arg(token)
            .arg(if mark { "1" } else { "0" })
            .invoke::<(i64, i64)>(c)
    })?;
    // In a Redis Cluster the record is in another slot: the cluster looks at
    // it in a step of its own (`topology/cluster/live.rs`).
    let session = tag.session_key(&keys.lock[..keys.prefix]);
    if busy.is_none()
        && tag.declares_liveness()
        && (cross || CROSS_SLOT.lock().contains(&session))
        && !REFUSED.load(Ordering::Relaxed)
    {
        note_cross(&keys.lock, token, session);
    }
    // A live holder: the next look is due when its session would end.
    if let Some(Acquire::Busy {
        remaining: Some(left),
        ..
    }) = busy
        && !left.is_zero()
    {
        look_again_in(&keys.lock, token, left);
    }
    Ok(busy)
}

/// The look at the session of the client tagged `tag` that holds `keys`'s
/// lock, for any scheme: `None` when the tag declared no liveness or the
/// record cannot share the lock's node; the answer a session period's look
/// found, while it lasts (unless the holder is to be marked); else `call`, a
/// script of the scheme's (`scripts`, loaded after `NOSCRIPT`) that compares
/// the holder, reads the record (the session key it is given) and deletes the
/// holder's value when the record is gone, answering as [`TOKEN_BREAK`] does.
pub(crate) fn look_at(
    conn: &mut Conn,
    keys: &Keys,
    tag: ClientTag,
    mark: bool,
    broken: Option<&AtomicU64>,
    scripts: &[&LazyLock<redis::Script>],
    call: impl Fn(&mut redis::Connection, &str) -> RedisResult<(i64, i64)>,
) -> RedisResult<Option<Acquire>> {
    if keys.slot_tag.is_some() || REFUSED.load(Ordering::Relaxed) || !tag.declares_liveness() {
        return Ok(None);
    }
    let session = tag.session_key(&keys.lock[..keys.prefix]);
    // A holder to mark is looked at in any case: the script marks it.
    if let Some(left) = known_alive(&session).filter(|_| !mark) {
        return Ok(Some(Acquire::Busy {
            remaining: Some(left),
            announces: false,
        }));
    }
    if CROSS_SLOT.lock().contains(&session) {
        return Ok(None);
    }
    let sent = Instant::now();
    let reply = with_scripts(conn, scripts, |c| c.run(|c| call(c, &session)));
    let (pttl, session_pttl) = match reply {
        // A Redis Cluster, where the record lives in another slot (a fenced
        // token's keys say so beforehand; the others learn it here, once per
        // session): the lock is left to its TTL.
        Err(e) if e.code() == Some("CROSSSLOT") || e.to_string().contains("CrossSlot") => {
            let mut cross = CROSS_SLOT.lock();
            if cross.len() >= ALIVE_KEPT {
                cross.clear();
            }
            cross.insert(session);
            return Ok(None);
        }
        Err(e) if e.code() == Some("NOPERM") => {
            log::warn!(
                "the redis user may not run scripts: locks of dead liveness sessions wait \
                 for their TTL ({e})"
            );
            REFUSED.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        other => other?,
    };
    let now = || Acquire::Busy {
        remaining: Some(Duration::ZERO),
        announces: false,
    };
    Ok(Some(match (pttl, session_pttl) {
        (-2 | -3, _) => now(),
        (-4, _) => {
            log::info!(
                "`{}`: broke the lock of client {tag}, whose liveness session had ended",
                keys.lock
            );
            if let Some(count) = broken {
                count.fetch_add(1, Ordering::Relaxed);
            }
            crate::metrics::export::broken();
            now()
        }
        (pttl, session_pttl) => {
            let lock = remaining(pttl);
            let Ok(s) = u64::try_from(session_pttl) else {
                return Ok(Some(Acquire::Busy {
                    remaining: lock,
                    announces: false,
                }));
            };
            // The record lives at least `s` from when the look was sent; look
            // again when it would end, unless the lock ends first.
            let alive = Duration::from_millis(s + 1);
            alive_until(session, sent + alive);
            Acquire::Busy {
                remaining: Some(lock.map_or(alive, |l| l.min(alive))),
                announces: false,
            }
        }
    }))
}
