//! The token scheme's side of a ticket's adoption: one script that checks the
//! ticket's token and puts the adopter's in its place (the API side is
//! `client/adopt.rs`); and [`Adopted`], how every format's adoption script
//! answers (the reentrant one is `reentrant/ticket.rs`, the permit's
//! `semaphore/ticket.rs`).

use std::sync::LazyLock;

use redis::Script;

/// Swaps a ticket's token for the adopter's, keeping the lock's TTL.
///
/// KEYS[1] lock key. ARGV[1] the ticket's token, ARGV[2] the adopter's new
/// token. The key must hold ARGV[1], or ARGV[1] with a waiter's `+` mark (kept
/// on the new token, so the adopter's release still wakes that waiter); a value
/// kept for a minimum hold (`~`) is the old holder's release, not a lease to
/// adopt. Returns the key's `PTTL` in milliseconds once swapped, `-2` the key is
/// gone (the lease expired or was released), `-3` another value or another type
/// is there (taken over, or adopted already), `-4` the value is there without a
/// TTL (not a lease: left as it is).
///
/// Compare, `PTTL` and write are one atomic step: of two adopters of one ticket,
/// the first swaps, and the second finds the first's token, not the ticket's.
/// `SET … PX t` rather than `KEEPTTL`, so that servers before 6.0 run it too
/// (as the mark script does); the TTL is kept to the millisecond.
pub(crate) static TOKEN_ADOPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == false then return -2 end
if type(v) ~= 'string' then return -3 end
local mark
if v == ARGV[1] then mark = '' elseif v == ARGV[1] .. '+' then mark = '+' else return -3 end
local t = redis.call('PTTL', KEYS[1])
if t < 0 then return -4 end
if t == 0 then return -2 end
redis.call('SET', KEYS[1], ARGV[2] .. mark, 'PX', t)
return t
",
    )
});

/// The scripts an adoption may load after `NOSCRIPT`.
pub(crate) static ADOPT_SCRIPTS: [&LazyLock<Script>; 1] = [&TOKEN_ADOPT];

/// What an adoption script found: [`TOKEN_ADOPT`], and the reentrant and
/// permit ones, which answer alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Adopted {
    /// Swapped: the lock has this many milliseconds left.
    Left(u64),
    /// The key is gone: the lease expired or was released.
    Gone,
    /// Another value (or type) is there, or the value has no TTL.
    Taken,
    /// A reentrant lease counted nested holds of its owner (`-5`): nothing
    /// moved.
    Nested,
}

/// The adoption of `old` under `key` by `new`, as one `EVALSHA`.
pub(crate) fn adopt_cmd(key: &str, old: &str, new: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(TOKEN_ADOPT.get_hash())
        .arg(1)
        .arg(key)
        .arg(old)
        .arg(new);
    cmd
}

/// Reads an adoption script's reply: the milliseconds left, `-2` (or `0`)
/// gone, `-5` nested holds, anything else taken.
pub(crate) fn adopted(reply: &redis::Value) -> Adopted {
    match reply {
        redis::Value::Int(t) if *t > 0 => Adopted::Left(t.unsigned_abs()),
        redis::Value::Int(-2 | 0) => Adopted::Gone,
        redis::Value::Int(-5) => Adopted::Nested,
        _ => Adopted::Taken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adopt_scripts_reply_reads_as_time_left_gone_or_taken() {
        use redis::Value::{Int, Nil};
        assert_eq!(adopted(&Int(1500)), Adopted::Left(1500));
        assert_eq!(adopted(&Int(-2)), Adopted::Gone);
        assert_eq!(adopted(&Int(0)), Adopted::Gone);
        assert_eq!(adopted(&Int(-3)), Adopted::Taken);
        assert_eq!(adopted(&Int(-4)), Adopted::Taken);
        assert_eq!(adopted(&Int(-5)), Adopted::Nested);
        assert_eq!(adopted(&Nil), Adopted::Taken);
    }
}
