//! Several permits in one hold, as Redisson's `acquire(permits)` writes them:
//! one member of the expiry set per permit, each its own 16-byte id, all with
//! the same score, and the count lowered by their number in the same script.
//!
//! The hold is one lease whose value is its ids (32 hex digits each) joined by
//! commas. Its renewal moves every id's score together, and only while every
//! one is within its lease: a hold missing one (released by id) is lost. Its
//! release gives back whichever of its ids are still there, in one script, and
//! publishes the count after it, as a single release does.
//!
//! A caller that waits reserves its permits on every busy attempt
//! (`reserve.rs`), so redlease acquirers arriving later do not take them. It
//! takes back the permits of dead liveness sessions as a caller for one does
//! (`dead.rs`): a hold's ids name one session, so they come back together.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script};

use super::dead::{self, holders, sessions, take_back};
use super::names::split_ids;
use super::reserve::{WITHDRAW, first_end, reservations, reserved, withdraw_cmd};
use super::{expiry, id_bytes, numkeys, push_id, timeouts};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::ClientId;
use crate::scheme::redisson::{now_millis, publish_cmd, reclaim_expired};
use crate::scheme::{Acquire, Announce, Backend, Freed, Keys, Request, Waiting};
use crate::scheme::{send_acquire, with_scripts};

/// The most permits one hold may take: each is a member written by one script.
pub(crate) const MAX_MANY: u32 = 10_000;

/// Takes `k` permits or none: Redisson's `tryAcquire(permits)`, with
/// reservations.
///
/// KEYS[1] permits, KEYS[2] timeouts, KEYS[3] reservations, KEYS[4..] the
/// session records of holders to look at (`dead.rs`). ARGV[1] k, ARGV[2] the
/// permits' expiry (unix ms), ARGV[3] now (unix ms), ARGV[4] the channel,
/// ARGV[5] `PUBLISH` or `SPUBLISH`, ARGV[6] the caller's reservation, ARGV[7]
/// when it lapses (unix ms; `0`: the caller does not wait, and reserves
/// nothing), ARGV[8] `1` to name the liveness sessions holding permits in a
/// busy reply, ARGV[9..] the k permit ids (16 or 20 bytes each). Takes back
/// the permits of dead sessions, then takes the k when they are free beyond
/// the reservations ahead of the caller's (and drops its own); else, for a
/// caller that waits, writes or refreshes its reservation. Returns as the
/// one-permit acquire does; an error `TOOMANY` (nothing taken, nothing
/// reserved) when the semaphore exists with fewer than k permits in all.
static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        r"
local value = redis.call('GET', KEYS[1])
if value and not tonumber(value) then
  return redis.error_reply('ERR not a semaphore count')
end
",
        sessions!(),
        reclaim_expired!("ARGV[3]", "ARGV[4]", "ARGV[5]"),
        take_back!("ARGV[4]", "ARGV[5]"),
        r"local k = tonumber(ARGV[1])
if value and k > tonumber(value) + redis.call('ZCARD', KEYS[2]) then
  redis.call('ZREM', KEYS[3], ARGV[6])
  return redis.error_reply('TOOMANY more permits than the semaphore has in all')
end
",
        reserved!("ARGV[3]", "ARGV[6]"),
        r"if value and tonumber(value) - ahead >= k then
  redis.call('DECRBY', KEYS[1], k)
  for i = 9, #ARGV do redis.call('ZADD', KEYS[2], ARGV[2], ARGV[i]) end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
  redis.call('ZREM', KEYS[3], ARGV[6])
  if broken > 0 then return {1, broken} end
  return 1
end
if ARGV[7] ~= '0' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
  local keep = tonumber(ARGV[7]) - tonumber(ARGV[3])
  if redis.call('PTTL', KEYS[3]) < keep then redis.call('PEXPIRE', KEYS[3], keep) end
end
",
        first_end!("ARGV[3]", "ARGV[8]"),
    ))
});

/// Gives back the permits of one hold.
///
/// KEYS[1] permits, KEYS[2] timeouts. ARGV[1] now (unix ms), ARGV[2] the
/// channel, ARGV[3] `PUBLISH` or `SPUBLISH`, ARGV[4..] the permit ids. Removes
/// those still there, counts them back and publishes the new count (as the
/// one-permit release); returns 1 + the clients the message reached when every
/// id was there within its lease, 0 otherwise (what was there counted back all
/// the same).
static RELEASE_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local removed, live = 0, 0
for i = 4, #ARGV do
  local expire = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if expire then
    redis.call('ZREM', KEYS[2], ARGV[i])
    removed = removed + 1
    if tonumber(expire) > tonumber(ARGV[1]) then live = live + 1 end
  end
end
if removed == 0 then return 0 end
local value = redis.call('INCRBY', KEYS[1], removed)
local heard = redis.pcall(ARGV[3], ARGV[2], value)
if type(heard) ~= 'number' then heard = 0 end
if live < #ARGV - 3 then return 0 end
return 1 + heard
",
    )
});

