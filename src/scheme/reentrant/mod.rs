//! The reentrant scheme: Redisson's `RLock`, field for field.
//!
//! The lock key is a hash with one field per owner, `<client uuid>:<thread id>`,
//! whose value is the owner's hold count, and a `PEXPIRE` on the key. The owner
//! that holds it may lock again (one more hold); another owner, another thread of
//! the same client included, waits. The last unlock deletes the key and publishes
//! `0` on `redisson_lock__channel:{<key>}`, Redisson's unlock message, on which
//! both Redisson's waiters and ours listen. This layout has been Redisson's since
//! 2.7.0 / 3.2.0 (2016) and still is in 3.x and 4.x.
//!
//! Where these scripts differ from Redisson's, no Redisson client can tell:
//! - a key of another type (a token lock's string) is someone else's lock, never
//!   an error (`redis.pcall`);
//! - with more than one hold, neither an acquire nor a renewal ever shortens the
//!   key's TTL (each hold's guard counts on its own TTL), and an unlock above zero
//!   leaves the TTL alone (the remaining holds are renewed by their own guards);
//! - a fencing token is taken (from the same counter as the other schemes)
//!   by the outermost acquisition only; nested holds carry its fence (`fences`).
//!   A fenced hold of a key this client saw no fenced hold of takes one of its own,
//!   even when Redis counts it as nested (a hold left by a lost acquire reply).
//!
//! The scripts live in this file: they are this wire format.
//!
//! Layout: this file is the backend and its scripts; `fences.rs` the fences of this
//! client's outermost holds; `ticket.rs` the adoption of a ticket's hold.

use std::sync::LazyLock;

mod fences;
pub(crate) mod ticket;

use fences::Fences;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::bulk::REENTRANT_BULK_EXTEND as BULK;
use super::redisson::{owner, owner_count, prefix_name};
use super::token::busy;
use super::token::live::{LIVE_FIELD, look_at};
use super::{
    Acquire, Announce, Backend, Freed, Keys, Request, Waiting, fixed_extend_cmd, send_acquire,
    with_scripts,
};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::{ClientId, ClientTag};
use crate::scheme::token::scripts::{EFFECTS, FENCE, session_pttl};
use crate::time::ttl_millis;

/// Redisson's unlock channel prefix (`RedissonLock.getChannelName`).
const CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// Reentrant acquire.
///
/// KEYS[1] lock key, KEYS[2] fence counter (only with a fence). ARGV[1] TTL in ms,
/// ARGV[2] owner field (Redisson's order), ARGV[3] `1` to take a fencing token for
/// a first hold, `2` to take one for any hold (the client knows no fence of an
/// outer hold: one Redis counts may be left by an acquire whose reply was lost),
/// `0` for none. Returns, as Redisson's does, nil for a first hold and the key's
/// PTTL when another owner, or a value of another type, holds it (`HEXISTS` on
/// another type is an error, which `pcall` returns as a table: not 1); `{fence}`
/// for a hold that took a fence, and `{}` for one more hold; with ARGV[4] `1` (the
/// caller will wait), `{pttl, field}` for a busy key whose one owner field names a
/// client that declared liveness ([`LIVE_FIELD`]), for the look at its session
/// ([`BREAK`]). A first hold sets the TTL;
/// one more only lengthens it. The fence is the one every scheme takes
/// ([`FENCE`]); a failed one (an ACL that denies a command of it) deletes the
/// first hold again before the error is returned: a script is not rolled back.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}
if redis.call('EXISTS', KEYS[1]) == 1 and redis.pcall('HEXISTS', KEYS[1], ARGV[2]) ~= 1 then
  local t = redis.call('PTTL', KEYS[1])
  if ARGV[4] == '1' then
    local f = redis.pcall('HKEYS', KEYS[1])
    if type(f) == 'table' and #f == 1 and string.find(f[1], '{live}') then return {{t, f[1]}} end
  end
  return t
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if count == 1 or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
if count > 1 and ARGV[3] ~= '2' then return {{}} end
if ARGV[3] == '0' then return nil end
local fence
{FENCE}
if type(fence) == 'table' then
  if count > 1 then redis.call('HINCRBY', KEYS[1], ARGV[2], -1) else redis.call('DEL', KEYS[1]) end
  return fence
end
return {{fence}}
",
        live = *LIVE_FIELD
    ))
});

