//! The token scheme's Lua scripts (mark, fenced acquire, release, extend, hand-off),
//! each built once; `redis::Script` sends `EVALSHA` and falls back to `EVAL` on
//! `NOSCRIPT`. Keys and values reach a script only as KEYS and ARGV.
//!
//! Each script runs atomically on the server: no other command interleaves between
//! its compare and its write, which is what makes release and renewal safe.
//!
//! A waiter's mark on a redlease token is a `+` appended to it ([`TOKEN_MARK`]): the
//! token scripts accept `<token>` and `<token>+` alike, and only a marked lock's
//! release publishes its release message.

use std::sync::LazyLock;

use redis::Script;

use crate::owner::{KEPT_MARK, TOKEN_LEN_V1, TOKEN_PREFIX, TOKEN_PREFIX_V1};

/// Lua: `session_pttl(lock, record)`, the `PTTL` of the session record
/// `record` (the caller's prefix, `redlease:session:` and the holder's tag) of
/// a holder of `lock`, as a waiter about to break it must read it: the record
/// under the caller's prefix, and when that one is gone, under every other
/// prefix the holder's client may have had (each beginning of the lock key,
/// which is that prefix and a name). -2 (gone) only when none of them exists,
/// so that a caller whose prefix is not the holder's never takes a live
/// session for a dead one. A record the caller may not read (an ACL's key
/// patterns) counts as absent; a lock key over 512 bytes whose record under
/// the caller's prefix is gone counts as alive (-1).
macro_rules! session_pttl {
    () => {
        r"
local function session_pttl(lock, record)
  local s = redis.call('PTTL', record)
  if s ~= -2 then return s end
  if #lock > 512 then return -1 end
  local tail = string.sub(record, -33)
  for i = 0, #lock - 1 do
    local t = redis.pcall('PTTL', string.sub(lock, 1, i) .. tail)
    if type(t) == 'number' and t ~= -2 then return t end
  end
  return -2
end
"
    };
}
pub(crate) use session_pttl;

/// Marks the holder's value of KEYS[1] as waited for, if it is an unmarked
/// redlease token (`rl2:<16 hex>:<base 36>`, see [`TOKEN_PREFIX`], or an older
/// one: [`TOKEN_PREFIX_V1`], [`TOKEN_LEN_V1`] bytes) with a TTL, keeping that TTL
/// to the millisecond; leaves the key's `PTTL` in `t`. A Lua fragment for the
/// scripts below, written in place: a function would be a closure made on every
/// call, the fenced acquire's fast path included.
pub(crate) static MARK: LazyLock<String> = LazyLock::new(|| {
    format!(
        r"
local t = redis.call('PTTL', KEYS[1])
if t > 0 then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' and (string.find(v, '^{TOKEN_PREFIX}{tag}:[0-9a-z]+$')
      or (#v == {TOKEN_LEN_V1} and string.sub(v, 1, {p}) == '{TOKEN_PREFIX_V1}')) then
    redis.call('SET', KEYS[1], v .. '+', 'PX', t)
  end
end
",
        tag = "[0-9a-f]".repeat(16),
        p = TOKEN_PREFIX_V1.len()
    )
});

/// Marks a redlease holder's token as waited for; returns the lock's `PTTL`.
///
/// KEYS[1] lock key. For a caller that found the lock busy and will wait: the
/// holder's release then publishes its release message. Any other value (another
/// client's, a marked token, another type) is left as it is.
pub(crate) static TOKEN_MARK: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{}return t\n", *MARK)));

/// Takes the next fencing token from the counter KEYS[2] into the script's local
/// `fence`: one more than the counter, and at least the server's clock in
/// microseconds since the Unix epoch (`TIME`), stored back in the counter. A Lua
/// fragment written in place in every script that takes a fence (see [`MARK`] for
/// why not a function); the script declares `local fence` before it.
///
/// The counter alone is kept on the master only as far as it has replicated: a
/// failover to a replica that missed the last increments would hand out their
/// values again. The clock floor rules that out at no extra round trip: the new
/// master's clock has moved past every fence the old one gave out, as long as the
/// two servers' clocks differ by less than the time from the old master's last
/// fence to the new master's first (a failover takes seconds). Within one server,
/// more than one fence per microsecond is not possible (a script takes longer), so
/// the counter follows the clock; a counter set ahead of the clock (by another
/// client's `INCR`, or a clock stepped back) keeps counting by one from there.
/// Values stay below 2^53 (about 1.8e15 today, 9e15 in the year 2255), exact in
/// Lua's numbers.
///
/// `fence` becomes the error table when a command fails (an ACL that denies
/// `INCR`, `TIME` or `SET`): the script undoes its write and returns it. `TIME`
/// before a write needs effect replication: Redis 5 and later replicate scripts
/// that way; [`EFFECTS`] asks an older one for it.
pub(crate) const FENCE: &str = r"
fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'number' then
  local now = redis.pcall('TIME')
  if now.err then
    fence = now
  else
    now = now[1] * 1000000 + now[2]
    if fence < now then
      local set = redis.pcall('SET', KEYS[2], string.format('%.0f', now))
      if set.err then fence = set else fence = now end
    end
  end
end
";

/// After [`FENCE`], in a script that has just set KEYS[1]: when a command failed,
/// the key is deleted again and the error returned.
pub(crate) const UNDO_SET: &str = r"
if type(fence) == 'table' then
  redis.call('DEL', KEYS[1])
  return fence
end
";

/// The first line of every script that takes a fence: a server older than 5.0
/// replicates a script's effects, not the script, only when asked before its
/// first write (later ones always do; a server without the call is not asked).
pub(crate) const EFFECTS: &str =
    "if redis.replicate_commands then redis.replicate_commands() end\n";

/// Token acquire with a fencing token.
///
/// KEYS[1] lock key, KEYS[2] fence counter. ARGV[1] token, ARGV[2] TTL in ms,
/// ARGV[3] `1` to mark a redlease holder's token when busy (the caller will wait,
/// see [`TOKEN_MARK`]).
/// Returns `{1, fence}` when acquired, `{0, pttl}` when busy (`pttl` is the holder's
/// remaining time, -1 when the key has no TTL). The fence ([`FENCE`]) is taken in
/// the same atomic step as the `SET`, so fences are strictly increasing in
/// acquisition order. A failed fence (an ACL that denies a command of it) deletes
/// the token again before the error is returned: a script is not rolled back, and
/// nobody would release that lock.
pub(crate) static TOKEN_ACQUIRE_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence
{FENCE}
{UNDO_SET}
  return {{1, fence}}
end
if ARGV[3] == '1' then
{mark}
  local h = redis.pcall('GET', KEYS[1])
  if type(h) == 'string' and string.find(h, '{live}') then return {{0, t, h}} end
  return {{0, t}}
end
return {{0, redis.call('PTTL', KEYS[1])}}
",
        mark = *MARK,
        live = *LIVE_TOKEN
    ))
});

