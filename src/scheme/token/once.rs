//! The break of a caller that tries a token lock once and does not wait (a
//! partition group's member, whose rounds try each of its partitions): the
//! holder's value read, then [`TOKEN_BREAK`] when it names a liveness session.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::scripts::TOKEN_BREAK;
use super::sessions::{alive_until, known_alive};
use crate::owner::{ClientTag, KEPT_MARK};

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
