//! The semaphore's count: read it, create it, set it, add to it. Calls that hold
//! no lease, sent to the node of the semaphore's slot.

use std::sync::LazyLock;

use redis::{RedisResult, Script, Value};

use super::{channel, timeouts};
use crate::scheme::redisson::{now_millis, publish_verb, reclaim_expired};

/// Reads, and maybe changes, the count, after moving expired permits back into it
/// (publishing the count as the acquire does).
///
/// KEYS[1] permits, KEYS[2] timeouts. ARGV[1] now (unix ms), ARGV[2] the channel,
/// ARGV[3] `PUBLISH` or `SPUBLISH`, ARGV[4] the operation, ARGV[5] its number:
/// `state` changes nothing; `ensure` creates the semaphore with N permits in all
/// when it does not exist (Redisson's `trySetPermits`); `set` makes N the total
/// (`setPermits`); `add` adds N free permits (`addPermits`). A change publishes
/// as Redisson's do. Returns `{-1, type}` when the name holds another format
/// (nothing touched), else `{existed, free, held}`: whether the count existed
/// before the call, and the free and held permits after it.
pub(super) static ADMIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        r"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then return {-1, kind} end
local value = redis.call('GET', KEYS[1])
if value and not string.match(value, '^%-?%d+$') then return {-1, 'string'} end
local existed = value and 1 or 0
",
        reclaim_expired!("ARGV[1]", "ARGV[2]", "ARGV[3]"),
        r"local held = redis.call('ZCARD', KEYS[2])
local free = tonumber(value or 0)
local op, n = ARGV[4], tonumber(ARGV[5])
if op == 'ensure' and not value or op == 'set' and (not value or free + held ~= n) then
  if value then
    free = redis.call('INCRBY', KEYS[1], n - free - held)
  else
    free = n - held
    redis.call('SET', KEYS[1], free)
  end
  redis.pcall(ARGV[3], ARGV[2], n)
elseif op == 'add' then
  free = redis.call('INCRBY', KEYS[1], n)
  redis.pcall(ARGV[3], ARGV[2], n)
end
return {existed, free, held}
",
    ))
});

/// What a call on the count does besides reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admin {
    /// Read only.
    State,
    /// Create with this many permits in all when absent.
    Ensure(u32),
    /// Make this the total.
    Set(u32),
    /// Add this many free permits.
    Add(u32),
}

/// The count after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    /// Whether the count existed before the call.
    pub(crate) existed: bool,
    /// Free permits (negative after someone lowered the total below the held).
    pub(crate) free: i64,
    /// Permits held, expired ones not counted.
    pub(crate) held: u64,
}

/// What a call on the count found under the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// A semaphore, or nothing yet.
    Semaphore(State),
    /// Another format: Redis's type name (`hash`, `list`, ...), or `string` for a
    /// string that is no count (a token lock's value).
    Other(String),
}

impl Admin {
    /// The call for the semaphore `name` (with the client's prefix), publishing
    /// with `SPUBLISH` when `sharded`; the script it calls is in `SCRIPTS`.
    pub(crate) fn cmd(self, name: &str, sharded: bool) -> redis::Cmd {
        let (op, n) = match self {
            Admin::State => ("state", 0),
            Admin::Ensure(n) => ("ensure", n),
            Admin::Set(n) => ("set", n),
            Admin::Add(n) => ("add", n),
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(ADMIN.get_hash())
            .arg(2)
            .arg(name)
            .arg(timeouts(name))
            .arg(now_millis())
            .arg(channel(name))
            .arg(publish_verb(sharded))
            .arg(op)
            .arg(n);
        cmd
    }

    /// Reads the script's reply.
    pub(crate) fn reply(reply: &Value) -> RedisResult<Found> {
        let items: Vec<Value> = redis::from_redis_value_ref(reply)?;
        if let [Value::Int(-1), kind] = &items[..] {
            return Ok(Found::Other(redis::from_redis_value_ref(kind)?));
        }
        let (existed, free, held): (i64, i64, u64) = redis::from_redis_value_ref(reply)?;
        Ok(Found::Semaphore(State {
            existed: existed == 1,
            free,
            held,
        }))
    }
}
