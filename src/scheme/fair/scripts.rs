//! The fair lock's scripts: Redisson's `RedissonFairLock` acquire and release,
//! with the differences listed in the parent module.

use std::sync::LazyLock;

use redis::Script;

use crate::scheme::token::live::LIVE_FIELD;
use crate::scheme::token::scripts::session_pttl;

/// Drops the dead entries at the head of the queue (KEYS[2], KEYS[3], KEYS[4];
/// ARGV[4] now), but never `me`, the live caller. A redlease entry (one in
/// KEYS[4]) is dead when its own deadline there has passed, whatever its score
/// in KEYS[3]; a Redisson entry when its score in KEYS[3] has. `dropped` tells
/// whether it dropped any.
macro_rules! drop_dead {
    () => {
        r"
local dropped = false
while true do
  local first = redis.call('LINDEX', KEYS[2], 0)
  if first == false or first == me then break end
  local t = tonumber(redis.call('ZSCORE', KEYS[4], first))
  if t == nil then t = tonumber(redis.call('ZSCORE', KEYS[3], first)) end
  if t == nil or t <= tonumber(ARGV[4]) then
    redis.call('ZREM', KEYS[3], first)
    redis.call('ZREM', KEYS[4], first)
    redis.call('LPOP', KEYS[2])
    dropped = true
  else
    break
  end
end
"
    };
}

/// Fair acquire. KEYS[1] lock, KEYS[2] queue, KEYS[3] timeouts, KEYS[4] the
/// redlease waiters' own deadlines; ARGV[1] lease ms, ARGV[2] owner, ARGV[3]
/// queue deadline ms, ARGV[4] now (unix ms), ARGV[5] `1` to queue when busy,
/// ARGV[6] the publish command, ARGV[7] the channel base (an argument, not a
/// key: an ACL user needs no key rule for it), ARGV[8] Redisson's thread wait
/// ms. Nil when acquired, else the lock's PTTL (-2: free, another waiter's
/// turn); for a caller that queued, `{pttl, field}` when the lock's one owner
/// field names a client that declared liveness ([`LIVE_FIELD`]), for the look
/// at its session ([`BREAK`]), and `{-2, head}` when the lock is free and the
/// queue's head (another waiter) names one ([`DROP_HEAD`]).
///
/// A queued caller's score in KEYS[3] is its own deadline plus one Redisson
/// thread wait per Redisson entry ahead of it: each of those takes that much
/// off every score when it acquires, so the score stays its own deadline when
/// it reaches the head (and a Redisson waiter queued behind it is chained as
/// behind one of its own).
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &concat!(
            "local me = ARGV[2]\n",
            drop_dead!(),
            r"
local head = redis.call('LINDEX', KEYS[2], 0)
if redis.call('EXISTS', KEYS[1]) == 0 and (head == false or head == ARGV[2]) then
  if head ~= false then redis.call('LPOP', KEYS[2]) end
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return nil
end
local pttl = redis.call('PTTL', KEYS[1])
if dropped and pttl == -2 and head ~= false then
  redis.call(ARGV[6], ARGV[7] .. ':' .. head, 0)
end
if ARGV[5] == '1' then
  local redisson = 0
  local i = 0
  while true do
    local e = redis.call('LINDEX', KEYS[2], i)
    if e == false or e == ARGV[2] then break end
    if redis.call('ZSCORE', KEYS[4], e) == false then redisson = redisson + 1 end
    i = i + 1
  end
  local deadline = tonumber(ARGV[4]) + tonumber(ARGV[3])
  local score = deadline + redisson * tonumber(ARGV[8])
  if redis.call('ZADD', KEYS[3], score, ARGV[2]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[2])
  end
  redis.call('ZADD', KEYS[4], deadline, ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  if pttl ~= -2 then
    local f = redis.pcall('HKEYS', KEYS[1])
    if type(f) == 'table' and #f == 1 and string.find(f[1], '{live}') then return {pttl, f[1]} end
  elseif head ~= false and string.find(head, '{live}') then
    return {pttl, head}
  end
end
return pttl
",
        )
        .replace("{live}", &LIVE_FIELD),
    )
});

