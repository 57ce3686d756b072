//! The fair lock: Redisson's `RFairLock`, field for field.
//!
//! A fair lock named `n` (with the client's prefix) is:
//! - the lock hash at `n`, as the reentrant scheme's: field
//!   `<client uuid>:<thread id>`, value the hold count, with a `PEXPIRE`;
//! - `redisson_lock_queue:{n}`, a list of the waiting owners, oldest first;
//! - `redisson_lock_timeout:{n}`, a sorted set of the same owners scored by the
//!   unix time in ms after which an entry is dropped as dead;
//! - per waiter, the channel `redisson_lock__channel:{n}:<owner>`: a release
//!   publishes `0` on the queue head's channel only;
//! - redlease's own addition, which Redisson never reads:
//!   `redisson_lock_timeout:{n}:redlease`, a sorted set of the redlease
//!   waiters only, scored by their own deadline (with a `PEXPIRE` of one
//!   [`QUEUE_DEADLINE`]: it goes when no redlease waiter is left).
//!
//! Redisson's arithmetic: a Redisson waiter's score is its predecessor's (or
//! the lock's PTTL from now) plus its thread wait, and every Redisson
//! acquisition takes its thread wait off every score. A redlease waiter's
//! score is its own deadline ([`QUEUE_DEADLINE`] after its last attempt, at
//! least once a [`POLL`]) plus [`REDISSON_WAIT`] per Redisson entry ahead of
//! it: when it reaches the head, Redisson's acquisitions have taken all those
//! off, so Redisson's scripts drop it only when it is dead, and a Redisson
//! waiter queued behind it gets a full thread wait of its own, as behind one
//! of Redisson's. Where these scripts differ from Redisson's otherwise, no
//! Redisson client can tell: a redlease acquisition takes nothing off the
//! scores (it added nothing to them), nor does a redlease waiter that leaves;
//! a redlease entry at the head is dead when its own deadline has passed; an
//! attempt that drops a dead head while the lock is free publishes the
//! wake-up on the new head's channel; an entry without a score is dropped
//! instead of failing the script; and a waiter's own attempt never drops its
//! own entry (it is alive), only refreshes it. A busy acquire of a caller that
//! queued names a holder that declared liveness, whose lock the caller breaks
//! once its session ended (`BREAK`, waking the queue's head); one that finds
//! the lock free and another's turn is named the queue's head, dropped once
//! its session ended (`DROP_HEAD`).
//!
//! Layout: this file is the wire format's backend and the replies it reads;
//! `scripts.rs` its Lua scripts; `live.rs` the look at a holder's session.
//! The handle, [`FairLock`](crate::FairLock), is `primitives/fair.rs`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::redisson::{now_millis, owner, prefix_name, publish_cmd, unexpected};
use super::reentrant::EXTEND;

mod live;
mod scripts;

use super::{Acquire, Announce, Backend, Freed, Keys, Request, Waiting, fixed_extend_cmd};
use super::{send_acquire, with_scripts};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::time::ttl_millis;
use scripts::{ACQUIRE, BREAK, DROP_HEAD, LEAVE, RELEASE};

/// How long a redlease waiter's queue entry outlives its last attempt: a
/// waiter that died delays the queue by this much at most after the release
/// (plus one [`POLL`] of the next live redlease waiter).
pub(crate) const QUEUE_DEADLINE: Duration = Duration::from_secs(4);

/// The longest a redlease waiter goes without an attempt (which refreshes its
/// entry and drops a dead head), whatever the holder's TTL.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// Redisson's `threadWaitTime` when none is given (`60000 * 5` ms): what a
/// Redisson `lock()` adds to a new waiter's score and takes off every score
/// when it acquires.
pub(crate) const REDISSON_WAIT: Duration = Duration::from_secs(300);

/// Every script the fair lock calls, to load after `NOSCRIPT`.
pub(crate) static FAIR_SCRIPTS: [&LazyLock<Script>; 6] =
    [&ACQUIRE, &RELEASE, &EXTEND, &LEAVE, &BREAK, &DROP_HEAD];

/// The fair lock's commands, for one client.
#[derive(Debug)]
pub(crate) struct FairBackend {
    /// The client's UUID: the first part of every owner it writes.
    client: String,
    /// Where to count the locks of dead liveness sessions its waiters broke.
    broken: Arc<AtomicU64>,
}

impl FairBackend {
    /// The fair lock of client `client` (a UUID), counting the locks its
    /// waiters break in `broken`.
    pub(crate) fn new(client: &str, broken: &Arc<AtomicU64>) -> Self {
        Self {
            client: client.to_owned(),
            broken: Arc::clone(broken),
        }
    }

    /// The calling thread's owner, `<client uuid>:<thread id>`.
    fn owner(&self) -> String {
        owner(&self.client)
    }
}

/// The command that takes the calling thread's entry out of the queue of the
/// fair lock `name` (a caller that stopped waiting).
pub(crate) fn leave_cmd(name: &str, client: &str) -> redis::Cmd {
    let [queue, timeouts, base] = fair_keys(name);
    let alive = alive_key(&timeouts);
    let owner = owner(client);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(LEAVE.get_hash())
        .arg(4)
        .arg(name)
        .arg(queue)
        .arg(timeouts)
        .arg(alive)
        .arg(owner)
        .arg(base);
    cmd
}

