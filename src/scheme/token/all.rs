//! Several token locks taken in one script: all of them or none (`lock_all` where
//! the keys share a node, and in a Redis Cluster a slot).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::scripts::{EFFECTS, FENCE, MARK};
use crate::time::ttl_millis;

/// Keys one `EXISTS` of [`TOKEN_ACQUIRE_ALL`] counts at most: Lua's `unpack`
/// passes a few thousand values at most.
const EXISTS_CHUNK: usize = 1000;

/// Takes every lock key or none, in one atomic step.
///
/// KEYS[1..n] the lock keys; KEYS[n+1..2n], when fencing, their fence counters
/// (one per key, often the same counter). ARGV[1] TTL in ms, ARGV[2] `1` to take a
/// fence per key, ARGV[3] `1` to mark a redlease holder's token when busy (the
/// caller will wait, see `TOKEN_MARK`), ARGV[4..3+n] one token per key.
///
/// Returns `{1, f1, .., fn}` when every key was set (`SET PX`, fences in key order,
/// 0 without fencing), `{0, i, pttl}` when key `i` exists (nothing written; its
/// token marked when asked), `{-1, i, type}` when key `i` holds another type than
/// a string (nothing written; the type `?` when the user may not ask for it). The
/// checks all run before the first write, and the script runs atomically, so Redis
/// never holds part of the set. A failed fence (an ACL that denies a command of it)
/// deletes the keys set so far before the error is returned: a script is not
/// rolled back.
///
/// Free names cost one `EXISTS` for all of them before the `SET`s (`N + 1`
/// commands, not a look per key): only when some exist is each read in turn,
/// with `GET`, to find the first busy one and tell a token from another type.
pub(crate) static TOKEN_ACQUIRE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
local n = #ARGV - 3
local busy = false
for j = 1, n, {EXISTS_CHUNK} do
  if redis.call('EXISTS', unpack(KEYS, j, math.min(j + {last}, n))) > 0 then
    busy = true
    break
  end
end
if busy then
  for i = 1, n do
    local v = redis.pcall('GET', KEYS[i])
    if type(v) == 'table' then
      if not string.find(v.err, 'WRONGTYPE', 1, true) then return v end
      local kind = redis.pcall('TYPE', KEYS[i])
      return {{-1, i, kind.ok or '?'}}
    end
    if v then
      if ARGV[3] == '1' then
{mark}
        return {{0, i, t}}
      end
      return {{0, i, redis.call('PTTL', KEYS[i])}}
    end
  end
end
local out = {{1}}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[3 + i], 'PX', ARGV[1])
  local fence = 0
  if ARGV[2] == '1' then
{fence}
    if type(fence) == 'table' then
      for j = 1, i do redis.call('DEL', KEYS[j]) end
      return fence
    end
  end
  out[i + 1] = fence
end
return out
",
        last = EXISTS_CHUNK - 1,
        mark = MARK.replace("KEYS[1]", "KEYS[i]"),
        fence = FENCE.replace("KEYS[2]", "KEYS[n + i]"),
    ))
});

/// Releases several token locks in one call: a compare-and-delete per key, as
/// `TOKEN_RELEASE` without a channel argument does it for one.
///
/// KEYS[1..n] the lock keys; ARGV[1..n] our token under each. Returns one number
/// per key: 1 + the number of clients the release message reached when released
/// (a message is sent only when a waiter marked the token, `<token>+`, on the
/// key's release channel), 0 the key was gone, -1 someone else's value or
/// another type is there (left untouched). Each key's compare and delete run in
/// the one script: atomic per key, as the single release is.
pub(crate) static TOKEN_RELEASE_ALL: LazyLock<Script> =
    LazyLock::new(|| Script::new(&RELEASE_ALL_SOURCE.replace("SPUBLISH", "PUBLISH")));

/// [`TOKEN_RELEASE_ALL`] publishing with `SPUBLISH` (Redis 7 sharded pub/sub, in
/// a Redis Cluster): the channels are in the keys' slot.
pub(crate) static TOKEN_RELEASE_ALL_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_ALL_SOURCE));