/// Fair release (Redisson's `unlockInnerAsync`). KEYS as [`ACQUIRE`]'s; ARGV[1]
/// owner, ARGV[2] the channel base, ARGV[3] unused, ARGV[4] now (unix ms),
/// ARGV[5] the publish command. 1 released (or one hold fewer), 0 gone, -1 another's.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local me = false\n",
        drop_dead!(),
        r"
local head = redis.call('LINDEX', KEYS[2], 0)
if redis.call('EXISTS', KEYS[1]) == 0 then
  if head ~= false then redis.call(ARGV[5], ARGV[2] .. ':' .. head, 0) end
  return 0
end
local count = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(count) ~= 'string' then return -1 end
if tonumber(count) > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 1
end
redis.call('DEL', KEYS[1])
if head ~= false then redis.call(ARGV[5], ARGV[2] .. ':' .. head, 0) end
return 1
",
    ))
});

/// A waiter that stops waiting (its deadline, a cancel) leaves the queue, as
/// Redisson's `acquireFailedAsync` does (but takes nothing off the scores
/// behind it: it added nothing to them); a head that leaves while the lock is
/// free wakes the next. KEYS as [`ACQUIRE`]'s; ARGV[1] owner, ARGV[2] the
/// channel base. The wake-up is a classic `PUBLISH`: on a cluster with sharded
/// pub/sub the next waiter finds its turn by polling.
pub(super) static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local head = redis.call('LINDEX', KEYS[2], 0)
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local new = redis.call('LINDEX', KEYS[2], 0)
  if new ~= false then redis.call('PUBLISH', ARGV[2] .. ':' .. new, 0) end
end
return 1
",
    )
});

/// Breaks the lock of a holder whose liveness session ended, as Redisson's
/// fair unlock would release it: the next in the queue is woken.
///
/// KEYS as [`ACQUIRE`]'s, and KEYS[5] the holder's session record (read as
/// every break reads it, `session_pttl`). ARGV[1] the
/// holder's owner field as the acquire read it, ARGV[2] the channel base,
/// ARGV[3] the publish command, ARGV[4] now (unix ms). Returns `{-2, 0}` the
/// lock is gone, `{-3, 0}` it holds another owner now (or several), `{pttl,
/// session_pttl}` while the record lives, and `{-4, 0}` when it was gone: the
/// dead entries at the queue's head are dropped (as the release drops them),
/// the lock deleted and `0` published on the head's channel.
pub(super) static BREAK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        session_pttl!(),
        r"
local f = redis.pcall('HKEYS', KEYS[1])
if type(f) ~= 'table' or #f == 0 then return {-2, 0} end
if #f ~= 1 or f[1] ~= ARGV[1] then return {-3, 0} end
local s = session_pttl(KEYS[1], KEYS[5])
if s ~= -2 then return {redis.call('PTTL', KEYS[1]), s} end
local me = false
",
        drop_dead!(),
        r"
redis.call('DEL', KEYS[1])
local head = redis.call('LINDEX', KEYS[2], 0)
if head ~= false then redis.pcall(ARGV[3], ARGV[2] .. ':' .. head, 0) end
return {-4, 0}
",
    ))
});

/// Drops the queue's head, a waiter whose liveness session ended, and wakes
/// the next when the lock is free.
///
/// KEYS as [`BREAK`]'s (KEYS[5] the head's session record). ARGV[1] the head
/// as the acquire read it, ARGV[2] the channel base, ARGV[3] the publish
/// command. Returns `{-3, 0}` when the head is another now, or was dropped
/// (the caller tries again: a dropped waiter is no broken lock), and `{s, s}`
/// while the record lives (`s` its PTTL: the look's next is then).
pub(super) static DROP_HEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        session_pttl!(),
        r"
if redis.call('LINDEX', KEYS[2], 0) ~= ARGV[1] then return {-3, 0} end
local s = session_pttl(KEYS[1], KEYS[5])
if s ~= -2 then return {s, s} end
redis.call('LPOP', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local new = redis.call('LINDEX', KEYS[2], 0)
  if new ~= false then redis.pcall(ARGV[3], ARGV[2] .. ':' .. new, 0) end
end
return {-3, 0}
",
    ))
});
