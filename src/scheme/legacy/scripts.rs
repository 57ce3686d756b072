//! The legacy timestamp scheme's Lua scripts, each built once: acquire (`SETNX`, or
//! take over an expired timestamp) and extend. Its release is the token's
//! compare-and-delete ([`TOKEN_RELEASE`](crate::scheme::token::scripts::TOKEN_RELEASE)).

use std::sync::LazyLock;

use redis::Script;

use crate::scheme::token::scripts::{EFFECTS, FENCE, UNDO_SET};

/// Legacy timestamp acquire: `SETNX`, or take over an expired timestamp.
///
/// KEYS[1] lock key, KEYS[2] fence counter. ARGV[1] our expiry timestamp, ARGV[2] now
/// (same unit, from the configured clock), ARGV[3] server TTL in ms (`0`: none),
/// ARGV[4] `1` to take a fencing token. Returns `{1, fence or 0}` when acquired,
/// `{0, left}` when an unexpired timestamp is there (`left` ≥ 1 units), `{0, -1}`
/// when the value is not a timestamp (a token, a hash: `pcall` turns WRONGTYPE into
/// a table): held by someone we cannot read, never stolen.
///
/// Expired means `stored < now`, the deployed clients' test. The takeover is their
/// `GET` + `GETSET` in one atomic step: a deployed client wins a takeover only if its
/// `GETSET` returns the very expired value it read, and this script replaces that
/// value before any other command runs. Whoever replaces it first wins; the other
/// sees a fresh, unexpired value (our `GET`) or not the value it read (its `GETSET`).
/// A failed `PEXPIRE` or fence ([`FENCE`]) after the write (an ACL that denies it)
/// deletes our value again before the error is returned, as in
/// [`TOKEN_ACQUIRE_FENCED`](crate::scheme::token::scripts::TOKEN_ACQUIRE_FENCED).
pub(crate) static LEGACY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
if redis.call('SETNX', KEYS[1], ARGV[1]) == 0 then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'string' or #v > 18 or not string.find(v, '^%-?%d+$') then
    return {{0, -1}}
  end
  local left = tonumber(v) - tonumber(ARGV[2])
  if left >= 0 then return {{0, math.min(left + 1, 1e15)}} end
  redis.call('SET', KEYS[1], ARGV[1])
end
if ARGV[3] ~= '0' then
  local set = redis.pcall('PEXPIRE', KEYS[1], ARGV[3])
  if type(set) == 'table' then
    redis.call('DEL', KEYS[1])
    return set
  end
end
if ARGV[4] ~= '1' then return {{1, 0}} end
local fence
{FENCE}
{UNDO_SET}
return {{1, fence}}
"
    ))
});

/// Legacy timestamp extend (also the renewal): compare-and-set to a later expiry.
///
/// KEYS[1] lock key. ARGV[1] the value we wrote, ARGV[2] the new expiry timestamp,
/// ARGV[3] server TTL in ms (`0`: none), ARGV[4..] values an unanswered renewal of
/// ours may have written. Returns 1 extended, 0 gone, -1 someone else's value (a
/// deployed client's takeover) or another type: left untouched.
pub(crate) static LEGACY_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
if type(v) == 'table' then return -1 end
local ours = v == ARGV[1]
for i = 4, #ARGV do ours = ours or v == ARGV[i] end
if not ours then return -1 end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
",
    )
});
