//! The read-write lock's holders whose liveness session ended: a caller that
//! found the name held and will wait is told, by the acquire script, every
//! holder field that names a client that declared liveness (a version 8 UUID,
//! [`LIVE_FIELD`]); it looks at each such client's session record once per
//! session period ([`look_at`]), and [`BREAK`] removes that client's holds once
//! its record is gone: a dead writer's hold (with its thread's reads), or the
//! dead readers' holds among live ones.
//!
//! Fields of Redisson's Java clients (version 4 UUIDs), of redlease clients
//! without liveness, and of clients whose record exists are never touched; in a
//! Redis Cluster the record is in another slot, and every hold is left to its
//! TTL.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::RW_SCRIPTS;
use crate::net::connection::Conn;
use crate::owner::ClientTag;
use crate::scheme::redisson::{publish_cmd, suffix_name, unexpected};
use crate::scheme::token::live::{LIVE_FIELD, look_at};
use crate::scheme::token::scripts::session_pttl;
use crate::scheme::token::{busy, remaining};
use crate::scheme::{Acquire, Keys};

/// The end of an acquire script that found the name held by others: the
/// name's PTTL, or, when `waits` (a Lua expression) is `'1'` and some holder
/// field names a client that declared liveness (a writer's `…:write` too),
/// `{pttl, field, …}` with every such field.
pub(super) fn holders_tail(waits: &str) -> String {
    format!(
        r"local t = redis.call('PTTL', KEYS[1])
if {waits} ~= '1' then return t end
local live = {{t}}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local base = string.gsub(f, ':write$', '')
  if string.find(base, '{pattern}') then table.insert(live, f) end
end
if #live == 1 then return t end
return live
",
        pattern = *LIVE_FIELD
    )
}

/// Removes the holds of one client whose liveness session ended.
///
/// KEYS[1] the name, KEYS[2] the client's session record, KEYS[3] the name's
/// timeout prefix (`{name}`). ARGV[1] `PUBLISH` or `SPUBLISH`, ARGV[2] the
/// channel, ARGV[3..] the client's fields as the acquire read them. The record
/// is read as every break reads it (`session_pttl`: under every prefix the
/// name allows, when gone under the caller's). Returns
/// `{-2, 0}` the name is gone, `{-3, 0}` none of those fields is there any
/// more (or the name is not a read-write lock), `{pttl, session_pttl}` while
/// the record lives, and `{-4, 0}` when it was gone: each of those fields still
/// there is deleted with its timeout keys, then the name is recomputed as
/// Redisson's unlocks do. A writer's hold gone, the name is deleted when
/// nothing is left (or set to `read` for the reads left) and `1` published, as
/// a write unlock does; readers' holds gone, the name's TTL becomes the longest
/// of the holds left (as a read unlock sets it), or, when no hold is left, the
/// name is deleted and `0` published. Unlike a read unlock, the name is never
/// deleted while fields of others are left (their holds end with their TTL or
/// their owners' unlocks).
pub(super) static BREAK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        session_pttl!(),
        r"
local mode = redis.pcall('HGET', KEYS[1], 'mode')
if type(mode) ~= 'string' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, 0} end
  return {-3, 0}
end
local dead = {}
for i = 3, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then table.insert(dead, ARGV[i]) end
end
if #dead == 0 then return {-3, 0} end
local s = session_pttl(KEYS[1], KEYS[2])
if s ~= -2 then return {redis.call('PTTL', KEYS[1]), s} end
local wrote = false
for _, f in ipairs(dead) do
  if string.sub(f, -6) == ':write' then
    wrote = true
  else
    local n = tonumber(redis.call('HGET', KEYS[1], f)) or 0
    for i = n, 1, -1 do redis.call('DEL', KEYS[3] .. ':' .. f .. ':rwlock_timeout:' .. i) end
  end
  redis.call('HDEL', KEYS[1], f)
end
if redis.call('HLEN', KEYS[1]) > 1 then
  if wrote then
    redis.call('HSET', KEYS[1], 'mode', 'read')
    redis.pcall(ARGV[1], ARGV[2], 1)
    return {-4, 0}
  end
  local remain = -3
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local n = tonumber(flat[i + 1])
    if flat[i] ~= 'mode' and n then
      for j = n, 1, -1 do
        remain = math.max(remain, redis.call('PTTL', KEYS[3] .. ':' .. flat[i] .. ':rwlock_timeout:' .. j))
      end
    end
  end
  if remain > 0 then redis.call('PEXPIRE', KEYS[1], remain) end
  return {-4, 0}
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[1], ARGV[2], wrote and 1 or 0)
return {-4, 0}
",
    ))
});

/// An acquire's busy reply `reply` (`{pttl, field, …}` from [`holders_tail`])
/// as the wait it allows: each client the fields name that declared liveness
/// is looked at (see [`look_at`]), its holds broken when its session ended
/// (counted in `broken`; the caller then tries again at once). Any other reply
/// is not a busy one: `None`.
pub(super) fn look(
    conn: &mut Conn,
    keys: &Keys,
    reply: &Value,
    broken: &AtomicU64,
) -> RedisResult<Option<Acquire>> {
    let Value::Array(items) = reply else {
        return Ok(None);
    };
    let Some(Value::Int(pttl)) = items.first() else {
        return Err(unexpected("read-write lock acquire", reply));
    };
    let fields: Vec<String> = redis::from_redis_value(Value::Array(items[1..].to_vec()))?;
    let mut clients: Vec<(ClientTag, Vec<&str>)> = Vec::new();
    for field in &fields {
        let Some(tag) = ClientTag::of_field(field) else {
            continue;
        };
        match clients.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, of)) => of.push(field),
            None => clients.push((tag, vec![field])),
        }
    }
    let publish = publish_cmd(conn);
    let base = suffix_name(&keys.lock, "");
    // The lock's own end bounds the wait; a look bounds it by its session's.
    let mut wait = remaining(*pttl);
    let mut looked_any = false;
    for (tag, of) in clients {
        let looked = look_at(
            conn,
            keys,
            tag,
            false,
            Some(broken),
            &RW_SCRIPTS,
            |c, session| {
                let mut call = BREAK.key(&keys.lock);
                call.key(session).key(&base).arg(publish).arg(&keys.channel);
                for field in &of {
                    call.arg(*field);
                }
                call.invoke::<(i64, i64)>(c)
            },
        )?;
        let Some(Acquire::Busy { remaining, .. }) = looked else {
            continue;
        };
        // Broken, or the holds changed: the next attempt reads them again.
        if remaining == Some(Duration::ZERO) {
            return Ok(looked);
        }
        looked_any = true;
        wait = match (wait, remaining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(Some(if looked_any {
        Acquire::Busy {
            remaining: wait,
            announces: false,
        }
    } else {
        busy(*pttl)
    }))
}
