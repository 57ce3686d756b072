//! The reentrant scheme's side of a ticket's adoption: one script that moves
//! the ticket's owner field's hold to the adopting thread's field (the API side
//! is `client/adopt.rs`; the reply reads as the token's, `token/ticket.rs`).

use std::sync::LazyLock;

use redis::Script;

use crate::owner::ClientId;
use crate::scheme::redisson::owner;

/// Moves a ticket's hold to the adopter's owner field, keeping the key's TTL.
///
/// KEYS[1] lock key. ARGV[1] the ticket's owner field, ARGV[2] the adopting
/// thread's. The hash must hold exactly one field, ARGV[1], counting one hold;
/// then ARGV[2] gets that hold (`HSET` before `HDEL`, so the key and its TTL
/// never go). Returns the key's `PTTL` in milliseconds once moved; `-2` the key
/// is gone (the lease expired or was released); `-3` another owner holds it
/// (taken over, or adopted already), or the key is of another type; `-4` the
/// hash has no TTL (not a lease: left as it is); `-5` the field counts nested
/// holds, which one guard cannot carry (left as it is).
///
/// Check and move are one atomic step: of two adopters of one ticket, the
/// first moves the hold, and the second finds the first's field, not the
/// ticket's. The caller never sends ARGV[1] = ARGV[2].
pub(crate) static REENTRANT_ADOPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return -2 end
if kind ~= 'hash' then return -3 end
local f = redis.call('HKEYS', KEYS[1])
if #f ~= 1 or f[1] ~= ARGV[1] then return -3 end
local t = redis.call('PTTL', KEYS[1])
if t == -1 then return -4 end
if t <= 0 then return -2 end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= '1' then return -5 end
redis.call('HSET', KEYS[1], ARGV[2], 1)
redis.call('HDEL', KEYS[1], ARGV[1])
return t
",
    )
});

/// The scripts a reentrant adoption may load after `NOSCRIPT`.
pub(crate) static REENTRANT_ADOPT_SCRIPTS: [&LazyLock<Script>; 1] = [&REENTRANT_ADOPT];

/// The calling thread's owner field for the client `id`: what an adoption on
/// this thread moves the hold to.
pub(crate) fn adopter_field(id: &ClientId) -> String {
    owner(&id.hyphenated())
}

/// The move of `old`'s hold under `key` to `new`, as one `EVALSHA`.
pub(crate) fn reentrant_adopt_cmd(key: &str, old: &str, new: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(REENTRANT_ADOPT.get_hash())
        .arg(1)
        .arg(key)
        .arg(old)
        .arg(new);
    cmd
}
