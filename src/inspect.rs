//! What [`LockClient::inspect`](crate::LockClient::inspect) and
//! [`LockClient::held`](crate::LockClient::held) return: a lock as Redis shows it,
//! its holders and their owners; a lease this client holds.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::{RedisResult, Script, Value};

use crate::connection::Conn;
use crate::lease::LeaseState;
use crate::owner::{ClientTag, Owner};
use crate::scheme::{timeouts, write_wait};

/// The most permit ids of one semaphore that [`LockInfo::holders`] lists.
pub const MAX_PERMITS: usize = 1000;
/// Counts from here on (2001-09-09 in seconds) read as legacy timestamps when no
/// permit is held.
const TIMESTAMP_FROM: i64 = 1_000_000_000;

/// One atomic snapshot of a lock key, so the value matches the type and TTL.
/// KEYS[1] the lock key, KEYS[2] its fence counter, KEYS[3] the expiry set of a
/// semaphore of that name, KEYS[4] a read-write lock's waiting-writer mark;
/// ARGV[1] the most permit ids read. Read-only; `pcall` so a fence counter, set
/// or mark of another type reads as absent. Returns `{type, pttl, value, fence,
/// permit ids, whether a writer waits}`.
static SNAPSHOT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1])
elseif kind == 'hash' then value = redis.call('HGETALL', KEYS[1]) end
local waits = 0
if kind == 'hash' then waits = redis.pcall('EXISTS', KEYS[4]) end
if type(waits) == 'table' then waits = 0 end
local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then fence = false end
local ids = {}
if kind == 'none' or kind == 'string' then
  ids = redis.pcall('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)
  if ids['err'] then ids = {} end
end
return {kind, redis.call('PTTL', KEYS[1]), value, fence, ids, waits}
",
    )
});

/// How a lock key is stored, as far as its value tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockFormat {
    /// The key does not exist: the lock is free.
    Free,
    /// A string that is not a number: a token lock (redlease's `rl2:…`, or
    /// another client's token: redis-py, redsync, node-redlock).
    Token,
    /// A number: a legacy timestamp lock (its expiry).
    LegacyTimestamp,
    /// A hash: Redisson's reentrant layout, one field per owner.
    Reentrant,
    /// A hash with a `mode`: Redisson's `RReadWriteLock` layout, one field per
    /// reader (`<uuid>:<thread>`) and writer (`<uuid>:<thread>:write`).
    ReadWrite,
    /// A count with an expiry set of permit ids: Redisson's
    /// `RPermitExpirableSemaphore` layout.
    Semaphore,
    /// Any other type: no lock format.
    Other,
}

/// A lock key as Redis shows it, from [`LockClient::inspect`](crate::LockClient::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    key: String,
    format: LockFormat,
    ttl: Option<Duration>,
    fence: Option<u64>,
    waited: bool,
    mode: Option<String>,
    free: Option<i64>,
    holders: Vec<Holder>,
}

impl LockInfo {
    /// The key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// How the key is stored.
    pub fn format(&self) -> LockFormat {
        self.format
    }
    /// Time left on the key; `None` when it is free or never expires by itself.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
    /// The prefix's fence counter: the last fence given out under it (absent
    /// until a fenced lock was taken).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }
    /// Whether a redlease caller waits for its release, as far as Redis can tell:
    /// a waiting caller marks a redlease token with a `+`, a waiting writer a
    /// read-write lock with its mark (`{name}:redlease:write_wait`).
    pub fn waited(&self) -> bool {
        self.waited
    }
    /// A read-write lock's mode, `read` or `write`; `None` for other formats.
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
    }
    /// A semaphore's free permits (negative after its total was lowered below
    /// the permits held); `None` for other formats.
    pub fn free_permits(&self) -> Option<i64> {
        self.free
    }
    /// Who holds it: one holder for a token or timestamp, one per owner field of a
    /// reentrant or read-write hash, one per permit of a semaphore (the first
    /// [`MAX_PERMITS`] ids); none when it is free.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }
}

/// One holder of a lock: the value it wrote, and its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    value: String,
    holds: u64,
    owner: Owner,
}

