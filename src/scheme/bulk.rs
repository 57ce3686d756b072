//! Renewal of many leases in one script call, for the schemes whose value never
//! changes (token, reentrant): the renewal batch sends one call per chunk of
//! leases instead of one per lease, and Redis runs one script instead of many.
//!
//! Every bulk script takes KEYS[1..n] the lock keys, ARGV[1] the TTL in ms (one for
//! the call: the batch groups leases by TTL), ARGV[1 + i] the value of KEYS[i], and
//! answers for each key what the scheme's own extend script would have answered
//! for it alone (see [`bulk_replies`]).
//! Each key is compared and extended on its own, as by that script, inside one
//! atomic call: a lease whose value changed is reported as such, the others are
//! renewed. In a cluster every key of one call must hash to one slot; the batch
//! groups them so. The scripts define no functions (a closure made on every call)
//! and build no string unless a value differs from the one expected.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::time::ttl_millis;

/// [`TOKEN_EXTEND`](crate::scheme::token::scripts::TOKEN_EXTEND) for many keys: the value may carry
/// a waiter's mark (`<token>+`) and is left as it is. One `MGET` reads every value
/// (a key of another type reads as nil; `EXISTS` then tells it from a gone one).
/// The expiry is set as `PEXPIREAT` the server's `TIME` + the TTL: the same moment
/// as `PEXPIRE`, without Redis rewriting each command into that form for its
/// replicas (1.5k of its 12k instructions per key, by callgrind). `replicate_commands`
/// lets a server older than 5.0 write after `TIME` (later ones need not; a server
/// without it is not called).
pub(crate) static TOKEN_BULK_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.replicate_commands then redis.replicate_commands() end
local call, keys, argv = redis.call, KEYS, ARGV
local now = call('TIME')
local at = string.format('%d', now[1] * 1000 + math.floor(now[2] / 1000) + tonumber(argv[1]))
local values = call('MGET', unpack(keys))
local lost = {}
for i = 1, #keys do
  local v = values[i]
  local want = argv[i + 1]
  if v == want or (v and v == want .. '+') then
    call('PEXPIREAT', keys[i], at)
  elseif v or call('EXISTS', keys[i]) == 1 then
    lost[#lost + 1] = -i
  else
    lost[#lost + 1] = i
  end
end
return lost
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
local call = redis.call
local lost = {}
for i = 1, #KEYS do
  local count = redis.pcall('HGET', KEYS[i], ARGV[i + 1])
  if type(count) == 'string' then
    if tonumber(count) <= 1 or call('PTTL', KEYS[i]) < n then
      call('PEXPIRE', KEYS[i], ms)
    end
  elseif type(count) == 'table' or call('EXISTS', KEYS[i]) == 1 then
    lost[#lost + 1] = -i
  else
    lost[#lost + 1] = i
  end
end
return lost
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

/// A bulk call's reply for `n` leases, one reply each as the scheme's own extend
/// gives it (1 extended, 0 gone, -1 someone else's): the call names only the
/// leases it did not extend, `i` for a gone KEYS[i] and `-i` for one someone else
/// holds. `Err` gives back a reply that is not such a list (an error: `NOSCRIPT`,
/// a cluster redirection).
pub(crate) fn bulk_replies(reply: Value, n: usize) -> Result<Vec<Value>, Value> {
    let Value::Array(lost) = reply else {
        return Err(reply);
    };
    let mut each = vec![Value::Int(1); n];
    for named in &lost {
        let (i, found) = match *named {
            Value::Int(i) if i > 0 => (i, 0),
            Value::Int(i) if i < 0 => (-i, -1),
            _ => return Err(Value::Array(lost)),
        };
        match usize::try_from(i - 1).ok().and_then(|i| each.get_mut(i)) {
            Some(reply) => *reply = Value::Int(found),
            None => return Err(Value::Array(lost)),
        }
    }
    Ok(each)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_reply_names_the_leases_not_extended() {
        let reply = Value::Array(vec![Value::Int(2), Value::Int(-4)]);
        let each: Vec<Value> = [1, 0, 1, -1].into_iter().map(Value::Int).collect();
        assert_eq!(bulk_replies(reply, 4).unwrap(), each);
        assert_eq!(bulk_replies(Value::Array(vec![]), 2).unwrap().len(), 2);
        for bad in [Value::Int(5), Value::Int(0), Value::Nil] {
            assert!(bulk_replies(Value::Array(vec![bad]), 4).is_err());
        }
        assert!(bulk_replies(Value::Okay, 1).is_err());
    }
}