/// A Lua pattern for a redlease token whose client declared liveness: `rl2:`
/// and a tag whose 13th hex digit is `8` (see
/// [`ClientTag::declares_liveness`](crate::ClientTag::declares_liveness)),
/// with or without a waiter's mark; never a value kept for its minimum hold.
pub(crate) static LIVE_TOKEN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "^{TOKEN_PREFIX}{hex}8[0-9a-f][0-9a-f][0-9a-f]:[0-9a-z]+%+?$",
        hex = "[0-9a-f]".repeat(12)
    )
});

/// Breaks the lock of a holder whose liveness session ended, or marks it.
///
/// KEYS[1] lock key, KEYS[2] the holder's session record. ARGV[1] the holder's
/// token as the caller read it (without a waiter's `+`), ARGV[2] `1` to mark it.
/// Only for a token of a client that declared liveness
/// ([`LIVE_TOKEN`]); the caller checks that, and the script checks that the
/// key still holds that token (marked or not).
/// Returns `{-2, 0}` the key is gone, `{-3, 0}` another value is there now
/// (retry either at once), `{-4, 0}` the record was gone: the holder's value is
/// deleted (the session promised never to come back, so its holder knows it
/// lost), and `{pttl, session_pttl}` while the record lives: the holder's
/// token is marked (ARGV[2]) as [`TOKEN_MARK`] does, and the caller looks again
/// when the session would end. A record without a TTL is not one a liveness
/// session writes: it counts as alive. Compare, look and delete are one step.
pub(crate) static TOKEN_BREAK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        session_pttl!(),
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return {-2, 0} end
if type(v) ~= 'string' or (v ~= ARGV[1] and v ~= ARGV[1] .. '+') then return {-3, 0} end
local s = session_pttl(KEYS[1], KEYS[2])
if s == -2 then
  redis.call('DEL', KEYS[1])
  return {-4, 0}
end
local t = redis.call('PTTL', KEYS[1])
if ARGV[2] == '1' and v == ARGV[1] and t > 0 then
  redis.call('SET', KEYS[1], v .. '+', 'PX', t)
end
return {t, s}
",
    ))
});

/// Token release: compare-and-delete, then wake one waiter per client if any waits.
///
/// KEYS[1] lock key. ARGV[1] token; ARGV[2], when given, a channel to publish the
/// release message on whatever the value says (the releaser's client has callers
/// waiting, or the scheme's waiters cannot mark its values); ARGV[3..] other
/// values that are ours too (a timestamp an unanswered renewal may have written).
/// Returns 1 + the number of clients the release message reached when released, 0
/// the key was gone (expired), -1 someone else's value or a value of another type is
/// there (left untouched). `pcall` keeps a key of another
/// type (a hash, a list) from raising: it is someone else's lock, not an error.
///
/// Without ARGV[2] the release message is sent only when a waiter of another
/// client marked the value (`<token>+`, see [`TOKEN_MARK`]), on the key's release
/// channel (`{key}:released`, or `key:released` for a key with a `}`, as
/// `scheme::companion` names it). A release nobody waits for is then the same call,
/// with the same arguments, as a bare compare-and-delete, and costs Redis as much.
/// The `PUBLISH` is a `pcall`: a user without channel permissions (Redis 7's
/// default) has released the lock all the same, and its waiters poll.
///
/// The script defines no functions: Redis runs its body on every call, and a
/// function definition is a closure made each time (about 600 instructions of
/// Redis per release, of some 34k for a whole lock and unlock, by callgrind).
pub(crate) static TOKEN_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&TOKEN_RELEASE_SOURCE.replace("SPUBLISH", "PUBLISH")));