impl Holder {
    /// Its value: a token, a timestamp, a Redisson owner field (a writer's ends
    /// in `:write`), a semaphore's permit id (32 hex digits).
    pub fn value(&self) -> &str {
        &self.value
    }
    /// How many times it holds the lock (a reentrant or read-write hold count; 1
    /// otherwise).
    pub fn holds(&self) -> u64 {
        self.holds
    }
    /// Its owner, as its client's session record says.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

/// A lease this client holds, from [`LockClient::held`](crate::LockClient::held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    key: String,
    name: String,
    value: String,
    valid_for: Duration,
}

impl HeldLock {
    /// The key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The lock's name, as it was locked (without the prefix).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The value it stored.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// How long the lease stays valid without another renewal.
    pub fn valid_for(&self) -> Duration {
        self.valid_for
    }

    pub(crate) fn of(state: &LeaseState) -> Self {
        let keys = state.keys();
        Self {
            name: keys.lock[keys.prefix..].to_owned(),
            key: keys.lock,
            value: state.held.lock().value.clone(),
            valid_for: state
                .valid_until()
                .saturating_duration_since(Instant::now()),
        }
    }
}

impl LockInfo {
    /// Looks up the owner of each holder whose value names a redlease client.
    pub(crate) fn resolve<E>(
        mut self,
        mut lookup: impl FnMut(ClientTag) -> Result<Owner, E>,
    ) -> Result<Self, E> {
        for holder in &mut self.holders {
            if let Some(tag) = holder.owner.tag() {
                holder.owner = lookup(tag)?;
            }
        }
        Ok(self)
    }
}

/// Reads `key` (fence counter `fence_key`) in one atomic script; each holder
/// whose value names a redlease client is [`Owner::Gone`] until
/// [`resolve`](LockInfo::resolve)d.
pub(crate) fn read(conn: &mut Conn, key: &str, fence_key: &str) -> RedisResult<LockInfo> {
    type Reply = (String, i64, Value, Option<String>, Vec<Vec<u8>>, bool);
    let (kind, pttl, value, fence, ids, waits): Reply = conn.run(|c| {
        SNAPSHOT
            .key(key)
            .key(fence_key)
            .key(timeouts(key))
            .key(write_wait(key))
            .arg(MAX_PERMITS)
            .invoke(c)
    })?;
    let mut info = LockInfo {
        key: key.to_owned(),
        format: LockFormat::Other,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        fence: fence.and_then(|f| f.parse().ok()),
        waited: false,
        mode: None,
        free: None,
        holders: Vec::new(),
    };
    let mut holders: Vec<(String, u64, Option<ClientTag>)> = Vec::new();
    match (kind.as_str(), value) {
        ("none", _) if ids.is_empty() => info.format = LockFormat::Free,
        ("none", _) => info.free = Some(0),
        ("string", v) => {
            let v: String = redis::from_redis_value(v)?;
            let count = v.parse::<i64>().ok();
            if let Some(n) = count.filter(|n| !ids.is_empty() || *n < TIMESTAMP_FROM) {
                info.free = Some(n);
            } else {
                info.format = if count.is_some_and(|n| n >= 0) {
                    LockFormat::LegacyTimestamp
                } else {
                    LockFormat::Token
                };
                let tag = ClientTag::of_token(&v);
                info.waited = tag.is_some() && v.ends_with('+');
                holders.push((v, 1, tag));
            }
        }
        ("hash", v) => {
            let mut fields: HashMap<String, String> = redis::from_redis_value(v)?;
            info.mode = fields.remove("mode");
            info.waited = info.mode.is_some() && waits;
            info.format = if info.mode.is_some() {
                LockFormat::ReadWrite
            } else {
                LockFormat::Reentrant
            };
            for (field, count) in fields {
                let tag = ClientTag::of_field(&field);
                holders.push((field, count.parse().unwrap_or(0), tag));
            }
            holders.sort_by(|a, b| a.0.cmp(&b.0));
        }
        _ => {}
    }
    if info.free.is_some() {
        info.format = LockFormat::Semaphore;
        for id in ids {
            // 16 raw bytes; anything else is shown as it is and names no one.
            let hex = uuid::Uuid::from_slice(&id).map_or_else(
                |_| String::from_utf8_lossy(&id).into_owned(),
                |u| u.simple().to_string(),
            );
            let tag = ClientTag::of_permit(&hex);
            holders.push((hex, 1, tag));
        }
    }
    for (value, holds, tag) in holders {
        info.holders.push(Holder {
            value,
            holds,
            owner: tag.map_or(Owner::None, Owner::Gone),
        });
    }
    Ok(info)
}
