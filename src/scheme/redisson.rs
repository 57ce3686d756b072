//! Redisson's naming and ids, shared by every scheme that speaks one of its
//! formats (reentrant, fair, read-write, semaphore): `prefixName` and
//! `suffixName`, the owner id `<client uuid>:<thread id>`, the unix clock of its
//! scores, its publish verb, and the Lua fragments the formats repeat.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::{ErrorKind, RedisError, Value};

use super::Conn;

/// Numbers this process's threads: a thread's number is drawn on its first use
/// of any Redisson format and kept for its life, as Redisson uses Java's thread
/// id. One counter for every format, so that one thread of one client is one
/// owner in its locks, read-write locks and fair locks alike.
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's number, the second half of its owner ids.
pub(crate) fn thread_id() -> u64 {
    THREAD.with(|t| *t)
}

/// The calling thread's owner id for the client whose UUID is `client`:
/// `<client uuid>:<thread id>`, the hash field Redisson's formats store.
pub(crate) fn owner(client: &str) -> String {
    // Sized once: `format!` would grow the string on every lock.
    let mut owner = String::with_capacity(client.len() + 21);
    owner.push_str(client);
    let _ = write!(owner, ":{}", thread_id());
    owner
}

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, the name in braces
/// (its own hash tag, so the result hashes to the name's slot), or `prefix:name`
/// when the name holds a `{` (Redisson looks for a `{` only, however the braces
/// pair).
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + name.len() + 3);
    out.push_str(prefix);
    out.push(':');
    push_tagged(&mut out, name);
    out
}

/// Redisson's `suffixName(name, suffix)`: `{name}:suffix` (`name:suffix` when the
/// name holds a `{`), a key in the name's slot; with an empty suffix, the
/// tagged name itself.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(name.len() + suffix.len() + 3);
    push_tagged(&mut out, name);
    if !suffix.is_empty() {
        out.push(':');
        out.push_str(suffix);
    }
    out
}

/// The unix time in ms: the clock of Redisson's scores (fair-queue deadlines,
/// permit expiries).
pub(crate) fn now_millis() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `PUBLISH`, or `SPUBLISH` on a connection to a cluster with sharded pub/sub
/// (Redisson's `getPublishCommand`).
pub(crate) fn publish_cmd(conn: &Conn) -> &'static str {
    publish_verb(conn.sharded())
}

/// `SPUBLISH` when `sharded`, else `PUBLISH`.
pub(crate) fn publish_verb(sharded: bool) -> &'static str {
    if sharded { "SPUBLISH" } else { "PUBLISH" }
}

/// The error for a script reply that `what`'s scripts never give.
pub(crate) fn unexpected(what: &str, reply: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "unexpected reply",
        format!("{what}: {reply:?}"),
    ))
}

/// `name` in braces, or as it is when it holds a `{`.
fn push_tagged(out: &mut String, name: &str) {
    if name.contains('{') {
        out.push_str(name);
    } else {
        out.push('{');
        out.push_str(name);
        out.push('}');
    }
}

/// The start of a script on an owner's hash (KEYS[1] the hash, ARGV[1] the
/// owner field): the owner's hold count in `count`, or the reply 0 for a key
/// that is gone and -1 for one another owner, or a value of another type, holds.
macro_rules! owner_count {
    () => {
        r"
local count = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(count) == 'table' then return -1 end
if not count then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  return -1
end
"
    };
}
pub(crate) use owner_count;

/// A semaphore script's reclaim of expired permits (KEYS[1] the count, KEYS[2]
/// the expiry set, the count read into `value`): members scored up to `$now`
/// are taken out and counted back, and the count, when above zero, published
/// with `$verb` (`PUBLISH` or `SPUBLISH`) on `$channel`, as Redisson does. The
/// arguments are the Lua expressions that hold them (`"ARGV[2]"`).
macro_rules! reclaim_expired {
    ($now:literal, $channel:literal, $verb:literal) => {
        concat!(
            "local expired = redis.call('ZRANGEBYSCORE', KEYS[2], 0, ",
            $now,
            ")\nif #expired > 0 then\n",
            "  redis.call('ZREM', KEYS[2], unpack(expired))\n",
            "  value = redis.call('INCRBY', KEYS[1], #expired)\n",
            "  if value > 0 then redis.pcall(",
            $verb,
            ", ",
            $channel,
            ", value) end\nend\n",
        )
    };
}
pub(crate) use reclaim_expired;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_prefix_and_suffix_rules() {
        assert_eq!(prefix_name("redisson_sc", "jobs"), "redisson_sc:{jobs}");
        assert_eq!(prefix_name("redisson_sc", "a:{b}"), "redisson_sc:a:{b}");
        // Redisson looks for a `{` only, however the braces pair.
        assert_eq!(prefix_name("p", "a{b"), "p:a{b");
        assert_eq!(prefix_name("p", "a}b"), "p:{a}b}");
        assert_eq!(suffix_name("jobs", "timeout"), "{jobs}:timeout");
        assert_eq!(suffix_name("a:{b}", "timeout"), "a:{b}:timeout");
        assert_eq!(suffix_name("cfg", ""), "{cfg}");
        assert_eq!(suffix_name("a{b}", ""), "a{b}");
    }

    #[test]
    fn an_owner_is_the_client_and_one_number_per_thread() {
        let here = owner("c0ffee");
        assert_eq!(here, owner("c0ffee"), "stable on one thread");
        assert_eq!(here, format!("c0ffee:{}", thread_id()));
        assert_eq!(
            owner("beef").rsplit_once(':'),
            here.rsplit_once(':').map(|(_, n)| ("beef", n))
        );
        let there = std::thread::spawn(|| owner("c0ffee")).join().unwrap();
        assert_ne!(here, there, "another thread is another owner");
    }

    #[test]
    fn the_reclaim_fragment_reads_its_arguments() {
        let lua = reclaim_expired!("ARGV[2]", "ARGV[4]", "ARGV[5]");
        assert!(
            lua.starts_with("local expired = redis.call('ZRANGEBYSCORE', KEYS[2], 0, ARGV[2])\n")
        );
        assert!(lua.contains("redis.pcall(ARGV[5], ARGV[4], value)"));
    }
}
