//! The Lua of partition groups (see the folder's `mod.rs` for the keys). Each
//! script runs atomically on the group's one server (one cluster slot), and
//! reads the time from that server's clock (`TIME`, in ms), so no two hosts'
//! clocks are ever compared.

use std::sync::LazyLock;

use redis::Script;

use crate::scheme::token::scripts::EFFECTS;

/// The server's time in ms, in the script's local `now`.
const NOW: &str = "
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
";

/// A member's round: its record written (or deleted, or left alone), and what
/// every member needs to compute the same assignment read in the same step.
///
/// KEYS[1] the members hash, KEYS[2] the asks hash, KEYS[3..] every partition's
/// lock in order. ARGV[1] the member id, ARGV[2] the record's TTL in ms, ARGV[3]
/// the record's body, ARGV[4] `beat` (write the record; drop expired records and
/// the asks of members that are gone), `leave` (delete the record and the
/// member's asks, drop as `beat` does) or `read` (write nothing).
///
/// Returns `{members, ttls, asks, values}`: each live record as `{id, ms left,
/// body}`; each partition lock's `PTTL` (-2 free) when reading, or -2 free / -1
/// held for a member's round (one `MGET`: a member needs no more); each ask of
/// a live member as `{partition, id, ms to its deadline}`; when reading, each
/// partition lock's value (its token, which names the holder's client; nil
/// when free or not a string), else empty.
pub(crate) static ROUND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}{NOW}
local mode = ARGV[4]
if mode == 'beat' then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[2])) .. '\t' .. ARGV[3])
elseif mode == 'leave' then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
local members, live = {{}}, {{}}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local v = all[i + 1]
  local tab = string.find(v, '\t', 1, true)
  local expiry = tab and tonumber(string.sub(v, 1, tab - 1)) or 0
  if expiry > now then
    members[#members + 1] = {{all[i], string.format('%.0f', expiry - now), string.sub(v, tab + 1)}}
    live[all[i]] = true
  elseif mode ~= 'read' then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
local ttls, values = {{}}, {{}}
if mode == 'read' then
  for i = 3, #KEYS do ttls[#ttls + 1] = redis.call('PTTL', KEYS[i]) end
  -- MGET, not GET: a key of another type reads as nil instead of failing the script.
  if #KEYS > 2 then values = redis.call('MGET', unpack(KEYS, 3)) end
elseif #KEYS > 2 then
  -- A member needs only free or held: one MGET, not a PTTL per partition.
  local values = redis.call('MGET', unpack(KEYS, 3))
  for i = 1, #KEYS - 2 do
    if values[i] then ttls[i] = -1 else ttls[i] = -2 end
  end
end
local asks = {{}}
local raw = redis.call('HGETALL', KEYS[2])
for i = 1, #raw, 2 do
  local v = raw[i + 1]
  local tab = string.find(v, '\t', 1, true)
  local by = tab and string.sub(v, 1, tab - 1) or ''
  if live[by] then
    local deadline = tonumber(string.sub(v, tab + 1)) or 0
    asks[#asks + 1] = {{raw[i], by, string.format('%.0f', deadline - now)}}
  elseif mode ~= 'read' then
    redis.call('HDEL', KEYS[2], raw[i])
  end
end
return {{members, ttls, asks, values}}
"
    ))
});

/// Asks for partitions: KEYS[1] the asks hash; ARGV[1] the member id, ARGV[2]
/// the grace in ms, ARGV[3..] the partitions. An ask already there (the
/// caller's or another member's) is kept with its deadline. Returns how many
/// asks were written.
pub(crate) static ASK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}{NOW}
local n = 0
for i = 3, #ARGV do
  n = n + redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[1] .. '\t' .. string.format('%.0f', now + tonumber(ARGV[2])))
end
return n
"
    ))
});

/// Withdraws asks: KEYS[1] the asks hash; ARGV[1] the member id, ARGV[2..] the
/// partitions. Only the caller's own asks are deleted. Returns how many.
pub(crate) static CLEAR: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = 0
local mine = ARGV[1] .. '\t'
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.sub(v, 1, #mine) == mine then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
",
    )
});

/// Takes a partition from an owner that did not give it up in time: KEYS[1] the
/// asks hash, KEYS[2] the partition's lock; ARGV[1] the member id, ARGV[2] the
/// partition. Deletes the lock when the caller's ask for it has passed its
/// deadline (the owner's renewal then finds it gone, and the next holder's
/// fence is higher than the owner's). Returns 1 when deleted, else 0.
pub(crate) static FORCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{EFFECTS}{NOW}
local v = redis.call('HGET', KEYS[1], ARGV[2])
local mine = ARGV[1] .. '\t'
if v and string.sub(v, 1, #mine) == mine and (tonumber(string.sub(v, #mine + 1)) or 0) <= now then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"
    ))
});

/// The scripts a partition group's calls may need loaded.
pub(crate) static PARTITION_SCRIPTS: [&LazyLock<Script>; 4] = [&ROUND, &ASK, &CLEAR, &FORCE];
