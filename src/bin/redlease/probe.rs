//! Reading a lock key as an administrator: which format holds it, the time left on
//! it, its fence counter. Used by `inspect`, `release --force` and the status line.
//!
//! These reads go through the `redis` crate directly: a reader builds no client
//! (which would keep a session record of its own); owners are looked up with the
//! library's `Owner::lookup` (`owners`).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, IntoConnectionInfo, RedisResult, Script, Value};

/// Connect, read and write timeout of an administrative connection, as the
/// library's defaults.
const TIMEOUT: Duration = redlease::DEFAULT_IO_TIMEOUT;
/// Integer values from here on (2001-09-09 in seconds) read as unix seconds.
const SECONDS_FROM: u64 = 1_000_000_000;
/// Integer values from here on read as unix milliseconds: as seconds they would be
/// past the year 5000, as milliseconds they are past 1973.
const MILLIS_FROM: u64 = 100_000_000_000;
/// Integer values from here on (year 5138 in milliseconds) are no timestamp.
const MILLIS_UNTIL: u64 = 100_000_000_000_000;

/// One atomic snapshot of a lock key, so the value matches the type and TTL
/// reported. KEYS[1]: the lock key, KEYS[2]: its fence counter, KEYS[3] the
/// expiry set of a semaphore of that name, KEYS[4] the queue of a fair lock of
/// that name; ARGV[1] now (unix ms), ARGV[2] the most permit ids read. Returns
/// `{type, pttl, value, fence, held, expired, permit ids, queued}`. Read-only;
/// `redis.pcall` so a fence counter or set of the wrong type reads as absent.
static SNAPSHOT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1])
elseif kind == 'hash' then value = redis.call('HGETALL', KEYS[1]) end
local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then fence = false end
local held = redis.pcall('ZCARD', KEYS[3])
if type(held) == 'table' then held = 0 end
local expired = 0
if held > 0 then expired = redis.pcall('ZCOUNT', KEYS[3], 0, ARGV[1]) end
if type(expired) == 'table' then expired = 0 end
local ids = {}
if held > 0 then ids = redis.pcall('ZRANGE', KEYS[3], 0, tonumber(ARGV[2]) - 1) end
local queued = redis.pcall('LLEN', KEYS[4])
if type(queued) == 'table' then queued = 0 end
return {kind, redis.call('PTTL', KEYS[1]), value, fence, held, expired, ids, queued}
",
    )
});

/// Who holds a lock key, as far as its value tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// The key does not exist: the lock is free.
    Absent,
    /// A string that is no timestamp: a token lock (redlease, redis-py, redsync…).
    Token(String),
    /// A legacy timestamp lock; the expiry in unix milliseconds.
    LegacyMillis(u64),
    /// A legacy timestamp lock; the expiry in unix seconds.
    LegacySeconds(u64),
    /// A reentrant hash in Redisson's layout: `(<uuid>:<thread id>, hold count)`.
    Reentrant(Vec<(String, i64)>),
    /// A semaphore in Redisson's `RPermitExpirableSemaphore` layout: permits free
    /// (the count under the key), held (in its expiry set), and of those expired
    /// (given back by the next call on it), and the ids of the permits held
    /// (the first `redlease::MAX_PERMITS`), 32 hex digits each.
    Semaphore {
        free: i64,
        held: u64,
        expired: u64,
        ids: Vec<String>,
    },
    /// A read-write lock in Redisson's `RReadWriteLock` layout: its `mode`, and
    /// `(field, hold count)` of its readers and of its writer.
    ReadWrite {
        mode: String,
        readers: Vec<(String, i64)>,
        writers: Vec<(String, i64)>,
    },
    /// Anything else: the Redis type, and the value when it is a string.
    Other {
        /// The Redis type (`string`, `list`, `hash`, …).
        kind: String,
        /// A string's value.
        value: Option<String>,
    },
}

/// What [`read`] found under a key.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// Who holds it.
    pub(crate) holder: Holder,
    /// The time left on the key (`PTTL`); `None` when absent or without a TTL.
    pub(crate) ttl: Option<Duration>,
    /// The fence counter's value, when it exists.
    pub(crate) fence: Option<String>,
    /// Callers waiting in the queue of a fair lock of that name
    /// (`redisson_lock_queue:{<key>}`, Redisson's `RFairLock` layout).
    pub(crate) queued: u64,
}

/// The fence counter's key for lock keys under `prefix`: where the library's
/// fencing takes its fences.
///
/// Today this is one counter per key prefix, `<prefix>redlease:fence` (the
/// library's private `Keys::fence()` in `src/scheme/mod.rs`). The library does not
/// expose the name and may move it: this is the one place to follow it.
pub(crate) fn fence_key(prefix: &str) -> String {
    format!("{prefix}redlease:fence")
}

/// The channel the token scheme's release publishes `released` on, to wake waiters:
/// the lock key wrapped as a Redis Cluster hash tag, `{<key>}:released`, or
/// `<key>:released` when the key already has a `{…}` hash tag or any `}`.
pub(crate) fn release_channel(key: &str) -> String {
    companion(key, "released")
}

/// The channel Redisson's `RLock`, and the library's reentrant scheme, publish
/// their unlock message `0` on: `redisson_lock__channel:{<key>}`, without the
/// braces when the key already contains a `{` (Redisson's `prefixName`).
pub(crate) fn redisson_channel(key: &str) -> String {
    if key.contains('{') {
        format!("redisson_lock__channel:{key}")
    } else {
        format!("redisson_lock__channel:{{{key}}}")
    }
}

