//! The break of a dead liveness holder's token lock in a Redis Cluster, where
//! the holder's session record lives in another slot than its lock, so that no
//! one script sees both: the record is read on its own node, and only when it
//! is gone is the holder's exact token removed from the lock (a
//! compare-and-delete on the lock's node, with the release message).
//!
//! Two steps are safe for a token because a token is never written twice: the
//! token was read before the record was found gone, and a session's tokens are
//! written only while its record exists, so the token belongs to a session that
//! ended (its client counted that lease lost when it did), whatever the client
//! does after. A Redisson-format field (`<uuid>:<thread>`) is the same across a
//! client's sessions, so those locks stay bound by their TTL in a cluster.

use std::time::{Duration, Instant};

use super::Cluster;
use crate::scheme::token::sessions::{alive_until, known_alive, take_cross};
use crate::scheme::{Announce, Backend, Keys, Release};
use crate::topology::Topology;

/// The longest lock key whose holder's record is looked for under every
/// prefix the key allows (as the break scripts do); a longer one whose record
/// under the caller's prefix is gone counts as alive.
const LONGEST: usize = 512;

impl Cluster {
    /// After a busy attempt at `keys` whose holder was a liveness session's
    /// token (`scheme/token/live.rs` noted it): how long to wait before the
    /// next attempt. `Some(ZERO)` when the holder's session had ended and its
    /// token was removed (or the lock is free), the session's remaining time
    /// while it lives, `None` when nothing was learned (an error: the caller
    /// waits as before).
    pub(super) fn look_across(&self, backend: &dyn Backend, keys: &Keys) -> Option<Duration> {
        let (token, session) = take_cross(&keys.lock)?;
        if let Some(left) = known_alive(&session) {
            return Some(left);
        }
        let sent = Instant::now();
        match self.record_pttl(&keys.lock, &session)? {
            -2 => {}
            // A record without a TTL is none a liveness session writes: alive.
            ms => {
                let left = Duration::from_millis(u64::try_from(ms).unwrap_or(1000) + 1);
                alive_until(session, sent + left);
                return Some(left);
            }
        }
        let announce = Announce {
            channel: &keys.channel,
            always: true,
            keep: None,
        };
        let freed = self
            .release(backend, &keys.lock, announce, &token, &[])
            .ok()?;
        if freed.outcome == Release::Released {
            log::info!(
                "`{}`: broke the lock of {token}, whose liveness session had ended",
                keys.lock
            );
            backend.broke();
            crate::metrics::export::broken();
        }
        Some(Duration::ZERO)
    }

    /// The `PTTL` of the session record `record` of a holder of `lock`, looked
    /// for under every prefix `lock` allows when the one under the caller's is
    /// gone (as `session_pttl` in the break scripts); `None` on an error.
    fn record_pttl(&self, lock: &str, record: &str) -> Option<i64> {
        let pttl = |key: &str| -> Option<i64> {
            let reply = self.query(key, &[], redis::cmd("PTTL").arg(key)).ok()?;
            redis::from_redis_value(reply).ok()
        };
        let first = pttl(record)?;
        if first != -2 {
            return Some(first);
        }
        if lock.len() > LONGEST {
            return Some(-1);
        }
        let tail = record.get(record.len().checked_sub(33)?..)?;
        for end in (0..lock.len()).filter(|&i| lock.is_char_boundary(i)) {
            let t = pttl(&format!("{}{tail}", &lock[..end]))?;
            if t != -2 {
                return Some(t);
            }
        }
        Some(-2)
    }
}