const RELEASE_ALL_SOURCE: &str = r"
local out = {}
for i = 1, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if v == ARGV[i] then
    redis.call('DEL', KEYS[i])
    out[i] = 1
  elseif v == false then
    out[i] = 0
  elseif type(v) == 'table' or v ~= ARGV[i] .. '+' then
    out[i] = -1
  else
    redis.call('DEL', KEYS[i])
    local channel
    if string.find(KEYS[i], '}', 1, true) then channel = KEYS[i] .. ':released'
    else channel = '{' .. KEYS[i] .. '}:released' end
    local heard = redis.pcall('SPUBLISH', channel, 'released')
    if type(heard) ~= 'number' then heard = 0 end
    out[i] = 1 + heard
  end
end
return out
";

/// The scripts a call of [`acquire_all_cmd`] or [`release_all_cmd`] may need loaded.
pub(crate) static ALL_SCRIPTS: [&LazyLock<Script>; 3] = [
    &TOKEN_ACQUIRE_ALL,
    &TOKEN_RELEASE_ALL,
    &TOKEN_RELEASE_ALL_SHARDED,
];

/// The call of [`TOKEN_RELEASE_ALL`] (its sharded form when `sharded`) that
/// deletes each of `locks` still holding its `values` entry.
pub(crate) fn release_all_cmd(locks: &[&str], values: &[String], sharded: bool) -> redis::Cmd {
    let script = if sharded {
        &TOKEN_RELEASE_ALL_SHARDED
    } else {
        &TOKEN_RELEASE_ALL
    };
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(locks.len());
    for key in locks {
        cmd.arg(*key);
    }
    for value in values {
        cmd.arg(value);
    }
    cmd
}

/// The call of [`TOKEN_ACQUIRE_ALL`] that writes `values[i]` under `locks[i]`,
/// with fences from `fences` (empty: no fencing).
pub(crate) fn acquire_all_cmd(
    locks: &[&str],
    fences: &[String],
    values: &[String],
    ttl: Duration,
    mark: bool,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(TOKEN_ACQUIRE_ALL.get_hash())
        .arg(locks.len() + fences.len());
    for key in locks {
        cmd.arg(*key);
    }
    for key in fences {
        cmd.arg(key);
    }
    cmd.arg(ttl_millis(ttl))
        .arg(if fences.is_empty() { "0" } else { "1" })
        .arg(if mark { "1" } else { "0" });
    for value in values {
        cmd.arg(value);
    }
    cmd
}

/// What one [`TOKEN_ACQUIRE_ALL`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllReply {
    /// Every key is ours; one fence per key (`None` without fencing).
    Acquired(Vec<Option<u64>>),
    /// The key at `index` (0-based) is held, for at most `remaining` more.
    Busy {
        index: usize,
        remaining: Option<Duration>,
    },
    /// The key at `index` holds another Redis type (`kind`): no token lock.
    Other { index: usize, kind: String },
}

/// Reads a [`TOKEN_ACQUIRE_ALL`] reply for `n` keys, `fenced` or not.
///
/// # Errors
/// A reply of another shape.
pub(crate) fn acquire_all_reply(reply: &Value, n: usize, fenced: bool) -> RedisResult<AllReply> {
    let items = Items::read(reply, "unexpected lock_all reply")?;
    match items.int(0)? {
        1 if items.len() == n + 1 => (1..=n)
            .map(|i| Ok(fenced.then_some(u64::try_from(items.int(i)?).unwrap_or(0))))
            .collect::<RedisResult<Vec<_>>>()
            .map(AllReply::Acquired),
        0 => {
            let remaining = match items.int(2)? {
                -2 => Some(Duration::ZERO),
                n => u64::try_from(n).ok().map(Duration::from_millis),
            };
            Ok(AllReply::Busy {
                index: items.index(1, n)?,
                remaining,
            })
        }
        -1 => Ok(AllReply::Other {
            index: items.index(1, n)?,
            kind: items.text(2)?,
        }),
        _ => Err(items.bad()),
    }
}

