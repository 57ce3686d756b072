//! Permits of holders whose liveness session ended: a caller that finds no
//! permit free and will wait takes them back, so it does not wait out their
//! lease.
//!
//! Only an id of the liveness form (20 bytes opening with `rl8:`, see
//! `names.rs`) is ever looked at: Redisson's ids and those of redlease clients
//! without liveness are 16 bytes and stay bound by their lease.
//!
//! An acquire script of a caller that waits reports, when it finds no permit
//! free, the tags of the liveness sessions holding permits (at most
//! [`HOLDERS`]). The caller skips the sessions a look found alive a while ago
//! (shared with the token's look, `token::live`) and, if any is left, sends the
//! same acquire again with those sessions' record keys in KEYS: in one step it
//! reads each record's `PTTL`, removes every id that carries the mark and the
//! tag of a session whose record is gone, gives those permits back to the
//! count as Redisson's release does (`INCRBY`, then the count published on
//! Redisson's channel, so its waiters wake too), and then takes a permit if one
//! is free. Otherwise the caller looks again when the nearest live record would
//! end (its `PTTL`), never sooner: one command more per session period. The
//! report costs a waiting caller's busy attempt one pass over the held ids.
//!
//! The records must sit on the semaphore's node: in a Redis Cluster they are in
//! other slots, no script sees both, and the permits wait for their lease (the
//! session still caps the holder's own validity).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::names::to_hex;
use crate::net::connection::Conn;
use crate::owner::ClientTag;
use crate::scheme::redisson::unexpected;
use crate::scheme::token::sessions::{alive_until, known_alive};
use crate::scheme::{Acquire, Keys, Request, Waiting};

/// The most holders' sessions an acquire reports, and so looked at in one call.
const HOLDERS: usize = 64;

/// Set once a server refused a look (a user that may not read the session
/// records): later callers do not report holders, and dead holders' permits
/// wait for their lease.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Lua that reads the `PTTL` of the session records in KEYS[4..] (none on a
/// plain attempt): `pttls` in KEYS order, and `dead`, the raw tags (8 bytes,
/// as the ids carry them) of the records that are gone. Before any write, so
/// that a refused read leaves the semaphore untouched.
macro_rules! sessions {
    () => {
        concat!(
            $crate::scheme::token::scripts::session_pttl!(),
            "local pttls, dead, ndead = {}, {}, 0\n",
            "for i = 4, #KEYS do\n",
            "  local s = session_pttl(KEYS[1], KEYS[i])\n",
            "  pttls[#pttls + 1] = s\n",
            "  if s == -2 then\n",
            "    local tag = string.gsub(string.sub(KEYS[i], -16), '%x%x', ",
            "function(h) return string.char(tonumber(h, 16)) end)\n",
            "    dead[tag] = true\n",
            "    ndead = ndead + 1\n",
            "  end\nend\n",
        )
    };
}
pub(super) use sessions;

/// Lua that takes back the permits of the sessions in `dead` (set by
/// [`sessions!`]): removes each member of KEYS[2] that opens with `rl8:` and
/// the tag of a dead session (20 bytes in all), adds their number to KEYS[1]
/// and publishes the new count on `$channel` with `$verb`, as Redisson's
/// release does. Sets `broken`, the permits taken back.
macro_rules! take_back {
    ($channel:literal, $verb:literal) => {
        concat!(
            "local broken = 0\n",
            "if ndead > 0 then\n",
            "  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n",
            "    if #m == 20 and string.sub(m, 1, 4) == 'rl8:' and dead[string.sub(m, 5, 12)] then\n",
            "      redis.call('ZREM', KEYS[2], m)\n",
            "      broken = broken + 1\n",
            "    end\n  end\n",
            "  if broken > 0 then\n",
            "    value = redis.call('INCRBY', KEYS[1], broken)\n",
            "    redis.pcall(",
            $verb,
            ", ",
            $channel,
            ", value)\n",
            "  end\nend\n",
        )
    };
}
pub(super) use take_back;

/// Lua that appends to the table `busy`, when `$report` is `'1'`, the raw tags
/// of the liveness sessions holding permits in KEYS[2], each once, at most
/// [`HOLDERS`].
macro_rules! holders {
    ($report:literal) => {
        concat!(
            "if ",
            $report,
            " == '1' then\n",
            "  local seen, n = {}, 0\n",
            "  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n",
            "    if #m == 20 and string.sub(m, 1, 4) == 'rl8:' then\n",
            "      local tag = string.sub(m, 5, 12)\n",
            "      if not seen[tag] then\n",
            "        seen[tag] = true\n",
            "        busy[#busy + 1] = tag\n",
            "        n = n + 1\n",
            "        if n == 64 then break end\n",
            "      end\n    end\n  end\nend\n",
        )
    };
}
pub(super) use holders;

