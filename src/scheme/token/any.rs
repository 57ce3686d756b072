//! One token lock out of several, taken in one script: the first free key of a
//! list, starting from a given offset (`lock_any` where the keys share a node, and
//! in a Redis Cluster a slot).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::all::Items;
use super::scripts::{EFFECTS, FENCE, MARK};
use crate::time::ttl_millis;

/// Takes the first free key of KEYS[1..n], looking from offset ARGV[4].
///
/// KEYS[1..n] the lock keys; KEYS[n+1..2n], when fencing, their fence counters
/// (one per key). ARGV[1] TTL in ms, ARGV[2] `1` to take a fence, ARGV[3] `1` to
/// mark every redlease holder's token when all are busy (the caller will wait, so
/// each release publishes, see `TOKEN_MARK`), ARGV[4] the 0-based offset to look
/// from (wrapping round), ARGV[5] our token.
///
/// Returns `{1, i, fence}` when key `i` was free and is now ours (`SET PX`, fence
/// 0 without fencing), `{0, 0, pttl}` when every key is held (`pttl` the soonest
/// end of a holder's TTL, -1 when no holder has one; the holders' tokens marked
/// when asked), `{-1, i, type}` when key `i` holds another type than a string
/// (nothing written; every key's type is checked before the write, so the answer
/// does not depend on the offset). The script runs atomically: the key it takes
/// was free at the instant it was set. A failed fence deletes the key again
/// before the error is returned.
pub(crate) static TOKEN_ACQUIRE_ANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
local n = #KEYS
if ARGV[2] == '1' then n = n / 2 end
local start = tonumber(ARGV[4])
local pick = nil
for j = 0, n - 1 do
  local i = (start + j) % n + 1
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind == 'none' then
    if pick == nil then pick = i end
  elseif kind ~= 'string' then
    return {{-1, i, kind}}
  end
end
if pick ~= nil then
  local i = pick
  redis.call('SET', KEYS[i], ARGV[5], 'PX', ARGV[1])
  local fence = 0
  if ARGV[2] == '1' then
{fence}
    if type(fence) == 'table' then
      redis.call('DEL', KEYS[i])
      return fence
    end
  end
  return {{1, i, fence}}
end
local soonest = -1
for i = 1, n do
  local t
  if ARGV[3] == '1' then
{mark}
  else
    t = redis.call('PTTL', KEYS[i])
  end
  if t > 0 and (soonest < 0 or t < soonest) then soonest = t end
end
return {{0, 0, soonest}}
",
        mark = MARK
            .replace("KEYS[1]", "KEYS[i]")
            .replace("local t =", "t ="),
        fence = FENCE.replace("KEYS[2]", "KEYS[n + i]"),
    ))
});

/// The scripts a call of [`acquire_any_cmd`] may need loaded.
pub(crate) static ANY_SCRIPTS: [&LazyLock<Script>; 1] = [&TOKEN_ACQUIRE_ANY];

/// The call of [`TOKEN_ACQUIRE_ANY`] that writes `value` under the first free of
/// `locks` from `start`, with fences from `fences` (empty: no fencing).
pub(crate) fn acquire_any_cmd(
    locks: &[&str],
    fences: &[String],
    value: &str,
    ttl: Duration,
    mark: bool,
    start: usize,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(TOKEN_ACQUIRE_ANY.get_hash())
        .arg(locks.len() + fences.len());
    for key in locks {
        cmd.arg(*key);
    }
    for key in fences {
        cmd.arg(key);
    }
    cmd.arg(ttl_millis(ttl))
        .arg(if fences.is_empty() { "0" } else { "1" })
        .arg(if mark { "1" } else { "0" })
        .arg(start)
        .arg(value);
    cmd
}

/// What one [`TOKEN_ACQUIRE_ANY`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AnyReply {
    /// The key at `index` (0-based) is ours, with its fence when fenced.
    Acquired { index: usize, fence: Option<u64> },
    /// Every key is held; the soonest holder's TTL ends within `remaining`.
    Busy { remaining: Option<Duration> },
    /// The key at `index` holds another Redis type (`kind`): no token lock.
    Other { index: usize, kind: String },
}

/// Reads a [`TOKEN_ACQUIRE_ANY`] reply for `n` keys, `fenced` or not.
///
/// # Errors
/// A reply of another shape.
pub(crate) fn acquire_any_reply(reply: &Value, n: usize, fenced: bool) -> RedisResult<AnyReply> {
    let items = Items::read(reply, "unexpected lock_any reply")?;
    match items.int(0)? {
        1 => Ok(AnyReply::Acquired {
            index: items.index(1, n)?,
            fence: fenced.then_some(u64::try_from(items.int(2)?).unwrap_or(0)),
        }),
        0 => Ok(AnyReply::Busy {
            remaining: u64::try_from(items.int(2)?).ok().map(Duration::from_millis),
        }),
        -1 => Ok(AnyReply::Other {
            index: items.index(1, n)?,
            kind: items.text(2)?,
        }),
        _ => Err(items.bad()),
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
            acquire_any_reply(&ints(&[1, 3, 7]), 4, true).unwrap(),
            AnyReply::Acquired {
                index: 2,
                fence: Some(7)
            }
        );
        assert_eq!(
            acquire_any_reply(&ints(&[1, 1, 0]), 4, false).unwrap(),
            AnyReply::Acquired {
                index: 0,
                fence: None
            }
        );
        assert_eq!(
            acquire_any_reply(&ints(&[0, 0, 900]), 4, false).unwrap(),
            AnyReply::Busy {
                remaining: Some(Duration::from_millis(900))
            }
        );
        assert_eq!(
            acquire_any_reply(&ints(&[0, 0, -1]), 4, false).unwrap(),
            AnyReply::Busy { remaining: None }
        );
        let other = Value::Array(vec![
            Value::Int(-1),
            Value::Int(2),
            Value::BulkString(b"hash".to_vec()),
        ]);
        assert_eq!(
            acquire_any_reply(&other, 2, false).unwrap(),
            AnyReply::Other {
                index: 1,
                kind: "hash".into()
            }
        );
        assert!(acquire_any_reply(&ints(&[1, 5, 1]), 4, false).is_err());
        assert!(acquire_any_reply(&ints(&[2, 1, 1]), 4, false).is_err());
    }

    #[test]
    fn the_script_reads_each_key_and_counter_by_index() {
        let mark = MARK
            .replace("KEYS[1]", "KEYS[i]")
            .replace("local t =", "t =");
        assert!(!mark.contains("KEYS[1]") && !mark.contains("local t"));
        assert!(!FENCE.replace("KEYS[2]", "KEYS[n + i]").contains("KEYS[2]"));
        assert!(!TOKEN_ACQUIRE_ANY.get_hash().is_empty());
    }
}
