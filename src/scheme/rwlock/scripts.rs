//! The read-write lock's Lua scripts: Redisson's `RedissonReadLock` and
//! `RedissonWriteLock` scripts, with the changes the
//! parent module lists.
//!
//! Every key a script touches sits in the name's hash slot: KEYS[1] is the name,
//! the others are Redisson's `suffixName` of it (`{name}:…`), and the per-hold
//! timeout keys a script builds from a declared prefix are `{name}:…` too.

use std::sync::LazyLock;

use redis::Script;

use super::live::holders_tail;
use crate::scheme::redisson::owner_count;

/// The start of the acquire scripts: `mode` read, and a hash without one (a
/// reentrant `RLock`, another hash) refused without a write.
macro_rules! mode_or_refuse {
    () => {
        r"
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ERR not a read-write lock')
end
"
    };
}

/// The value of a redlease reader's timeout keys (Redisson writes `1` and reads
/// only their TTL): it says the hold honours the waiting-writer mark.
macro_rules! honours {
    () => {
        "'redlease'"
    };
}

/// Read acquire: Redisson's read `tryLockInnerAsync`, and a redlease writer's
/// waiting mark respected by new readers: for as long as it takes while that
/// lets the writer in, in turns while it cannot.
///
/// KEYS[1] the name, KEYS[2] this hold's timeout prefix
/// (`{name}:<field>:rwlock_timeout`), KEYS[3] the writer-waiting mark, KEYS[4]
/// the name's timeout prefix (`{name}`). ARGV[1] TTL in ms, ARGV[2] the reader
/// field `<uuid>:<thread>`, ARGV[3] the same thread's write field, ARGV[4] how
/// long in ms the caller has waited so far, ARGV[5] the readers' turn in ms
/// (above 0), ARGV[6] `1` when the caller waits. Returns nil when held (one more hold: a timeout key `<prefix>:<n>`
/// with the TTL and the value `redlease`, the name's TTL only lengthened), else
/// the PTTL that bounds the wait: the name's, or, while a writer waits and this
/// thread holds no read yet (a thread already reading reads again, or it would
/// wait for a writer that waits for it), the mark's. A live hold whose timeout
/// key holds another value (a Redisson reader's `1`) keeps the name read-held
/// whatever redlease readers do, so there redlease readers go in by turns: one
/// opens every ARGV[5] ms from the mark's value (the server time the writer
/// began waiting; now for a mark without one), a caller whose wait began (the
/// server's `TIME` less ARGV[4]) before the latest one opened reads, and one
/// that began after waits for the next (the reply: the shorter of the mark's
/// PTTL and the time to it). A dead reader's hold (its timeout keys run out)
/// does not count: it ends with the next release. A name a writer holds
/// answers a caller that waits as [`holders_tail`] says.
pub(crate) static READ_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &(concat!(
            // `TIME` before a write: a server older than 5.0 must be asked to
            // replicate the script's effects (later ones always do).
            "if redis.replicate_commands then redis.replicate_commands() end\n",
            mode_or_refuse!(),
            r"
local function ignored()
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local n = tonumber(flat[i + 1])
    if flat[i] ~= 'mode' and n then
      for j = n, 1, -1 do
        local v = redis.pcall('GET', KEYS[4] .. ':' .. flat[i] .. ':rwlock_timeout:' .. j)
        if type(v) == 'string' and v ~= ",
            honours!(),
            r" then return true end
      end
    end
  end
  return false
end
local mine = mode == 'read' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
if (mode == false or mode == 'read') and not mine then
  local waiting = redis.call('PTTL', KEYS[3])
  if waiting > 0 then
    if not (mode == 'read' and ignored()) then return waiting end
    local t = redis.call('TIME'); local now = t[1] * 1000 + math.floor(t[2] / 1000)
    local start = tonumber(string.match(redis.call('GET', KEYS[3]) or '', '^%d+$')) or now
    local every = tonumber(ARGV[5])
    local opened = start + math.floor((now - start) / every) * every
    if now - tonumber(ARGV[4]) >= opened then return math.min(waiting, opened + every - now) end
  end
end
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':1', ",
            honours!(),
            r", 'PX', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':' .. n, ",
            honours!(),
            r", 'PX', ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return nil
end
",
        )
        .to_owned()
            + &holders_tail("ARGV[6]")),
    )
});

