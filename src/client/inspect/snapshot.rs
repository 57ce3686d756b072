//! The snapshot script behind [`LockInfo::read`](super::LockInfo::read) and
//! [`LockClient::inspect`](crate::LockClient::inspect), and how its reply reads
//! as a lock format.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Script, Value};

use super::{Holder, LockFormat, LockInfo, MAX_PERMITS, Waiter};
use crate::owner::{ClientTag, KEPT_MARK, Owner};
use crate::scheme::{TimestampUnit, companion, fair_keys, id_hex, timeouts, write_wait};

/// Integers from here on (2001-09-09 in seconds) read as legacy timestamps in
/// seconds when no permit is held; smaller ones as a semaphore's count.
const SECONDS_FROM: u64 = 1_000_000_000;
/// Integers from here on read as unix milliseconds: as seconds they would be
/// past the year 5000, as milliseconds they are past 1973.
const MILLIS_FROM: u64 = 100_000_000_000;
/// Integers from here on (year 5138 in milliseconds) are no timestamp.
const MILLIS_UNTIL: u64 = 100_000_000_000_000;

/// One atomic snapshot of a lock key, so the value matches the type and TTL.
/// KEYS[1] the lock key, KEYS[2] its fence counter, KEYS[3] the expiry set of a
/// semaphore of that name, KEYS[4] a read-write lock's waiting-writer mark,
/// KEYS[5] and KEYS[6] the queue and timeout set of a fair lock of that name;
/// ARGV[1] the most permit ids and waiters read, ARGV[2] now (unix ms).
/// Read-only; `pcall` so a companion key of another type reads as absent.
/// Returns `{type, pttl, value, fence, permits held, of those expired, permit
/// ids, their expiries, whether a writer waits, waiters queued, queued ids,
/// their timeouts}` (a missing expiry or timeout is `''`).
static SNAPSHOT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local function num(r) if type(r) == 'number' then return r end return 0 end
local function list(r) if type(r) == 'table' and not r['err'] then return r end return {} end
local function score(r) if type(r) == 'string' then return r end return '' end
local n = tonumber(ARGV[1])
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1])
elseif kind == 'hash' then value = redis.call('HGETALL', KEYS[1]) end
local fence = redis.pcall('GET', KEYS[2])
if type(fence) ~= 'string' then fence = false end
local held = num(redis.pcall('ZCARD', KEYS[3]))
local expired, ids, ends = 0, {}, {}
if held > 0 then
  expired = num(redis.pcall('ZCOUNT', KEYS[3], 0, ARGV[2]))
  local flat = list(redis.pcall('ZRANGE', KEYS[3], 0, n - 1, 'WITHSCORES'))
  for i = 1, #flat, 2 do ids[#ids + 1] = flat[i]; ends[#ends + 1] = flat[i + 1] end
end
local waits = 0
if kind == 'hash' then waits = num(redis.pcall('EXISTS', KEYS[4])) end
local queued = num(redis.pcall('LLEN', KEYS[5]))
local queue, timeouts = {}, {}
if queued > 0 then
  queue = list(redis.pcall('LRANGE', KEYS[5], 0, n - 1))
  for i = 1, #queue do timeouts[i] = score(redis.pcall('ZSCORE', KEYS[6], queue[i])) end
end
return {kind, redis.call('PTTL', KEYS[1]), value, fence, held, expired, ids, ends,
  waits, queued, queue, timeouts}