/// [`TOKEN_RELEASE`] publishing with `SPUBLISH` (Redis 7 sharded pub/sub): in a
/// Redis Cluster the message goes to the key's shard only, not over the whole
/// cluster bus. The channel is in the key's slot (`{key}:released`).
pub(crate) static TOKEN_RELEASE_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(TOKEN_RELEASE_SOURCE));

const TOKEN_RELEASE_SOURCE: &str = r"
local v = redis.pcall('GET', KEYS[1])
local channel = ARGV[2]
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if not channel then return 1 end
else
  if v == false then return 0 end
  if type(v) == 'table' then return -1 end
  local marked = v == ARGV[1] .. '+'
  local ours = marked
  for i = 3, #ARGV do ours = ours or v == ARGV[i] end
  if not ours then return -1 end
  redis.call('DEL', KEYS[1])
  if not (channel or marked) then return 1 end
  if not channel then
    if string.find(KEYS[1], '}', 1, true) then channel = KEYS[1] .. ':released'
    else channel = '{' .. KEYS[1] .. '}:released' end
  end
end
local heard = redis.pcall('SPUBLISH', channel, 'released')
if type(heard) ~= 'number' then return 1 end
return 1 + heard
";

/// Token keep: a release inside a minimum hold. Compare, then keep the key for
/// what is left of the hold instead of deleting it.
///
/// KEYS[1] lock key. ARGV[1] token, ARGV[2] the time left of the hold in ms (a
/// relative `PX`, counted on the releaser's monotonic clock: no wall clock
/// enters), ARGV[3] the key's release channel, ARGV[4] `PUBLISH` or `SPUBLISH`,
/// ARGV[5] `1` to publish whatever the value says (the releaser's client has
/// callers waiting). Returns 1 kept, 0 gone, -1 someone else's value (left
/// untouched). The value becomes `<token>~` ([`KEPT_MARK`]): the holder is done
/// with it, and `inspect` says the lock is kept for its minimum hold. A
/// waiter's `+` mark is dropped. When a waiter had marked the value (or
/// ARGV[5] asks), a `kept` message goes out on the release channel: the lock is
/// not free, but its waiters read the key's new, shorter `PTTL`, which then
/// bounds their wait (they read the old one before, and the key publishes
/// nothing when it expires). Accepting a kept value again makes a retried keep
/// idempotent; it publishes nothing.
pub(crate) static TOKEN_KEEP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
local kept = ARGV[1] .. '{KEPT_MARK}'
if type(v) == 'table' or (v ~= ARGV[1] and v ~= ARGV[1] .. '+' and v ~= kept) then
  return -1
end
redis.call('SET', KEYS[1], kept, 'PX', ARGV[2])
if v == ARGV[1] .. '+' or (ARGV[5] == '1' and v ~= kept) then
  redis.pcall(ARGV[4], ARGV[3], 'kept')
end
return 1
"
    ))
});

/// Token extend (also the renewal): compare-and-pexpire.
///
/// KEYS[1] lock key. ARGV[1] token, ARGV[2] new TTL in ms.
/// Returns 1 extended, 0 gone, -1 someone else's. The token may carry a waiter's
/// mark; the value is left as it is.
pub(crate) static TOKEN_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
if type(v) == 'table' or (v ~= ARGV[1] and v ~= ARGV[1] .. '+') then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
});

/// Token hand-off: replace our token by a waiting caller's, without freeing the lock.
///
/// KEYS[1] lock key, KEYS[2] fence counter. ARGV[1] our token, ARGV[2] the new
/// holder's token, ARGV[3] its TTL in ms, ARGV[4] `1` to take a fence for it.
/// Returns `{1, fence}` handed over, `{0, 0}` our lock was gone, `{-1, 0}` someone
/// else's value is there. Compare and replace are one atomic step, so the lock is
/// held by exactly one of the two tokens at every moment. The fence ([`FENCE`]) is
/// taken before the write, so a failed one (an ACL that denies a command of it)
/// leaves the lock as it was.
/// A waiter's mark on our token passes to the new one: that waiter still waits.
pub(crate) static TOKEN_HANDOFF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
local v = redis.pcall('GET', KEYS[1])
if v == false then return {{0, 0}} end
if type(v) == 'table' then return {{-1, 0}} end
local new = ARGV[2]
if v == ARGV[1] .. '+' then
  new = new .. '+'
elseif v ~= ARGV[1] then
  return {{-1, 0}}
end
local fence = 0
if ARGV[4] == '1' then
{FENCE}
  if type(fence) == 'table' then return fence end
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[3])
return {{1, fence}}
"
    ))
});
