//! Reservations: how a caller waiting for several permits keeps later redlease
//! acquirers from taking the permits it waits for (Redisson's clients do not
//! read them).
//!
//! `{n}:reserve` (`n:reserve` when `n` holds a `{`, as the expiry set), a sorted
//! set beside the semaphore in its hash slot: one member per waiting caller,
//! `<arrival unix ms, 13 digits>:<permits>:<32 hex>`, scored by the unix time in
//! ms at which the reservation lapses (its waiter's TTL after its last attempt).
//! Members sort by arrival, so a reservation is *ahead* of another when its
//! member sorts first. An acquire (of one permit or of several) may take only
//! what is free beyond the permits reserved ahead of it: a caller without a
//! reservation counts every one. The first reservation is never held back by
//! another, and every reservation asks for at most the semaphore's total, so
//! the queue of reservations always moves.

use std::sync::LazyLock;

use redis::Script;

use crate::scheme::redisson::{now_millis, suffix_name};

/// The reservations of the semaphore `name`: `suffixName(name, "reserve")`.
pub(crate) fn reservations(name: &str) -> String {
    suffix_name(name, "reserve")
}

/// A reservation's member for a caller of the client tagged `tag` waiting for
/// `permits`, arriving now.
pub(crate) fn member(tag: &str, permits: u32) -> String {
    format!(
        "{:013}:{permits}:{tag}{:016x}",
        now_millis(),
        fastrand::u64(..)
    )
}

/// Lua that drops lapsed reservations from KEYS[3] and sets `ahead` (permits
/// reserved by members sorting before `$me`, or by all when `$me` is empty) and
/// `soonest` (when the first of those lapses, unix ms; nil when none).
macro_rules! reserved {
    ($now:literal, $me:literal) => {
        concat!(
            "local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], 0, ",
            $now,
            ")\nfor _, m in ipairs(lapsed) do redis.call('ZREM', KEYS[3], m) end\n",
            "local ahead, soonest = 0, nil\n",
            "local queued = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')\n",
            "for i = 1, #queued, 2 do\n",
            "  local m = queued[i]\n",
            "  if ",
            $me,
            " == '' or m < ",
            $me,
            " then\n",
            "    ahead = ahead + (tonumber(string.match(m, '^%d+:(%d+):')) or 0)\n",
            "    local lapses = tonumber(queued[i + 1])\n",
            "    if not soonest or lapses < soonest then soonest = lapses end\n",
            "  end\nend\n",
        )
    };
}
pub(crate) use reserved;

/// Lua that answers a busy acquire (the timeouts in KEYS[2], `soonest` set by
/// [`reserved!`], `broken` and `pttls` by `dead.rs`'s macros): `{0, ms, broken,
/// pttls, tag...}`, `ms` until the first lease or reservation ends (-1 when
/// none will), and when `$report` is `'1'` the liveness sessions holding
/// permits (`dead.rs`).
macro_rules! first_end {
    ($now:literal, $report:literal) => {
        concat!(
            "local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n",
            "local ends = soonest\n",
            "if first[1] and tonumber(first[2]) < 922337203685477 ",
            "and (not ends or tonumber(first[2]) < ends) then ends = tonumber(first[2]) end\n",
            "local busy = {0, ends and ends - tonumber(",
            $now,
            ") or -1, broken, pttls}\n",
            holders!($report),
            "return busy\n",
        )
    };
}
pub(crate) use first_end;

/// Withdraws a reservation: the call of a waiter that gave up (its deadline, a
/// cancel, an error).
///
/// KEYS[1] permits, KEYS[2] reservations. ARGV[1] the member, ARGV[2] the
/// channel, ARGV[3] `PUBLISH` or `SPUBLISH`. A reservation removed publishes the
/// count when permits are free, so the acquirers it held back look again.
/// Returns 1 removed, 0 not there.
pub(crate) static WITHDRAW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
local value = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
if value > 0 then redis.pcall(ARGV[3], ARGV[2], value) end
return 1
",
    )
});

/// The call that withdraws the reservation `member` from the semaphore `name`,
/// publishing with `SPUBLISH` when `sharded`; see [`WITHDRAW`].
pub(crate) fn withdraw_cmd(name: &str, member: &str, sharded: bool) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(WITHDRAW.get_hash())
        .arg(2)
        .arg(name)
        .arg(reservations(name))
        .arg(member)
        .arg(super::channel(name))
        .arg(crate::scheme::redisson::publish_verb(sharded));
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_by_arrival_and_carry_their_permits() {
        let m = member("0123456789abcdef", 3);
        let parts: Vec<&str> = m.split(':').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].len(), 13);
        assert_eq!(parts[1], "3");
        assert_eq!(parts[2].len(), 32);
        assert!(format!("{:013}:5:x", 1) < format!("{:013}:1:x", 10));
        assert_eq!(reservations("jobs"), "{jobs}:reserve");
        assert_eq!(reservations("a:{b}"), "a:{b}:reserve");
    }
}
