//! The fan-in latch's wire format: Redisson's `RCountDownLatch` for the count,
//! and beside it, in the count's hash slot, the participants Redisson has no
//! word for. The handle, [`Latch`](crate::Latch), is `primitives/latch/`.
//!
//! A latch named `n` (with the client's prefix) is:
//! - `n`, a string: the count, exactly as Redisson's `trySetCount` writes it and
//!   its `countDown` decrements it (`DECR`; deleted once at or below zero). A
//!   Redisson `getCount` is a `GET` (absent: 0);
//! - `redisson_countdownlatch__channel__{n}`: Redisson's channel, on which a new
//!   count publishes `1` (`NEW_COUNT_MESSAGE`) and the count reaching zero
//!   publishes `0` (`ZERO_COUNT_MESSAGE`), as Redisson's `await` expects;
//! - `{n}:latch` (`n:latch` when `n` holds a `{`, Redisson's `suffixName`), a
//!   hash: `size` the count it was made with, `joined` the participants that
//!   joined, `done` once the count reached zero, and one field `p:<lease key>`
//!   per participant that joined and has not counted down, its value the lease's
//!   token (`rl2:<client tag>:<counter>`, which names the participant's client);
//! - per participant, a token lock (the lease) on `{n}:latch:p:<tag>:<k>`,
//!   renewed by its client's renewal thread with the participant liveness as
//!   its TTL. A participant listed in the hash whose lease key is gone died
//!   before counting down.
//!
//! TTLs: a new latch's keys expire after [`ABANDONED_TTL`] (each join, count
//! down and waiter's look renews it), so an abandoned latch does not stay forever; once the count
//! reaches zero Redisson's script deletes the count, and the hash is kept for
//! [`DONE_TTL`] so a late waiter still reads "done".

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

pub(crate) use super::redisson::publish_verb;
use super::redisson::{suffix_name, unexpected};
use crate::time::ttl_millis;

/// How long a latch that never completes keeps its keys after its last join,
/// count down or waiter's look: a day.
pub const ABANDONED_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a completed latch keeps its record, so that a late waiter reads
/// "done" rather than a latch that never existed: ten minutes.
pub const DONE_TTL: Duration = Duration::from_secs(600);

/// Creates the latch when it is not there: Redisson's `trySetCount`, and the
/// record beside it.
///
/// KEYS[1] count, KEYS[2] record. ARGV[1] the count (0: open only, never
/// create), ARGV[2] `PUBLISH` or `SPUBLISH`, ARGV[3] the channel, ARGV[4] the
/// abandoned TTL (ms). Returns `{size, done}` of the latch found or made; `{-1}`
/// when the count key holds something without a record (a Redisson latch,
/// another value): left alone; `{-2}` nothing there, and ARGV[1] was 0.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local size = redis.call('HGET', KEYS[2], 'size')
if size then
  return {tonumber(size), redis.call('HEXISTS', KEYS[2], 'done')}
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
if ARGV[1] == '0' then return {-2} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('HSET', KEYS[2], 'size', ARGV[1], 'joined', 0)
redis.call('PEXPIRE', KEYS[2], ARGV[4])
-- Redisson's NEW_COUNT_MESSAGE (CountDownLatchPubSub).
redis.pcall(ARGV[2], ARGV[3], 1)
return {tonumber(ARGV[1]), 0}
",
    )
});

/// Lists a participant whose lease is taken.
///
/// KEYS[1] count, KEYS[2] record. ARGV[1] the lease key, ARGV[2] its token,
/// ARGV[3] the abandoned TTL (ms). Returns the participants joined with this
/// one; -1 no latch (expired), -2 already done, -3 full (as many joined as the
/// count).
static JOIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local size = tonumber(redis.call('HGET', KEYS[2], 'size'))
if not size then return -1 end
if redis.call('HEXISTS', KEYS[2], 'done') == 1 then return -2 end
local joined = tonumber(redis.call('HGET', KEYS[2], 'joined'))
if joined >= size then return -3 end
redis.call('HSET', KEYS[2], 'joined', joined + 1, 'p:' .. ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return joined + 1
",
    )
});

/// Counts down for a participant, then as Redisson's `countDown` does.
///
/// KEYS[1] count, KEYS[2] record. ARGV[1] the lease key (empty: no
/// participant, Redisson's own count down), ARGV[2] its token, ARGV[3] the
/// channel, ARGV[4] `PUBLISH` or `SPUBLISH`, ARGV[5] the done TTL (ms), ARGV[6]
/// the abandoned TTL (ms). Returns the count after it; `{-1}` when the
/// participant is not listed (already counted down, or the latch expired).
/// Redisson's script, inside: `DECR`, `DEL` at or below zero, publish `0` at zero.
static COUNT_DOWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[1] ~= '' then
  local f = 'p:' .. ARGV[1]
  if redis.call('HGET', KEYS[2], f) ~= ARGV[2] then return {-1} end
  redis.call('HDEL', KEYS[2], f)
end
local v = redis.call('DECR', KEYS[1])
if v <= 0 then redis.call('DEL', KEYS[1]) end
-- Redisson's ZERO_COUNT_MESSAGE.
if v == 0 then redis.pcall(ARGV[4], ARGV[3], 0) end
if v <= 0 then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HSET', KEYS[2], 'done', 1)
    redis.call('PEXPIRE', KEYS[2], ARGV[5])
  end
else
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
end
return v
",
    )
});