/// One acquire attempt of a semaphore, with the look at dead holders.
///
/// `send(conn, report, sessions)` sends the backend's acquire script: with
/// `report`, a busy reply names the holders' sessions; `sessions`, their
/// record keys for KEYS[4..]. `broken` counts the permits taken back.
pub(super) fn attempt(
    conn: &mut Conn,
    keys: &Keys,
    req: &Request,
    broken: &AtomicU64,
    mut send: impl FnMut(&mut Conn, bool, &[String]) -> RedisResult<(Value, Option<u32>)>,
) -> RedisResult<Acquire> {
    let report =
        req.wait != Waiting::No && keys.slot_tag.is_none() && !REFUSED.load(Ordering::Relaxed);
    let (reply, acked) = send(conn, report, &[])?;
    let mut reply = Reply::read(reply, acked)?;
    // The nearest end of a session known alive, whose permits may then come back.
    let mut alive: Option<Duration> = None;
    if report && !reply.taken {
        let prefix = &keys.lock[..keys.prefix];
        let mut look = Vec::new();
        for tag in &reply.holders {
            let session = tag.session_key(prefix);
            match known_alive(&session) {
                Some(left) => alive = Some(alive.map_or(left, |a| a.min(left))),
                None => look.push(session),
            }
        }
        if !look.is_empty() {
            let looked = Instant::now();
            match send(conn, false, &look) {
                Err(e) if e.code() == Some("NOPERM") => {
                    log::warn!(
                        "the redis user may not read session records: semaphore permits of \
                         dead liveness sessions wait for their lease ({e})"
                    );
                    REFUSED.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
                Ok((again, acked)) => {
                    reply = Reply::read(again, acked)?;
                    for (session, &pttl) in look.into_iter().zip(&reply.pttls) {
                        // A record lives at least `pttl` from when the look
                        // was sent; -1 (no TTL) never ends, -2 was broken.
                        let Ok(ms) = u64::try_from(pttl) else {
                            continue;
                        };
                        let left = Duration::from_millis(ms + 1);
                        alive_until(session, looked + left);
                        alive = Some(alive.map_or(left, |a| a.min(left)));
                    }
                }
            }
        }
    }
    if reply.broken > 0 {
        log::info!(
            "`{}`: took back {} permits of clients whose liveness session had ended",
            keys.lock,
            reply.broken
        );
        broken.fetch_add(reply.broken, Ordering::Relaxed);
        crate::metrics::export::broken_permits(reply.broken);
    }
    Ok(if reply.taken {
        Acquire::Acquired {
            fence: None,
            acked: reply.acked,
        }
    } else {
        let remaining = match (reply.ends, alive) {
            (Some(e), Some(a)) => Some(e.min(a)),
            (e, a) => e.or(a),
        };
        Acquire::Busy {
            remaining,
            announces: false,
        }
    })
}

/// An acquire script's reply.
#[derive(Debug, Default)]
struct Reply {
    /// A permit (or the permits asked for) taken.
    taken: bool,
    acked: Option<u32>,
    /// When the first lease or reservation ends, when one will.
    ends: Option<Duration>,
    /// Permits of dead sessions taken back.
    broken: u64,
    /// The `PTTL` of each session record looked at, in the order sent.
    pttls: Vec<i64>,
    /// The liveness sessions holding permits, when reported.
    holders: Vec<ClientTag>,
}

impl Reply {
    /// Reads `1` or `{1, broken}` (taken), or `{0, ends ms or -1, broken,
    /// {pttl...}, tag...}` (busy).
    fn read(reply: Value, acked: Option<u32>) -> RedisResult<Self> {
        let count = |v: &Value| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        let items = match reply {
            Value::Int(1) => {
                return Ok(Self {
                    taken: true,
                    acked,
                    ..Self::default()
                });
            }
            Value::Array(items) => items,
            other => return Err(unexpected("semaphore acquire", &other)),
        };
        match &items[..] {
            [Value::Int(1), broken] => Ok(Self {
                taken: true,
                acked,
                broken: count(broken).unwrap_or(0),
                ..Self::default()
            }),
            [Value::Int(0), ends, broken, pttls, holders @ ..] => Ok(Self {
                ends: count(ends).map(Duration::from_millis),
                broken: count(broken).unwrap_or(0),
                pttls: redis::from_redis_value_ref(pttls)?,
                holders: holders
                    .iter()
                    .take(HOLDERS)
                    .filter_map(session_tag)
                    .collect(),
                ..Self::default()
            }),
            _ => Err(unexpected("semaphore acquire", &Value::Array(items))),
        }
    }
}

/// The tag of a reported holder (its id's 8 raw tag bytes), when it declared
/// liveness.
fn session_tag(raw: &Value) -> Option<ClientTag> {
    let Value::BulkString(raw) = raw else {
        return None;
    };
    ClientTag::of_hex(&to_hex(raw)).filter(ClientTag::declares_liveness)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lua_mark_is_the_ids_mark() {
        assert_eq!(to_hex(b"rl8:"), crate::owner::PERMIT_MARK);
        assert!(holders!("'1'").contains(&format!("n == {HOLDERS}")));
    }

    #[test]
    fn replies_are_read_taken_or_busy_with_their_holders() {
        let r = Reply::read(Value::Int(1), Some(1)).unwrap();
        assert!(r.taken && r.broken == 0 && r.acked == Some(1));
        let r = Reply::read(Value::Array(vec![Value::Int(1), Value::Int(2)]), None).unwrap();
        assert!(r.taken && r.broken == 2);
        let live = Value::BulkString(vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0x8d, 0xef]);
        let plain = Value::BulkString(vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0x4d, 0xef]);
        let busy = Value::Array(vec![
            Value::Int(0),
            Value::Int(-1),
            Value::Int(0),
            Value::Array(vec![Value::Int(1500)]),
            live,
            plain,
        ]);
        let r = Reply::read(busy, None).unwrap();
        assert!(!r.taken && r.ends.is_none() && r.pttls == [1500]);
        assert_eq!(r.holders.len(), 1, "only a tag that declared liveness");
        assert_eq!(r.holders[0].as_str(), "0123456789ab8def");
        assert!(Reply::read(Value::Int(0), None).is_err());
    }
}