/// A busy reply's wait: `wait` (until the holder's lock or session would
/// end), at most a [`POLL`], whose next attempt refreshes this waiter's entry.
fn polled(wait: Duration) -> Acquire {
    Acquire::Busy {
        remaining: Some(wait.min(POLL)),
        announces: false,
    }
}

/// The wait a busy reply's `pttl` allows: the holder's PTTL, or a quarter of a
/// [`POLL`] when the lock has no TTL or is free (another waiter's turn).
fn held_for(pttl: i64) -> Duration {
    match u64::try_from(pttl) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => POLL / 4,
    }
}

/// The queue, timeout set and channel base of the fair lock `name`.
pub(crate) fn fair_keys(name: &str) -> [String; 3] {
    [
        prefix_name("redisson_lock_queue", name),
        prefix_name("redisson_lock_timeout", name),
        prefix_name("redisson_lock__channel", name),
    ]
}

/// The redlease waiters' own deadlines, beside the timeout set `timeouts`
/// (in its hash slot, and under an ACL rule for `redisson_lock_timeout:…`).
fn alive_key(timeouts: &str) -> String {
    format!("{timeouts}:redlease")
}

impl Backend for FairBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(self.owner())
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let [queue, timeouts, base] = fair_keys(&keys.lock);
        let alive = alive_key(&timeouts);
        let waits = if req.wait == Waiting::No { "0" } else { "1" };
        let args = [
            Arg::from("EVALSHA"),
            ACQUIRE.get_hash().into(),
            4.into(),
            keys.lock.as_str().into(),
            queue.as_str().into(),
            timeouts.as_str().into(),
            alive.as_str().into(),
            ttl_millis(req.ttl).into(),
            value.into(),
            ttl_millis(QUEUE_DEADLINE).into(),
            now_millis().into(),
            waits.into(),
            publish_cmd(conn).into(),
            base.as_str().into(),
            ttl_millis(REDISSON_WAIT).into(),
        ];
        let (reply, acked) = send_acquire(conn, &FAIR_SCRIPTS, &args, req.replicas)?;
        match reply {
            Value::Nil => Ok(Acquire::Acquired { fence: None, acked }),
            Value::Int(pttl) => Ok(polled(held_for(pttl))),
            // A waiter is told a holder that declared liveness: a dead one's
            // lock is broken (see `live`), and the queue's head woken.
            Value::Array(a) if a.len() == 2 && matches!(a[1], Value::BulkString(_)) => {
                let (pttl, field): (i64, String) = redis::from_redis_value(Value::Array(a))?;
                let looked = live::look(conn, keys, pttl, &field, &self.broken)?;
                let held = held_for(pttl);
                Ok(polled(looked.map_or(held, |w| w.min(held))))
            }
            other => Err(unexpected("fair lock acquire", &other)),
        }
    }

    fn release(
        &self,
        conn: &mut Conn,
        key: &str,
        _announce: Announce<'_>,
        value: &str,
        _maybe: &[String],
    ) -> RedisResult<Freed> {
        let [queue, timeouts, base] = fair_keys(key);
        let alive = alive_key(&timeouts);
        let publish = publish_cmd(conn);
        let n = with_scripts(conn, &FAIR_SCRIPTS, |c| {
            c.run(|c| {
                RELEASE
                    .key(key)
                    .key(&queue)
                    .key(&timeouts)
                    .key(&alive)
                    .arg(value)
                    .arg(&base)
                    .arg(0)
                    .arg(now_millis())
                    .arg(publish)
                    .invoke::<i64>(c)
            })
        })?;
        Ok(Freed::from_reply(n))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        fixed_extend_cmd(&EXTEND, key, value, ttl)
    }

    fn publishes(&self) -> bool {
        true
    }

    /// The calling thread's own channel: a release wakes the queue head only.
    fn channel(&self, lock: &str) -> String {
        format!(
            "{}:{}",
            prefix_name("redisson_lock__channel", lock),
            self.owner()
        )
    }

    fn reentrant(&self) -> bool {
        true
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &FAIR_SCRIPTS
    }

    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("a fair lock (its queue hands the lock on)")
    }

    fn label(&self) -> &'static str {
        "fair"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_prefix_name() {
        let [q, t, c] = fair_keys("job");
        assert_eq!(q, "redisson_lock_queue:{job}");
        assert_eq!(t, "redisson_lock_timeout:{job}");
        assert_eq!(c, "redisson_lock__channel:{job}");
        assert_eq!(alive_key(&t), "redisson_lock_timeout:{job}:redlease");
        assert_eq!(
            prefix_name("redisson_lock_queue", "a{b}"),
            "redisson_lock_queue:a{b}"
        );
        let b = FairBackend::new("c0ffee", &Arc::default());
        let own = b.channel("job");
        assert!(own.starts_with("redisson_lock__channel:{job}:c0ffee:"));
        assert!(QUEUE_DEADLINE + POLL < Duration::from_secs(6));
    }
}