/// Reads the latch, and keeps an open one from expiring while someone waits
/// on it: KEYS[1] count, KEYS[2] record; ARGV[1] the abandoned TTL (ms).
/// Returns `{count or false, the record's fields and values}`.
static LOOK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local count = redis.call('GET', KEYS[1])
if count and redis.call('HEXISTS', KEYS[2], 'done') == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
end
return {count, redis.call('HGETALL', KEYS[2])}
",
    )
});

/// The scripts of this format, for `Topology::query`.
pub(crate) static LATCH_SCRIPTS: &[&LazyLock<Script>] = &[&CREATE, &JOIN, &COUNT_DOWN, &LOOK];

/// Redisson's channel for the latch `key`: `redisson_countdownlatch__channel__{key}`
/// (the name in braces whatever it holds, unlike `prefixName`).
pub(crate) fn channel(key: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{key}}}")
}

/// The record beside the count: Redisson's `suffixName(key, "latch")`.
pub(crate) fn record(key: &str) -> String {
    suffix_name(key, "latch")
}

/// The name (without prefix) of a participant's lease: in the latch's slot
/// when the client has no prefix (`{name}:latch:p:<tag>:<k>`).
pub(crate) fn lease_name(name: &str, tag: &str, k: u64) -> String {
    suffix_name(name, &format!("latch:p:{tag}:{k}"))
}

/// A script call on the latch's two keys.
fn call(script: &Script, key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(2).arg(key).arg(record(key));
    cmd
}

/// Creates the latch `key` with `size` when it is not there.
pub(crate) fn create_cmd(key: &str, size: u32, sharded: bool) -> redis::Cmd {
    let mut cmd = call(&CREATE, key);
    cmd.arg(size)
        .arg(publish_verb(sharded))
        .arg(channel(key))
        .arg(ttl_millis(ABANDONED_TTL));
    cmd
}

/// Lists the participant holding `lease` (its key) with `token`.
pub(crate) fn join_cmd(key: &str, lease: &str, token: &str) -> redis::Cmd {
    let mut cmd = call(&JOIN, key);
    cmd.arg(lease).arg(token).arg(ttl_millis(ABANDONED_TTL));
    cmd
}

/// Counts down for the participant holding `lease` with `token`; `("", "")`
/// counts down as Redisson does, for nobody in particular.
pub(crate) fn count_down_cmd(key: &str, (lease, token): (&str, &str), sharded: bool) -> redis::Cmd {
    let mut cmd = call(&COUNT_DOWN, key);
    cmd.arg(lease)
        .arg(token)
        .arg(channel(key))
        .arg(publish_verb(sharded))
        .arg(ttl_millis(DONE_TTL))
        .arg(ttl_millis(ABANDONED_TTL));
    cmd
}

/// Reads the latch `key` (renewing an open one's expiry).
pub(crate) fn look_cmd(key: &str) -> redis::Cmd {
    let mut cmd = call(&LOOK, key);
    cmd.arg(ttl_millis(ABANDONED_TTL));
    cmd
}

/// What `CREATE` found or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    /// The latch, with its size, and whether it completed already.
    Latch { size: i64, done: bool },
    /// The count key holds something without a record.
    Foreign,
    /// Nothing there (asked to open only).
    Absent,
}

/// Reads `CREATE`'s reply.
pub(crate) fn created(reply: &Value) -> RedisResult<Created> {
    let items: Vec<i64> = redis::from_redis_value_ref(reply)?;
    match items[..] {
        [-1] => Ok(Created::Foreign),
        [-2] => Ok(Created::Absent),
        [size, done] => Ok(Created::Latch {
            size,
            done: done == 1,
        }),
        _ => Err(unexpected("latch create", reply)),
    }
}

/// Reads `COUNT_DOWN`'s reply: the count after it, `None` for a participant
/// not listed.
pub(crate) fn counted(reply: &Value) -> RedisResult<Option<i64>> {
    match reply {
        Value::Int(v) => Ok(Some(*v)),
        Value::Array(items) if items.len() == 1 => Ok(None),
        _ => Err(unexpected("latch count down", reply)),
    }
}

/// Reads an integer reply (`JOIN`'s, a `PTTL`), or a nil as `None` (a `GET`
/// of a count that is gone).
pub(crate) fn int(reply: &Value) -> RedisResult<Option<i64>> {
    Ok(redis::from_redis_value_ref(reply)?)
}

/// The latch as `LOOK` read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Look {
    /// The count; `None` when the key is gone (Redisson reads 0).
    pub(crate) count: Option<i64>,
    /// Whether the record says the count reached zero.
    pub(crate) done: bool,
    /// Participants joined and not counted down: lease key and token.
    pub(crate) participants: Vec<(String, String)>,
}

/// Reads `LOOK`'s reply.
pub(crate) fn look(reply: &Value) -> RedisResult<Look> {
    let (count, fields): (Option<String>, Vec<(String, String)>) =
        redis::from_redis_value_ref(reply)?;
    let mut out = Look {
        count: count.and_then(|c| c.parse().ok()),
        ..Look::default()
    };
    for (field, value) in fields {
        if field == "done" {
            out.done = true;
        } else if let Some(lease) = field.strip_prefix("p:") {
            out.participants.push((lease.to_owned(), value));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_latch_channel_and_suffix_rules() {
        assert_eq!(channel("jobs"), "redisson_countdownlatch__channel__{jobs}");
        assert_eq!(channel("a{b}"), "redisson_countdownlatch__channel__{a{b}}");
        assert_eq!(record("jobs"), "{jobs}:latch");
        assert_eq!(record("a:{b}"), "a:{b}:latch");
        assert_eq!(lease_name("jobs", "00ff", 3), "{jobs}:latch:p:00ff:3");
    }
}
