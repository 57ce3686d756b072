//! The wire side of leader election: a token lock taken with a fence (the
//! term), plus a term record beside the key and an announcement on winning.
//! Its API is `primitives/election/`.
//!
//! The fence counter is one per key prefix (see [`Keys::fence`](super::Keys)), so
//! it cannot say which term the current leader took. A winner therefore writes
//! `<term> <token>` under the name's term record (`{<key>}:term`, in the key's
//! slot) right after its acquire, in one script that also checks the lease is
//! still its own. A reader pairs the record with the holder only when the
//! record's token is the holder's: a record left by an earlier leader is never
//! read as the current one's term.

use std::sync::LazyLock;

use redis::Script;

use super::companion;

/// The name's term record, in the key's slot: `<term> <token>` of the last
/// leader that announced itself. It has no TTL (one small string per name).
pub(crate) fn term_key(key: &str) -> String {
    companion(key, "term")
}

/// The channel a won campaign announces itself on, in the key's slot; releases
/// keep their own channel (`{<key>}:released`), so an announcement wakes no
/// waiting candidate.
pub(crate) fn elected_channel(key: &str) -> String {
    companion(key, "elected")
}

/// A winner's announcement. KEYS[1] the election key, KEYS[2] its term record,
/// KEYS[3] the elected channel; ARGV[1] the winner's token, ARGV[2] its term,
/// ARGV[3] `SPUBLISH` or `PUBLISH`. When the key still holds the token (marked
/// or not): writes `<term> <token>` to the record, marks the token (`<token>+`,
/// keeping its TTL to the millisecond) so that the leader's release publishes
/// its release message whoever waits, and publishes the term on the elected
/// channel (`pcall`: a user without channel permissions still announced).
/// Returns 1, or 0 when the key no longer holds the token (the lease ended).
pub(crate) static ELECTED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then return 0 end
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then return 0 end
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[1])
if v == ARGV[1] then
  local t = redis.call('PTTL', KEYS[1])
  if t > 0 then redis.call('SET', KEYS[1], v .. '+', 'PX', t) end
end
redis.pcall(ARGV[3], KEYS[3], ARGV[2])
return 1
",
    )
});

/// Reads the leader in one atomic step. KEYS[1] the election key, KEYS[2] its
/// term record. Read-only. Returns `{type}` when the key is not a string, else
/// `{'string', value, pttl, record or false}`.
pub(crate) static LEADER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' then return {kind} end
local record = redis.pcall('GET', KEYS[2])
if type(record) ~= 'string' then record = false end
return {kind, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), record}
",
    )
});

/// The election's scripts, loaded after `NOSCRIPT`.
pub(crate) static ELECTION_SCRIPTS: [&LazyLock<Script>; 2] = [&ELECTED, &LEADER];

/// The term a record (`<term> <token>`) gives the holder `value` (its waiter's
/// `+` mark ignored): `None` when the record names another token.
pub(crate) fn term_of(record: &str, value: &str) -> Option<u64> {
    let (term, token) = record.split_once(' ')?;
    let value = value.strip_suffix('+').unwrap_or(value);
    (token == value).then(|| term.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_gives_its_term_to_its_own_token_only() {
        assert_eq!(term_of("17 rl2:ab:1", "rl2:ab:1"), Some(17));
        assert_eq!(term_of("17 rl2:ab:1", "rl2:ab:1+"), Some(17));
        assert_eq!(term_of("17 rl2:ab:1", "rl2:ab:2"), None);
        assert_eq!(term_of("x rl2:ab:1", "rl2:ab:1"), None);
        assert_eq!(term_of("garbled", "garbled"), None);
    }

    #[test]
    fn companions_share_the_key_slot() {
        assert_eq!(term_key("lock:a"), "{lock:a}:term");
        assert_eq!(elected_channel("lock:a"), "{lock:a}:elected");
    }
}