/// Breaks the lock of a holder whose liveness session ended.
///
/// KEYS[1] lock key, KEYS[2] the holder's session record. ARGV[1] the holder's
/// owner field as the acquire read it, ARGV[2] Redisson's unlock channel.
/// Returns `{-2, 0}` the key is gone, `{-3, 0}` it holds another owner now (or
/// several), `{-4, 0}` the record was gone: the key is deleted and Redisson's
/// unlock message published (its waiters and ours wake), and `{pttl,
/// session_pttl}` while the record lives (as the token's break answers).
static BREAK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        session_pttl!(),
        r"
local f = redis.pcall('HKEYS', KEYS[1])
if type(f) ~= 'table' or #f == 0 then return {-2, 0} end
if #f ~= 1 or f[1] ~= ARGV[1] then return {-3, 0} end
local s = session_pttl(KEYS[1], KEYS[2])
if s == -2 then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[2], 0)
  return {-4, 0}
end
return {redis.call('PTTL', KEYS[1]), s}
",
    ))
});

/// Reentrant unlock: one hold fewer; at zero, delete and publish Redisson's unlock
/// message.
///
/// KEYS[1] lock key. ARGV[1] owner field, ARGV[2] release channel. Returns 1 + the
/// clients the message reached when the key was deleted, 1 for a hold taken off
/// with more left, 0 the key was gone, -1 another owner or another type holds it
/// (left untouched). The last hold deletes the key without decrementing it first.
/// The `PUBLISH` is a `pcall`: a user without channel permissions has released
/// the lock all the same.
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&release_source().replace("SPUBLISH", "PUBLISH")));

/// [`RELEASE`] publishing with `SPUBLISH`, as Redisson 3.22+ does on a Redis 7
/// cluster: the message stays in the key's shard.
static RELEASE_SHARDED: LazyLock<Script> = LazyLock::new(|| Script::new(&release_source()));

fn release_source() -> String {
    concat!(
        owner_count!(),
        r"if tonumber(count) > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 1
end
redis.call('DEL', KEYS[1])
local heard = redis.pcall('SPUBLISH', ARGV[2], 0)
if type(heard) ~= 'number' then heard = 0 end
return 1 + heard
",
    )
    .to_owned()
}

/// Reentrant extend (also the renewal): `PEXPIRE` while the owner holds the key.
///
/// KEYS[1] lock key. ARGV[1] owner field, ARGV[2] TTL in ms. Returns 1 extended, 0
/// gone, -1 another owner or another type. With one hold the TTL is set as asked;
/// with more it is only lengthened, so no hold's validity outlives the key.
pub(super) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        owner_count!(),
        r"if tonumber(count) <= 1 or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
",
    ))
});

static SCRIPTS: [&LazyLock<Script>; 6] =
    [&ACQUIRE, &RELEASE, &RELEASE_SHARDED, &EXTEND, &BULK, &BREAK];