/// Renews one hold: Redisson's `updateLeaseTime` for each of its ids, all or
/// none.
///
/// KEYS[1] timeouts. ARGV[1] the new expiry (unix ms), ARGV[2] now (unix ms),
/// ARGV[3..] the permit ids. Returns 1 renewed, 0 when one is gone or expired
/// (nothing written).
static EXTEND_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
for i = 3, #ARGV do
  local expire = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if not expire or tonumber(expire) <= tonumber(ARGV[2]) then return 0 end
end
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i]) end
return 1
",
    )
});

static SCRIPTS: [&LazyLock<Script>; 4] = [&ACQUIRE_MANY, &RELEASE_MANY, &EXTEND_MANY, &WITHDRAW];

/// The commands of holds of several permits, for one call of one client.
#[derive(Debug)]
pub(crate) struct ManyBackend {
    /// 16 hex digits naming the client: in each of its permit ids.
    tag: String,
    /// Whether the client declared liveness: its ids carry the mark.
    live: bool,
    /// Where to count the permits of dead liveness sessions its waiters took back.
    broken: Arc<AtomicU64>,
    /// The permits of each hold.
    permits: u32,
    /// The call's reservation, kept across its attempts.
    reservation: String,
}

impl ManyBackend {
    /// A backend for one call of the client `id`, for `permits` (at most
    /// [`MAX_MANY`]) at once.
    pub(crate) fn new(id: &ClientId, permits: u32) -> Self {
        let tag = id.tag();
        Self {
            tag: tag.as_str().to_owned(),
            live: tag.declares_liveness(),
            broken: Arc::clone(id.broken()),
            permits,
            reservation: super::reserve::member(tag.as_str(), permits),
        }
    }

    /// A hold's value: as many new permit ids as it takes, joined by commas.
    fn new_ids(&self) -> String {
        let n = self.permits as usize;
        let mut ids = String::with_capacity(41 * n);
        for i in 0..n {
            if i > 0 {
                ids.push(',');
            }
            push_id(&mut ids, &self.tag, self.live);
        }
        ids
    }

    /// The call that withdraws this call's reservation (see [`WITHDRAW`]).
    pub(crate) fn withdraw_cmd(&self, name: &str, sharded: bool) -> redis::Cmd {
        withdraw_cmd(name, &self.reservation, sharded)
    }
}

impl Backend for ManyBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(self.new_ids())
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let ids = split_ids(value)?;
        let (timeouts, reservations) = (timeouts(&keys.lock), reservations(&keys.lock));
        dead::attempt(conn, keys, &req, &self.broken, |conn, report, sessions| {
            let now = now_millis();
            // A waiter keeps its reservation a lease's TTL after each attempt:
            // one that died lets the others go as a holder would.
            let lapses = match req.wait {
                Waiting::No => 0,
                _ => expiry(now, req.ttl),
            };
            let mut args = Vec::with_capacity(14 + sessions.len() + ids.len());
            args.extend([
                Arg::from("EVALSHA"),
                ACQUIRE_MANY.get_hash().into(),
                numkeys(sessions).into(),
                keys.lock.as_str().into(),
                timeouts.as_str().into(),
                reservations.as_str().into(),
            ]);
            args.extend(sessions.iter().map(|s| Arg::from(s.as_str())));
            args.extend::<[Arg<'_>; 8]>([
                u64::from(self.permits).into(),
                expiry(now, req.ttl).into(),
                now.into(),
                keys.channel.as_str().into(),
                publish_cmd(conn).into(),
                self.reservation.as_str().into(),
                lapses.into(),
                (if report { "1" } else { "0" }).into(),
            ]);
            args.extend(ids.iter().map(|id| Arg::Bytes(id)));
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
        let ids = split_ids(value)?;
        let timeouts = timeouts(key);
        let mut args = vec![
            Arg::from("EVALSHA"),
            RELEASE_MANY.get_hash().into(),
            2.into(),
            key.into(),
            timeouts.as_str().into(),
            now_millis().into(),
            announce.channel.into(),
            publish_cmd(conn).into(),
        ];
        args.extend(ids.iter().map(|id| Arg::Bytes(id)));
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
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(EXTEND_MANY.get_hash())
            .arg(1)
            .arg(timeouts(key))
            .arg(expiry(now, ttl))
            .arg(now);
        for id in value.split(',') {
            cmd.arg(&id_bytes(id).unwrap_or_default()[..]);
        }
        (cmd, value.to_owned())
    }

    fn publishes(&self) -> bool {
        true
    }

    fn channel(&self, lock: &str) -> String {
        super::channel(lock)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holds_value_is_its_distinct_ids_joined_by_commas() {
        let id = ClientId::new_live();
        let b = ManyBackend::new(&id, 3);
        let value = b.new_ids();
        let ids: Vec<&str> = value.split(',').collect();
        assert_eq!(ids.len(), 3);
        assert!(
            ids.iter()
                .all(|p| crate::ClientTag::of_permit(p) == Some(id.tag()))
        );
        assert!(ids[0] != ids[1] && ids[1] != ids[2]);
        assert_eq!(split_ids(&value).unwrap().len(), 3);
        assert!(split_ids("0123").is_err());
    }
}
