//! The wire side of leader election: a token lock taken with a fence (the
//! term) by [`ElectionBackend`], whose acquire also records the term beside the
//! key and announces the new leader. Its API is `primitives/election/`.
//!
//! The fence counter is one per key prefix (see [`Keys::fence`](super::Keys)), so
//! it cannot say which term the current leader took. The winning acquire
//! therefore writes `<term> <token>` under the name's term record
//! (`{<key>}:term`, in the key's slot) in the same script as its `SET` and its
//! fence. A reader pairs the record with the holder only when the record's
//! token is the holder's: a record left by an earlier leader is never read as
//! the current one's term.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script};

use super::bulk::TOKEN_BULK_EXTEND;
use super::token::scripts::{
    EFFECTS, FENCE, LIVE_TOKEN, MARK, TOKEN_EXTEND, TOKEN_MARK, TOKEN_RELEASE,
    TOKEN_RELEASE_SHARDED, UNDO_SET,
};
use super::token::{busy, live, remaining};
use super::{
    Acquire, Backend, Keys, Request, TokenBackend, Waiting, acquired, companion, send_acquire,
};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::ClientTag;
use crate::time::ttl_millis;

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

/// An election's acquire: the fenced token acquire, which also records the term
/// and announces the winner.
///
/// KEYS[1] the election key, KEYS[2] the fence counter, KEYS[3] the term
/// record, KEYS[4] the elected channel; ARGV[1] the token, ARGV[2] the TTL in
/// ms, ARGV[3] `1` to mark a redlease holder's token when busy (the caller will
/// wait), ARGV[4] `SPUBLISH` or `PUBLISH`. Returns `{1, term}` when won, `{0,
/// pttl}` when busy, as the token's fenced acquire does, and to a caller that
/// waits `{0, pttl, led}`: `led` is 1 when the holder is a leader (its value is
/// the record's token, marked), whose release always publishes, so the caller
/// need not poll it; 0 for any other holder (a plain lock of the name, another
/// client's). The winner's token is
/// stored marked (`<token>+`), so that its release publishes its release
/// message whoever waits (observers do not mark); the record `<term> <token>`
/// and the fence are written in the same atomic step as the `SET`, and the term
/// is published on the elected channel (`pcall`: a user without channel
/// permissions has still won). The term is formatted with `%.0f`: Lua's own
/// number to string conversion keeps 14 digits, a term has 16.
pub(crate) static ELECTION_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
if redis.call('SET', KEYS[1], ARGV[1] .. '+', 'NX', 'PX', ARGV[2]) then
  local fence
{FENCE}
{UNDO_SET}
  local term = string.format('%.0f', fence)
  redis.call('SET', KEYS[3], term .. ' ' .. ARGV[1])
  redis.pcall(ARGV[4], KEYS[4], term)
  return {{1, fence}}
end
if ARGV[3] == '1' then
{mark}
  local led = 0
  local held = redis.pcall('GET', KEYS[1])
  local record = redis.pcall('GET', KEYS[3])
  if type(held) == 'string' and type(record) == 'string' then
    local space = string.find(record, ' ', 1, true)
    if space and string.sub(record, space + 1) .. '+' == held then led = 1 end
  end
  if type(held) == 'string' and string.find(held, '{live}') then return {{0, t, led, held}} end
  return {{0, t, led}}
end
return {{0, redis.call('PTTL', KEYS[1])}}
",
        mark = *MARK,
        live = *LIVE_TOKEN
    ))
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

/// The election's read, loaded after `NOSCRIPT`.
pub(crate) static ELECTION_SCRIPTS: [&LazyLock<Script>; 1] = [&LEADER];

/// Every script an election's lease calls, loaded after `NOSCRIPT`.
static SCRIPTS: [&LazyLock<Script>; 6] = [
    &ELECTION_ACQUIRE,
    &TOKEN_MARK,
    &TOKEN_RELEASE,
    &TOKEN_RELEASE_SHARDED,
    &TOKEN_EXTEND,
    &TOKEN_BULK_EXTEND,
];

/// An election's leases: the token scheme's, but for the acquire
/// ([`ELECTION_ACQUIRE`]), and never handed straight to a waiting caller of
/// the same client (a hand-off would take a fence without recording it as the
/// term): the release message wakes it as it wakes other clients' candidates.
#[derive(Debug)]
pub(crate) struct ElectionBackend {
    token: TokenBackend,
}

impl ElectionBackend {
    /// The election leases of the client tagged `tag`, counting the leaderships
    /// of dead liveness sessions its candidates broke in `broken`.
    pub(crate) fn new(
        tag: ClientTag,
        broken: &std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        Self {
            token: TokenBackend::new(tag).counting(broken),
        }
    }
}

impl Backend for ElectionBackend {
    fn new_value(&self, conn: &mut Conn, ttl: Duration) -> RedisResult<String> {
        self.token.new_value(conn, ttl)
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let fence = keys.fence();
        let record = term_key(&keys.lock);
        let channel = elected_channel(&keys.lock);
        let args = [
            Arg::from("EVALSHA"),
            ELECTION_ACQUIRE.get_hash().into(),
            4.into(),
            keys.lock.as_str().into(),
            fence.as_str().into(),
            record.as_str().into(),
            channel.as_str().into(),
            value.into(),
            ttl_millis(req.ttl).into(),
            (if req.wait == Waiting::No { "0" } else { "1" }).into(),
            (if conn.sharded() {
                "SPUBLISH"
            } else {
                "PUBLISH"
            })
            .into(),
        ];
        let (mut reply, acked) = send_acquire(conn, &SCRIPTS, &args, req.replicas)?;
        // A holder that declared liveness is named to a waiting caller (marked
        // already): a dead one's leadership is broken (see `token::live`).
        if let redis::Value::Array(items) = &mut reply
            && items.len() == 4
            && let Some(redis::Value::BulkString(holder)) = items.pop()
            && let Some(busy) = live::look(conn, keys, &holder, false, self.token.counter())?
        {
            return Ok(busy);
        }
        // A waiting caller's busy reply also says whether a leader holds the name.
        if let Ok((0, pttl, led)) = redis::from_redis_value_ref::<(i64, i64, i64)>(&reply) {
            return Ok(Acquire::Busy {
                remaining: remaining(pttl),
                announces: led == 1,
            });
        }
        Ok(acquired(reply, true, acked)?.unwrap_or_else(busy))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        self.token.extend_cmd(key, value, maybe, ttl)
    }

    fn bulk_extend(&self) -> Option<&'static LazyLock<Script>> {
        self.token.bulk_extend()
    }

    fn publishes(&self) -> bool {
        true
    }

    fn marked(&self) -> bool {
        true
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }

    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("an election (its term record names the leader's own token)")
    }

    fn label(&self) -> &'static str {
        "election"
    }
}

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
