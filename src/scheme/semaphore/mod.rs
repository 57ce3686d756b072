//! The lease semaphore: Redisson's `RPermitExpirableSemaphore`, field for field.
//!
//! A semaphore named `n` (with the client's prefix) is two keys in one hash slot:
//! - `n`, a string: the number of free permits (`INCRBY`/`DECR`);
//! - `{n}:timeout` (`n:timeout` when `n` holds a `{`, Redisson's `suffixName`), a
//!   sorted set: one member per permit held, the permit id as 16 raw bytes, its
//!   score the unix time in ms at which the permit expires (Redisson writes
//!   922337203685477 for a permit without lease).
//!
//! Whoever touches the semaphore first moves expired members back into the
//! count, and publishes the new count on `redisson_sc:{n}` (`prefixName`) when it
//! is above zero; so does every release. Redisson's waiters read the message as a
//! number of free permits, and so it is: a release publishes the count after it.
//! Expiry compares the scores with the writer's clock: the clients sharing a
//! semaphore must agree on the time within the leases' drift allowance.
//!
//! A permit id is 32 hex digits in the API (Redisson's `hexDump` of its 16 bytes):
//! redlease's are the client's tag (16 hex of its UUID) and 16 random hex digits.
//! A client that declared liveness writes 20-byte ids instead, 40 hex digits:
//! the mark `rl8:` (`726c383a`), its tag and 16 random hex digits (`names.rs`).
//! A caller waiting for a permit takes back those of a session whose record is
//! gone (`dead.rs`); no other id is ever taken back before its lease ends.
//!
//! The scripts are this format's, as in `reentrant/`. Where they differ from
//! Redisson's no Redisson client can tell: the acquire takes one permit and
//! answers in a table, and leaves the permits reserved by callers waiting for
//! several (`reserve.rs`: a key of ours beside Redisson's, which Redisson never
//! reads); the renewal does not reclaim other permits, and refuses a permit
//! already past its score (it counts as gone, as anyone's next acquire would
//! find it).
//!
//! Layout: this file is the wire format's backend and its acquire, release and renewal
//! scripts; `many.rs` holds of several permits; `reserve.rs` the reservations of
//! callers waiting for several; `admin.rs` the count (read, create, set, add);
//! `names.rs` its names and permit ids; `dead.rs` the permits of dead liveness
//! sessions; `ticket.rs` the adoption of a permit's ticket. The handle,
//! [`Semaphore`](crate::Semaphore),
//! is `primitives/semaphore/`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script};

use super::redisson::{now_millis, publish_cmd, reclaim_expired};
use super::{Acquire, Announce, Backend, Freed, Keys, Request, send_acquire, with_scripts};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::ClientId;
use crate::time::ttl_millis;

mod admin;
mod dead;
mod many;
mod names;
mod reserve;
pub(crate) mod ticket;

pub(crate) use admin::{Admin, Found, State};
use dead::{holders, sessions, take_back};
pub(crate) use many::{MAX_MANY, ManyBackend};
use names::push_id;
pub(crate) use names::{channel, id_bytes, id_hex, timeouts};
pub(crate) use reserve::{WITHDRAW, reservations};
use reserve::{first_end, reserved};

/// Redisson's score for a permit without lease (`nonExpirableTimeout`).
pub(crate) const NO_LEASE: u64 = 922_337_203_685_477;

/// Takes one permit.
///
/// KEYS[1] permits, KEYS[2] timeouts, KEYS[3] reservations, KEYS[4..] the
/// session records of holders to look at (`dead.rs`). ARGV[1] the permit's
/// expiry (unix ms), ARGV[2] now (unix ms), ARGV[3] the permit id (16 or 20
/// bytes), ARGV[4] the channel, ARGV[5] `PUBLISH` or `SPUBLISH`, ARGV[6] `1` to
/// name the liveness sessions holding permits in a busy reply. Reclaims expired
/// permits first (publishing the count, as Redisson's acquire does), takes back
/// the permits of the dead sessions among KEYS[4..], and takes a permit only
/// beyond those reserved by callers waiting for several (`reserve.rs`). Returns
/// 1 taken (`{1, n}` after taking back n), or, none free, `{0, ms, n, {pttl...},
/// tag...}`: the first lease (or reservation) ends in `ms` (-1: none will, or
/// the semaphore does not exist), n taken back, each record's `PTTL`, the
/// holders' raw tags. A value that is no number is an error, left alone (one
/// that is no integer fails at `DECR`, before anything is written).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        r"
local value = redis.call('GET', KEYS[1])
if value and not tonumber(value) then
  return redis.error_reply('ERR not a semaphore count')
end
",
        sessions!(),
        reclaim_expired!("ARGV[2]", "ARGV[4]", "ARGV[5]"),
        take_back!("ARGV[4]", "ARGV[5]"),
        reserved!("ARGV[2]", "''"),
        r"if value and tonumber(value) - ahead >= 1 then
  redis.call('DECR', KEYS[1])
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
  if broken > 0 then return {1, broken} end
  return 1
end
",
        first_end!("ARGV[2]", "ARGV[6]"),
    ))
});

/// Gives one permit back: Redisson's `tryRelease`.
///
/// KEYS[1] permits, KEYS[2] timeouts. ARGV[1] the permit id, ARGV[2] now (unix
/// ms), ARGV[3] the channel, ARGV[4] `PUBLISH` or `SPUBLISH`. A permit found is
/// counted back and the new count published; returns 1 + the clients the message
/// reached when the permit was still within its lease, 0 when it was not there
/// or had expired (counted back all the same, as Redisson does).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local expire = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expire then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
local value = redis.call('INCRBY', KEYS[1], 1)
local heard = redis.pcall(ARGV[4], ARGV[3], value)
if type(heard) ~= 'number' then heard = 0 end
if tonumber(expire) <= tonumber(ARGV[2]) then return 0 end
return 1 + heard
",
    )
});