/// An administrative connection to `url`, every call bounded by [`TIMEOUT`].
pub(crate) fn connect(url: &str) -> RedisResult<Connection> {
    connect_info(url.into_connection_info()?)
}

/// An administrative connection as `info` says, every call bounded by [`TIMEOUT`].
pub(crate) fn connect_info(info: redis::ConnectionInfo) -> RedisResult<Connection> {
    let con = redis::Client::open(info)?.get_connection_with_timeout(TIMEOUT)?;
    con.set_read_timeout(Some(TIMEOUT))?;
    con.set_write_timeout(Some(TIMEOUT))?;
    Ok(con)
}

/// Reads `key` (the full key, prefix included) and the fence counter `fence` in one
/// atomic round trip.
pub(crate) fn read(con: &mut Connection, key: &str, fence: &str) -> RedisResult<Snapshot> {
    type Reply = (
        String,
        i64,
        Value,
        Option<String>,
        u64,
        u64,
        Vec<Vec<u8>>,
        u64,
    );
    let (kind, pttl, value, fence, held, expired, ids, queued): Reply = SNAPSHOT
        .key(key)
        .key(fence)
        .key(timeouts(key))
        .key(fair_queue(key))
        .arg(now_in(1))
        .arg(redlease::MAX_PERMITS)
        .invoke(con)?;
    let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
    // A permit id is 16 raw bytes (Redisson's `decodeHexDump` of 32 hex digits).
    let ids: Vec<String> = ids
        .iter()
        .map(|id| {
            uuid::Uuid::from_slice(id).map_or_else(
                |_| String::from_utf8_lossy(id).into_owned(),
                |u| u.simple().to_string(),
            )
        })
        .collect();
    let semaphore = |free| Holder::Semaphore {
        free,
        held,
        expired,
        ids: ids.clone(),
    };
    let holder = match (kind.as_str(), value) {
        ("none", _) if held > 0 => semaphore(0),
        ("none", _) => Holder::Absent,
        ("string", Value::BulkString(v)) if is_count(&v, held) => {
            semaphore(String::from_utf8_lossy(&v).parse().unwrap_or(0))
        }
        ("string", value) => classify_string(redis::from_redis_value(value)?),
        ("hash", value) => classify_hash(&redis::from_redis_value::<Vec<String>>(value)?),
        (_, _) => Holder::Other { kind, value: None },
    };
    Ok(Snapshot {
        holder,
        ttl,
        fence,
        queued,
    })
}

/// Unix time now in `unit_ms` units (1: milliseconds, 1000: seconds).
pub(crate) fn now_in(unit_ms: u64) -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX) / unit_ms
}

/// A string value: a timestamp if it is an integer of a plausible magnitude
/// (a guess: the value does not say its unit), else a token.
fn classify_string(value: String) -> Holder {
    match value.parse::<u64>() {
        Ok(n) if (SECONDS_FROM..MILLIS_FROM).contains(&n) => Holder::LegacySeconds(n),
        Ok(n) if (MILLIS_FROM..MILLIS_UNTIL).contains(&n) => Holder::LegacyMillis(n),
        Ok(_) => Holder::Other {
            kind: "string".to_owned(),
            value: Some(value),
        },
        Err(_) => Holder::Token(value),
    }
}

/// A hash: Redisson's reentrant lock if every field is `<id>:<thread id>` with an
/// integer hold count.
fn classify_hash(flat: &[String]) -> Holder {
    if let Some(mode) = flat
        .chunks(2)
        .find(|p| p[0] == "mode")
        .and_then(|p| p.get(1))
    {
        let (mut readers, mut writers) = (Vec::new(), Vec::new());
        for pair in flat.chunks(2).filter(|p| p[0] != "mode" && p.len() == 2) {
            let held = (pair[0].clone(), pair[1].parse().unwrap_or(0));
            if pair[0].ends_with(":write") {
                writers.push(held);
            } else {
                readers.push(held);
            }
        }
        return Holder::ReadWrite {
            mode: mode.clone(),
            readers,
            writers,
        };
    }
    let owners: Option<Vec<(String, i64)>> = flat
        .chunks(2)
        .map(|pair| match pair {
            [field, count] => {
                let (id, thread) = field.rsplit_once(':')?;
                thread.parse::<u64>().ok()?;
                (!id.is_empty()).then_some(())?;
                Some((field.clone(), count.parse().ok()?))
            }
            _ => None,
        })
        .collect();
    match owners {
        Some(owners) if !owners.is_empty() => Holder::Reentrant(owners),
        _ => Holder::Other {
            kind: "hash".to_owned(),
            value: None,
        },
    }
}

/// Whether a string value is a semaphore's count: an integer, with permits held
/// or too small to be a timestamp.
fn is_count(value: &[u8], held: u64) -> bool {
    let n = String::from_utf8_lossy(value).parse::<i64>();
    n.is_ok_and(|n| held > 0 || n.unsigned_abs() < SECONDS_FROM)
}

/// A semaphore's expiry set (Redisson's `suffixName(key, "timeout")`).
/// The queue of the fair lock `key` (Redisson's `prefixName`).
fn fair_queue(key: &str) -> String {
    if key.contains('{') {
        format!("redisson_lock_queue:{key}")
    } else {
        format!("redisson_lock_queue:{{{key}}}")
    }
}

fn timeouts(key: &str) -> String {
    if key.contains('{') {
        format!("{key}:timeout")
    } else {
        format!("{{{key}}}:timeout")
    }
}

/// A name next to `key` in the same Redis Cluster slot; see [`release_channel`].
fn companion(key: &str, suffix: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if tagged || key.contains('}') {
        format!("{key}:{suffix}")
    } else {
        format!("{{{key}}}:{suffix}")
    }
}
