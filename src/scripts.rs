//! The Lua scripts, each built once; `redis::Script` sends `EVALSHA` and falls back
//! to `EVAL` on `NOSCRIPT`. Keys and values reach a script only as KEYS and ARGV.
//!
//! Each script runs atomically on the server: no other command interleaves between
//! its compare and its write, which is what makes release and renewal safe.

use std::sync::LazyLock;

use redis::Script;

/// Token acquire with a fencing token.
///
/// KEYS[1] lock key, KEYS[2] fence counter. ARGV[1] token, ARGV[2] TTL in ms.
/// Returns `{1, fence}` when acquired, `{0, pttl}` when busy (`pttl` is the holder's
/// remaining time, -1 when the key has no TTL). The `INCR` runs in the same atomic
/// step as the `SET`, so fences are strictly increasing in acquisition order.
pub(crate) static TOKEN_ACQUIRE_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
",
    )
});

/// Token release: compare-and-delete, then wake one waiter per client.
///
/// KEYS[1] lock key. ARGV[1] token, ARGV[2] wake-up channel.
/// Returns 1 released, 0 the key was gone (expired), -1 someone else's value or a
/// value of another type is there (left untouched). `pcall` keeps a key of another
/// type (a hash, a list) from raising: it is someone else's lock, not an error.
pub(crate) static TOKEN_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
if type(v) == 'table' or v ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
",
    )
});

/// Token extend (also the renewal): compare-and-pexpire.
///
/// KEYS[1] lock key. ARGV[1] token, ARGV[2] new TTL in ms.
/// Returns 1 extended, 0 gone, -1 someone else's.
pub(crate) static TOKEN_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return 0 end
if type(v) == 'table' or v ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
});

/// Whether a reply says the server does not know the script (after a restart or
/// `SCRIPT FLUSH`), so it must be loaded and the call repeated.
pub(crate) fn is_noscript(err: &redis::RedisError) -> bool {
    err.code() == Some("NOSCRIPT")
}
