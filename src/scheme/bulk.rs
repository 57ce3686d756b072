//! Renewal of many leases in one script call, for the schemes whose value never
//! changes (token, reentrant): the renewal batch sends one call per chunk of
//! leases instead of one per lease, and Redis runs one script instead of many.
//!
//! Every bulk script takes KEYS[1..n] the lock keys, ARGV[1] the TTL in ms (one for
//! the call: the batch groups leases by TTL), ARGV[1 + i] the value of KEYS[i], and
//! returns an array of n replies, the i-th what the scheme's own extend script
//! would have answered for KEYS[i] alone (1 extended, 0 gone, -1 someone else's).
//! Each key is compared and extended on its own, as by that script, inside one
//! atomic call: a lease whose value changed is reported as such, the others are
//! renewed. In a cluster every key of one call must hash to one slot; the batch
//! groups them so. The scripts define no functions (a closure made on every call)
//! and build no string unless a value differs from the one expected.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::time::ttl_millis;

/// [`TOKEN_EXTEND`](crate::scripts::TOKEN_EXTEND) for many keys: the value may carry
/// a waiter's mark (`<token>+`) and is left as it is.
pub(crate) static TOKEN_BULK_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local ms = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  local want = ARGV[i + 1]
  if v == want then
    redis.call('PEXPIRE', KEYS[i], ms)
    out[i] = 1
  elseif v == false then
    out[i] = 0
  elseif type(v) == 'string' and v == want .. '+' then
    redis.call('PEXPIRE', KEYS[i], ms)
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
",
    )
});

/// The reentrant scheme's extend for many keys (ARGV[1 + i]: the owner field): with
/// one hold the TTL is set as asked, with more only lengthened; a key of another
/// type is someone else's lock.
pub(crate) static REENTRANT_BULK_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local ms = ARGV[1]
local n = tonumber(ms)
local out = {}
for i = 1, #KEYS do
  local count = redis.pcall('HGET', KEYS[i], ARGV[i + 1])
  if type(count) == 'string' then
    if tonumber(count) <= 1 or redis.call('PTTL', KEYS[i]) < n then
      redis.call('PEXPIRE', KEYS[i], ms)
    end
    out[i] = 1
  elseif type(count) == 'table' or redis.call('EXISTS', KEYS[i]) == 1 then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
",
    )
});

/// `EVALSHA <script> n k1 … kn ttl v1 … vn`: one bulk call renewing `leases`
/// (key, value) to `ttl`.
pub(crate) fn bulk_extend_cmd<'a>(
    script: &Script,
    ttl: Duration,
    leases: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
) -> redis::Cmd {
    let n = leases.len();
    let bytes: usize = leases.clone().map(|(k, v)| k.len() + v.len() + 16).sum();
    let mut cmd = redis::Cmd::with_capacity(2 * n + 4, bytes + 64);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(n);
    for (key, _) in leases.clone() {
        cmd.arg(key);
    }
    cmd.arg(ttl_millis(ttl));
    for (_, value) in leases {
        cmd.arg(value);
    }
    cmd
}

/// A bulk call's reply for `n` leases, one reply each; `Err` gives back a reply
/// that is not such an array (an error: `NOSCRIPT`, a cluster redirection).
pub(crate) fn bulk_replies(reply: Value, n: usize) -> Result<Vec<Value>, Value> {
    match reply {
        Value::Array(replies) if replies.len() == n => Ok(replies),
        other => Err(other),
    }
}