/// Renews one permit: Redisson's `updateLeaseTime` for a permit within its lease.
///
/// KEYS[1] timeouts. ARGV[1] the permit id, ARGV[2] the new expiry (unix ms),
/// ARGV[3] now (unix ms). Returns 1 renewed, 0 gone or expired.
static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local expire = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expire or tonumber(expire) <= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
",
    )
});

static SCRIPTS: [&LazyLock<Script>; 5] = [&ACQUIRE, &RELEASE, &EXTEND, &admin::ADMIN, &WITHDRAW];

/// The semaphore's commands, for one client.
#[derive(Debug)]
pub(crate) struct SemaphoreBackend {
    /// 16 hex digits naming the client: in each of its permit ids.
    tag: String,
    /// Whether the client declared liveness: its ids carry the mark.
    live: bool,
    /// Where to count the permits of dead liveness sessions its waiters took back.
    broken: Arc<AtomicU64>,
}

impl SemaphoreBackend {
    /// A backend for the client `id`.
    pub(crate) fn new(id: &ClientId) -> Self {
        Self {
            tag: id.tag().as_str().to_owned(),
            live: id.tag().declares_liveness(),
            broken: Arc::clone(id.broken()),
        }
    }

    /// A permit id: the client's tag and 16 random hex digits, after the mark
    /// for a client with liveness (`names.rs`).
    fn new_id(&self) -> String {
        let mut id = String::with_capacity(40);
        push_id(&mut id, &self.tag, self.live);
        id
    }
}

impl Backend for SemaphoreBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(self.new_id())
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let id = id_bytes(value)?;
        let (timeouts, reservations) = (timeouts(&keys.lock), reservations(&keys.lock));
        dead::attempt(conn, keys, &req, &self.broken, |conn, report, sessions| {
            let now = now_millis();
            let mut args = Vec::with_capacity(12 + sessions.len());
            args.extend([
                Arg::from("EVALSHA"),
                ACQUIRE.get_hash().into(),
                numkeys(sessions).into(),
                keys.lock.as_str().into(),
                timeouts.as_str().into(),
                reservations.as_str().into(),
            ]);
            args.extend(sessions.iter().map(|s| Arg::from(s.as_str())));
            args.extend([
                expiry(now, req.ttl).into(),
                now.into(),
                Arg::Bytes(&id),
                keys.channel.as_str().into(),
                publish_cmd(conn).into(),
                (if report { "1" } else { "0" }).into(),
            ]);
            send_acquire(conn, &SCRIPTS, &args, req.replicas)
        })
    }

    fn release(
        &self,
        conn: &mut Conn,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        _maybe: &[String],
    ) -> RedisResult<Freed> {
        let id = id_bytes(value)?;
        let timeouts = timeouts(key);
        let args = [
            Arg::from("EVALSHA"),
            RELEASE.get_hash().into(),
            2.into(),
            key.into(),
            timeouts.as_str().into(),
            Arg::Bytes(&id),
            now_millis().into(),
            announce.channel.into(),
            publish_cmd(conn).into(),
        ];
        let reply = with_scripts(conn, &SCRIPTS, |c| c.request(&args))?;
        let n: i64 = redis::from_redis_value(reply)?;
        Ok(Freed::from_reply(n))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        let now = now_millis();
        let mut cmd = redis::Cmd::with_capacity(7, 128);
        cmd.arg("EVALSHA")
            .arg(EXTEND.get_hash())
            .arg(1)
            .arg(timeouts(key))
            .arg(&id_bytes(value).unwrap_or_default()[..])
            .arg(expiry(now, ttl))
            .arg(now);
        (cmd, value.to_owned())
    }

    fn publishes(&self) -> bool {
        true
    }

    fn channel(&self, lock: &str) -> String {
        channel(lock)
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }

    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("a semaphore (its permits are not one key)")
    }

    fn label(&self) -> &'static str {
        "semaphore"
    }
}

/// The number of keys of an acquire that looks at `sessions`: the semaphore's
/// three and the session records.
fn numkeys(sessions: &[String]) -> u64 {
    u64::try_from(sessions.len()).map_or(3, |n| n + 3)
}

/// The score of a permit leased for `ttl` from `now`: kept below [`NO_LEASE`], so
/// that a very long lease is never read as none.
fn expiry(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(ttl_millis(ttl)).min(NO_LEASE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_carry_the_client_tag_and_the_mark_with_liveness() {
        for (id, live) in [(ClientId::new(), false), (ClientId::new_live(), true)] {
            let b = SemaphoreBackend::new(&id);
            let (a, c) = (b.new_id(), b.new_id());
            assert_ne!(a, c);
            for permit in [a, c] {
                assert_eq!(permit.len(), if live { 40 } else { 32 });
                assert_eq!(crate::ClientTag::of_permit(&permit), Some(id.tag()));
                assert_eq!(id_hex(&id_bytes(&permit).unwrap()), permit);
            }
        }
    }

    #[test]
    fn expiries_stay_below_redissons_no_lease_score() {
        assert_eq!(expiry(1_000, Duration::from_secs(1)), 2_000);
        assert_eq!(expiry(1_000, Duration::MAX), NO_LEASE - 1);
    }
}
