//! What a read-write lock's name holds, read-only: for the typed error of a
//! name of another format and for `inspect`.

use std::sync::LazyLock;

use redis::Script;

/// What a name holds, read-only: `{type, mode, pttl, writers, readers}` with the
/// holder fields and counts flattened (`{field, count, …}`), for the typed error
/// of a name of another format and for `inspect`.
///
/// KEYS[1] the name.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1])['ok']
local mode = false
local writers, readers = {}, {}
if kind == 'hash' then
  mode = redis.call('HGET', KEYS[1], 'mode')
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f ~= 'mode' then
      if string.sub(f, -6) == ':write' then
        table.insert(writers, f); table.insert(writers, flat[i + 1])
      else
        table.insert(readers, f); table.insert(readers, flat[i + 1])
      end
    end
  end
end
return {kind, mode, redis.call('PTTL', KEYS[1]), writers, readers}
",
    )
});