/// The items of a several-key acquire's reply (`lock_all`'s, `lock_any`'s): an
/// array of integers, with a Redis type's name where a key holds another type.
pub(crate) struct Items {
    items: Vec<Value>,
    what: &'static str,
}

impl Items {
    /// Reads `reply` as an array; `what` names it in the error of a bad shape.
    pub(crate) fn read(reply: &Value, what: &'static str) -> RedisResult<Self> {
        let items = redis::from_redis_value_ref(reply)?;
        Ok(Self { items, what })
    }

    /// How many items there are.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The error for a reply of another shape.
    pub(crate) fn bad(&self) -> redis::RedisError {
        redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, self.what))
    }

    /// Item `i` as an integer; a missing one is [`bad`](Self::bad).
    pub(crate) fn int(&self, i: usize) -> RedisResult<i64> {
        self.items
            .get(i)
            .map(redis::from_redis_value_ref::<i64>)
            .transpose()?
            .ok_or_else(|| self.bad())
    }

    /// Item `i` as a 1-based key index, returned 0-based; one outside the `n`
    /// keys is [`bad`](Self::bad).
    pub(crate) fn index(&self, i: usize, n: usize) -> RedisResult<usize> {
        usize::try_from(self.int(i)? - 1)
            .ok()
            .filter(|i| *i < n)
            .ok_or_else(|| self.bad())
    }

    /// Item `i` as text, empty when missing.
    pub(crate) fn text(&self, i: usize) -> RedisResult<String> {
        Ok(self
            .items
            .get(i)
            .map(redis::from_redis_value_ref)
            .transpose()?
            .unwrap_or_default())
    }
}

/// What a key of Redis type `kind` probably is, for a caller that asked for a
/// token lock.
pub(crate) fn found(kind: &str) -> &'static str {
    match kind {
        "hash" => "a hash (a reentrant, fair or read-write lock?)",
        "list" => "a list",
        "set" => "a set",
        "zset" => "a sorted set",
        "stream" => "a stream",
        _ => "a value of another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|n| Value::Int(*n)).collect())
    }

    #[test]
    fn replies_read_as_grant_busy_or_other_type() {
        assert_eq!(
            acquire_all_reply(&ints(&[1, 7, 8]), 2, true).unwrap(),
            AllReply::Acquired(vec![Some(7), Some(8)])
        );
        assert_eq!(
            acquire_all_reply(&ints(&[1, 0, 0]), 2, false).unwrap(),
            AllReply::Acquired(vec![None, None])
        );
        assert_eq!(
            acquire_all_reply(&ints(&[0, 2, 1500]), 2, false).unwrap(),
            AllReply::Busy {
                index: 1,
                remaining: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            acquire_all_reply(&ints(&[0, 1, -1]), 2, false).unwrap(),
            AllReply::Busy {
                index: 0,
                remaining: None
            }
        );
        let other = Value::Array(vec![
            Value::Int(-1),
            Value::Int(1),
            Value::BulkString(b"hash".to_vec()),
        ]);
        assert_eq!(
            acquire_all_reply(&other, 1, false).unwrap(),
            AllReply::Other {
                index: 0,
                kind: "hash".into()
            }
        );
        assert!(acquire_all_reply(&ints(&[0, 3, 5]), 2, false).is_err());
        assert!(acquire_all_reply(&ints(&[1, 5]), 2, true).is_err());
    }

    #[test]
    fn the_script_reads_each_key_and_counter_by_index() {
        let src = TOKEN_ACQUIRE_ALL.get_hash();
        assert!(!src.is_empty());
        assert!(!MARK.replace("KEYS[1]", "KEYS[i]").contains("KEYS[1]"));
        assert!(!FENCE.replace("KEYS[2]", "KEYS[n + i]").contains("KEYS[2]"));
    }
}