",
    )
});
/// Reads `key` (fence counter `fence_key`) in one atomic script; each holder
/// whose value names a redlease client is [`Owner::Gone`] until
/// [`resolve`](LockInfo::resolve)d.
pub(crate) fn snapshot(
    conn: &mut dyn ConnectionLike,
    key: &str,
    fence_key: &str,
) -> RedisResult<LockInfo> {
    type Reply = (
        String,
        i64,
        Value,
        Option<String>,
        (u64, u64, Vec<Vec<u8>>, Vec<String>),
        bool,
        (u64, Vec<String>, Vec<String>),
    );
    let [queue_key, timeout_key, redisson_channel] = fair_keys(key);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let reply: Vec<Value> = SNAPSHOT
        .key(key)
        .key(fence_key)
        .key(timeouts(key))
        .key(write_wait(key))
        .key(queue_key)
        .key(timeout_key)
        .arg(MAX_PERMITS)
        .arg(now_ms)
        .invoke(conn)?;
    let mut reply = reply.into_iter();
    let mut next = || reply.next().unwrap_or(Value::Nil);
    let (kind, pttl, value, fence, semaphore, waits, fair): Reply = (
        redis::from_redis_value(next())?,
        redis::from_redis_value(next())?,
        next(),
        redis::from_redis_value(next())?,
        (
            redis::from_redis_value(next())?,
            redis::from_redis_value(next())?,
            redis::from_redis_value(next())?,
            redis::from_redis_value(next())?,
        ),
        redis::from_redis_value::<i64>(next())? == 1,
        (
            redis::from_redis_value(next())?,
            redis::from_redis_value(next())?,
            redis::from_redis_value(next())?,
        ),
    );
    let (held, expired, ids, until) = semaphore;
    let (queued, queue, timeouts) = fair;
    let mut info = LockInfo {
        key: key.to_owned(),
        fence_key: fence_key.to_owned(),
        channels: [companion(key, "released"), redisson_channel],
        format: LockFormat::Other,
        redis_type: kind,
        value: None,
        unit: None,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        fence: fence.and_then(|f| f.parse().ok()),
        waited: false,
        kept: false,
        mode: None,
        free: None,
        held,
        expired,
        holders: Vec::new(),
        queued,
        queue: queue
            .into_iter()
            .zip(
                timeouts
                    .iter()
                    .map(|t| unix_ms(t))
                    .chain(std::iter::repeat(None)),
            )
            .map(|(id, timeout)| Waiter { id, timeout })
            .collect(),
    };
    match (info.redis_type.as_str(), value) {
        ("none", _) if held > 0 => info.free = Some(0),
        ("none", _) => info.format = LockFormat::Free,
        ("string", v) => info.read_string(redis::from_redis_value(v)?),
        ("hash", v) => info.read_hash(redis::from_redis_value(v)?, waits),
        _ => {}
    }
    if info.free.is_some() {
        info.format = LockFormat::Semaphore;
        for (id, until) in ids.iter().zip(until.iter().map(|t| unix_ms(t))) {
            // 16 raw bytes, or a liveness client's 20 (`rl8:`, its tag, 8
            // random bytes); anything else is shown as it is and names no one.
            let hex = id_hex(id);
            let tag = ClientTag::of_permit(&hex);
            info.holders.push(Holder::new(hex, 1, tag, until));
        }
    }
    Ok(info)
}

impl LockInfo {
    /// A string key: a semaphore's count (with permits held, or too small for a
    /// timestamp), a legacy timestamp, a token, or a number of no format.
    fn read_string(&mut self, v: String) {
        let count = v.parse::<i64>().ok();
        if let Some(n) = count.filter(|n| self.held > 0 || n.unsigned_abs() < SECONDS_FROM) {
            self.free = Some(n);
        } else {
            match v.parse::<u64>() {
                Ok(n) if (SECONDS_FROM..MILLIS_FROM).contains(&n) => {
                    self.unit = Some(TimestampUnit::Seconds);
                }
                Ok(n) if (MILLIS_FROM..MILLIS_UNTIL).contains(&n) => {
                    self.unit = Some(TimestampUnit::Millis);
                }
                Ok(_) => {}
                Err(_) => self.format = LockFormat::Token,
            }
            if self.unit.is_some() {
                self.format = LockFormat::LegacyTimestamp;
            }
            if self.format != LockFormat::Other {
                self.waited = ClientTag::of_token(&v).is_some() && v.ends_with('+');
                self.kept = ClientTag::of_token(&v).is_some() && v.ends_with(KEPT_MARK);
                let tag = ClientTag::of_token(&v);
                self.holders.push(Holder::new(v.clone(), 1, tag, None));
            }
        }
        self.value = Some(v);
    }

    /// A hash key: a read-write lock (with a `mode`), a reentrant (or fair)
    /// lock when every field is an owner, else of no format.
    fn read_hash(&mut self, mut fields: HashMap<String, String>, waits: bool) {
        self.mode = fields.remove("mode");
        if self.mode.is_some() {
            self.format = LockFormat::ReadWrite;
            self.waited = waits;
        } else if !fields.is_empty() && fields.iter().all(|(f, c)| is_owner(f, c)) {
            self.format = LockFormat::Reentrant;
        } else {
            return;
        }
        for (field, count) in fields {
            let tag = ClientTag::of_field(&field);
            let holds = count.parse().unwrap_or(0);
            self.holders.push(Holder::new(field, holds, tag, None));
        }
        self.holders.sort_by(|a, b| a.value.cmp(&b.value));
    }
}

impl Holder {
    /// A holder whose owner, when `tag` names one, is looked up later.
    fn new(value: String, holds: u64, tag: Option<ClientTag>, until: Option<SystemTime>) -> Self {
        Self {
            value,
            holds,
            owner: tag.map_or(Owner::None, Owner::Gone),
            until,
        }
    }
}

/// Whether a hash field and its value are a Redisson owner and hold count:
/// `<id>:<thread id>` and an integer.
fn is_owner(field: &str, count: &str) -> bool {
    let owner = field
        .rsplit_once(':')
        .is_some_and(|(id, thread)| !id.is_empty() && thread.parse::<u64>().is_ok());
    owner && count.parse::<i64>().is_ok()
}

/// A sorted-set score in unix milliseconds as a time; `None` when absent.
/// Whole milliseconds (what Redisson and redlease write) are read exactly.
fn unix_ms(score: &str) -> Option<SystemTime> {
    let since = match score.parse::<u64>() {
        Ok(ms) => Duration::from_millis(ms),
        Err(_) => Duration::try_from_secs_f64(score.parse::<f64>().ok()? / 1000.0).ok()?,
    };
    UNIX_EPOCH.checked_add(since)
}