/// The reentrant scheme's commands, for one client.
#[derive(Debug)]
pub(crate) struct ReentrantBackend {
    /// The client's id: the first half of every owner field it writes.
    client: String,
    fences: Fences,
    /// Where to count the locks of dead liveness sessions its waiters broke.
    broken: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ReentrantBackend {
    /// The backend of the client `id`, whose UUID its owner fields carry.
    pub(crate) fn new(id: &ClientId) -> Self {
        Self {
            client: id.hyphenated(),
            fences: Fences::default(),
            broken: std::sync::Arc::clone(id.broken()),
        }
    }

    /// The calling thread's owner field, `<client uuid>:<thread id>`.
    fn owner(&self) -> String {
        owner(&self.client)
    }
}

impl Backend for ReentrantBackend {
    /// The calling thread's owner field. The lease keeps it, so a guard moved to
    /// another thread still unlocks its own hold.
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(self.owner())
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        // The fence counter is named only when a fence is asked for.
        let fence = req.fence.then(|| keys.fence());
        // A fenced hold of a key this client holds no fenced hold of takes a fence
        // even when Redis counts it as nested: the hold Redis counts may be one an
        // earlier acquire left after its reply was lost, whose fence nobody saw.
        let mode = match (req.fence, self.fences.known(&keys.lock, value)) {
            (false, _) => "0",
            (true, Some(_)) => "1",
            (true, None) => "2",
        };
        let mut args = vec![
            Arg::from("EVALSHA"),
            ACQUIRE.get_hash().into(),
            (if req.fence { 2 } else { 1 }).into(),
            keys.lock.as_str().into(),
        ];
        args.extend(fence.as_deref().map(Arg::from));
        let wait = if req.wait == Waiting::No { "0" } else { "1" };
        args.extend::<[Arg<'_>; 4]>([
            ttl_millis(req.ttl).into(),
            value.into(),
            mode.into(),
            wait.into(),
        ]);
        let (reply, acked) = send_acquire(conn, &SCRIPTS, &args, req.replicas)?;
        let fence = match reply {
            Value::Int(pttl) => return Ok(busy(pttl)),
            // A waiter is told a holder that declared liveness: a dead one's
            // lock is broken (see `token::live`).
            Value::Array(a) if a.len() == 2 && matches!(a[1], Value::BulkString(_)) => {
                let (pttl, field): (i64, String) = redis::from_redis_value(Value::Array(a))?;
                let tag = ClientTag::of_field(&field);
                let look = tag.map(|tag| {
                    look_at(
                        conn,
                        keys,
                        tag,
                        false,
                        Some(&self.broken),
                        &SCRIPTS,
                        |c, session| {
                            BREAK
                                .key(&keys.lock)
                                .key(session)
                                .arg(&field)
                                .arg(&keys.channel)
                                .invoke(c)
                        },
                    )
                });
                return Ok(look.transpose()?.flatten().unwrap_or_else(|| busy(pttl)));
            }
            Value::Nil => {
                self.fences.first(&keys.lock, value, None);
                None
            }
            Value::Array(a) if a.is_empty() => {
                let outermost = self.fences.nested(&keys.lock, value);
                outermost.filter(|_| req.fence)
            }
            fenced => {
                let (fence,): (i64,) = redis::from_redis_value(fenced)?;
                let fence = u64::try_from(fence).unwrap_or(0);
                self.fences.first(&keys.lock, value, Some(fence));
                Some(fence)
            }
        };
        Ok(Acquire::Acquired { fence, acked })
    }

    fn release(
        &self,
        conn: &mut Conn,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        _maybe: &[String],
    ) -> RedisResult<Freed> {
        // The owner field never changes, so there is never another value to accept.
        // Redisson's release always publishes: its waiters mark nothing.
        let script = if conn.sharded() {
            &RELEASE_SHARDED
        } else {
            &RELEASE
        };
        let n = with_scripts(conn, &SCRIPTS, |c| {
            c.run(|c| {
                script
                    .key(key)
                    .arg(value)
                    .arg(announce.channel)
                    .invoke::<i64>(c)
            })
        });
        // Released, found gone, or not known: the guard holding it is done with it.
        self.fences.ended(key, value);
        Ok(Freed::from_reply(n?))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        fixed_extend_cmd(&EXTEND, key, value, ttl)
    }

    fn bulk_extend(&self) -> Option<&'static LazyLock<Script>> {
        Some(&BULK)
    }

    fn publishes(&self) -> bool {
        true
    }

    /// Redisson's `prefixName`: the key in braces (its own hash tag, so the channel
    /// hashes to the key's slot), or as it is when it already contains a `{`.
    fn channel(&self, lock: &str) -> String {
        prefix_name(CHANNEL_PREFIX, lock)
    }

    fn reentrant(&self) -> bool {
        true
    }

    /// The adopted hold is this owner's outermost: nested holds carry its fence.
    fn adopted(&self, key: &str, value: &str, fence: Option<u64>) {
        self.fences.first(key, value, fence);
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }

    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("the reentrant scheme (only the outermost unlock frees the key)")
    }

    fn label(&self) -> &'static str {
        "reentrant"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_follow_redissons_prefix_name() {
        let b = ReentrantBackend::new(&ClientId::new());
        assert_eq!(b.channel("lock:a"), "redisson_lock__channel:{lock:a}");
        assert_eq!(b.channel("lock:{a}"), "redisson_lock__channel:lock:{a}");
        // Redisson looks for a `{` only, however the braces pair.
        assert_eq!(b.channel("a{b"), "redisson_lock__channel:a{b");
        assert_eq!(b.channel("a}b"), "redisson_lock__channel:{a}b}");
    }

    #[test]
    fn the_owner_is_the_client_and_a_stable_number_per_thread() {
        let b = std::sync::Arc::new(ReentrantBackend::new(&ClientId::new()));
        let here = b.owner();
        assert_eq!(here, b.owner(), "stable on one thread");
        let (client, n) = here.rsplit_once(':').unwrap();
        assert!(uuid::Uuid::parse_str(client).is_ok(), "{client}");
        assert!(n.parse::<u64>().unwrap() >= 1);
        let another = ReentrantBackend::new(&ClientId::new()).owner();
        assert_ne!(
            another.rsplit_once(':').unwrap().0,
            client,
            "one id per client"
        );
        let other = std::sync::Arc::clone(&b);
        let there = std::thread::spawn(move || other.owner()).join().unwrap();
        assert_ne!(here, there, "another thread is another owner");
        assert!(b.reentrant() && b.publishes() && !b.hands_over());
    }
}