/// Read release: Redisson's read `unlockInnerAsync` without its unlock latch.
///
/// KEYS[1] the name, KEYS[2] this hold's timeout prefix, KEYS[3] the name's
/// timeout prefix (`{name}`). ARGV[1] the message (`0`, Redisson's
/// `UNLOCK_MESSAGE`), ARGV[2] the reader field, ARGV[3] `PUBLISH` or `SPUBLISH`,
/// ARGV[4] the channel (an argument, not a key as in Redisson's: an ACL user
/// needs no key permission on it). Takes one hold off; when no other hold has a live timeout key (a
/// dead reader's have run out) and no writer holds, deletes the name and
/// publishes. Returns 1 + the clients reached when deleted, 1 when others still
/// hold it, 0 when this hold was gone.
pub(crate) static READ_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local mode = redis.pcall('HGET', KEYS[1], 'mode')
if type(mode) ~= 'string' then return 0 end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return 0 end
local counter = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
if counter == 0 then redis.call('HDEL', KEYS[1], ARGV[2]) end
redis.call('DEL', KEYS[2] .. ':' .. (counter + 1))
if redis.call('HLEN', KEYS[1]) > 1 then
  local remain = -3
  for _, key in ipairs(redis.call('HKEYS', KEYS[1])) do
    local n = tonumber(redis.call('HGET', KEYS[1], key))
    if type(n) == 'number' then
      for i = n, 1, -1 do
        remain = math.max(remain, redis.call('PTTL', KEYS[3] .. ':' .. key .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if remain > 0 then
    redis.call('PEXPIRE', KEYS[1], remain)
    return 1
  end
  if mode == 'write' then return 1 end
end
redis.call('DEL', KEYS[1])
local heard = redis.pcall(ARGV[3], ARGV[4], ARGV[1])
if type(heard) ~= 'number' then heard = 0 end
return 1 + heard
",
    )
});

/// Read renewal: Redisson's read `renewExpirationAsync` for this holder's holds.
///
/// KEYS[1] the name, KEYS[2] this holder's timeout prefix. ARGV[1] TTL in ms,
/// ARGV[2] the reader field. Sets every timeout key of the holder to the TTL
/// (value `redlease`, as the acquire writes it) and lengthens the name's. Returns
/// 1 renewed, 0 this holder's holds are gone, -1 the name holds another type.
pub(crate) static READ_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        r"
local count = redis.pcall('HGET', KEYS[1], ARGV[2])
if type(count) == 'table' then return -1 end
if not count then return 0 end
for i = tonumber(count), 1, -1 do
  redis.call('SET', KEYS[2] .. ':' .. i, ",
        honours!(),
        r", 'PX', ARGV[1])
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
",
    ))
});

/// Write acquire: Redisson's write `tryLockInnerAsync`; a reader of the same
/// thread refused, and a waiting writer's mark.
///
/// KEYS[1] the name, KEYS[2] the writer-waiting mark. ARGV[1] TTL in ms, ARGV[2]
/// the write field `<uuid>:<thread>:write`, ARGV[3] the same thread's reader
/// field, ARGV[4] `1` when the caller waits, ARGV[5] the mark's TTL in ms.
/// Returns nil when held (a first hold deletes the mark; one more hold only
/// lengthens the TTL), `upgrade` when this thread holds a read, else the name's
/// PTTL, after setting the mark for a caller that waits: its value the server
/// time in ms the first writer of this wait began (kept while the mark lasts:
/// the readers' turns count from it), its TTL ARGV[5]. A name held by others
/// answers a caller that waits as [`holders_tail`] says.
pub(crate) static WRITE_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &(concat!(
            "if redis.replicate_commands then redis.replicate_commands() end\n",
            mode_or_refuse!(),
            r"
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
  return nil
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return nil
end
if mode == 'read' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
  return redis.status_reply('upgrade')
end
if ARGV[4] == '1' then
  local start = string.match(redis.call('GET', KEYS[2]) or '', '^%d+$')
  local t = not start and redis.call('TIME')
  if t then start = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)) end
  redis.call('SET', KEYS[2], start, 'PX', ARGV[5])
end
",
        )
        .to_owned()
            + &holders_tail("ARGV[4]")),
    )
});

/// Write release: Redisson's write `unlockInnerAsync` without its unlock latch.
///
/// KEYS[1] the name. ARGV[1] the message (`1`, Redisson's `READ_UNLOCK_MESSAGE`),
/// ARGV[2] the write field, ARGV[3] `PUBLISH` or `SPUBLISH`, ARGV[4] the channel. Takes one hold off; the last deletes the name, or leaves it in
/// read mode for this thread's reads, and publishes either way (readers may
/// join then). Returns 1 + the clients reached when the write hold ended, 1 for
/// a hold taken off with more left, 0 gone, -1 another holder's.
pub(crate) static WRITE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local mode = redis.pcall('HGET', KEYS[1], 'mode')
if type(mode) == 'table' then return -1 end
if mode == false then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  return -1
end
if mode ~= 'write' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return -1 end
if redis.call('HINCRBY', KEYS[1], ARGV[2], -1) > 0 then return 1 end
redis.call('HDEL', KEYS[1], ARGV[2])
if redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
local heard = redis.pcall(ARGV[3], ARGV[4], ARGV[1])
if type(heard) ~= 'number' then heard = 0 end
return 1 + heard
",
    )
});

/// Write renewal: `RedissonLock`'s renewal for the write field.
///
/// KEYS[1] the name. ARGV[1] the write field, ARGV[2] TTL in ms. Returns 1
/// renewed (the TTL only lengthened), 0 gone, -1 another holder's.
pub(crate) static WRITE_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        owner_count!(),
        r"if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
",
    ))
});
