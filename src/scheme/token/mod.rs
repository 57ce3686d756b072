//! The token scheme: `SET key token NX PX ttl`; release and renewal compare the token.
//!
//! The same wire format as redis-py's `Lock`, redsync, node-redlock and redlock-rs,
//! so those clients and redlease exclude each other on the same key.
//!
//! A redlease token is `rl2:`, the client's tag (16 hex digits, see
//! [`ClientTag`]), `:` and a counter in base 36 that never repeats in the process
//! (`rl2:0123456789abcdef:1z`, see [`new_token`]): unique without random bits of
//! its own, and 22 to 27 bytes for a process's first two billion tokens, where
//! redis-py's are 32 and redlease's older ones (`rl1:` and 32 hex digits, still
//! read and marked) 36; Redis hashes and compares it in every command. A caller
//! that waits
//! marks a redlease holder's token (`<token>+`: the fenced acquire's script when it
//! finds the lock busy, else the mark script after its `SET … NX GET` named the
//! holder), and only a marked lock's release publishes its release message: a
//! release nobody waits for costs what a bare compare-and-delete costs. The two
//! commands of an uncontended lock and unlock are packed by hand (`resp`): `SET NX
//! PX` and `EVALSHA <release> 1 key token`, the floor's own. A caller that may wait
//! adds `GET` once its client has a channel subscribed (see `Waiting::FirstAlone`).
//!
//! Layout: this file is the backend and its tokens; `scripts.rs` the token's Lua
//! scripts (mark, fenced acquire, release, extend) and the hand-off's; `all.rs` the
//! acquire and the release of several keys in one script each (`lock_all` on one
//! node); `look.rs` the look a caller polling a quorum takes before it tries;
//! `any.rs` the acquire of the first free key of several (`lock_any` on one node);
//! `live.rs` the look at a holder's liveness session in a waiter's busy attempt
//! (its lock broken once the session is gone); `sessions.rs` what the
//! process's waiters know of those sessions (alive until when, the look due
//! next, the holders a cluster looks at); `once.rs` the break of a caller that
//! tries once (a partition member);
//! `cond.rs` release, renewal and mark with a server's conditional commands
//! (Valkey 9: `DELIFEQ`, `SET … IFEQ`), no script;
//! `ticket.rs` the adoption of a ticket's lease (its token swapped for the
//! adopter's in one script).

pub(crate) mod all;
pub(crate) mod any;
pub(crate) mod cond;
pub(crate) mod live;
pub(crate) mod look;
pub(crate) mod once;
pub(crate) mod scripts;
pub(crate) mod sessions;
pub(crate) mod ticket;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::bulk::TOKEN_BULK_EXTEND;
use super::{
    Acquire, Backend, Keys, Replicas, Request, Waiting, acquired, fixed_extend_cmd, send_acquire,
    with_scripts,
};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::owner::{ClientTag, KEPT_MARK, TOKEN_LEN_V1, TOKEN_PREFIX, TOKEN_PREFIX_V1};
use crate::time::ttl_millis;
use scripts::{
    TOKEN_ACQUIRE_FENCED, TOKEN_BREAK, TOKEN_EXTEND, TOKEN_KEEP, TOKEN_MARK, TOKEN_RELEASE,
    TOKEN_RELEASE_SHARDED,
};

/// The token scheme's commands, for one client: its tokens carry the client's tag.
#[derive(Debug)]
pub(crate) struct TokenBackend {
    tag: ClientTag,
    /// Where to count the locks of dead liveness sessions its waiters broke.
    broken: Option<Arc<AtomicU64>>,
}

impl TokenBackend {
    /// The token scheme of the client tagged `tag`.
    pub(crate) fn new(tag: ClientTag) -> Self {
        Self { tag, broken: None }
    }

    /// Counts the locks of dead liveness sessions it breaks in `broken`.
    pub(crate) fn counting(mut self, broken: &Arc<AtomicU64>) -> Self {
        self.broken = Some(Arc::clone(broken));
        self
    }
}

static SCRIPTS: [&LazyLock<Script>; 8] = [
    &TOKEN_BREAK,
    &TOKEN_ACQUIRE_FENCED,
    &TOKEN_KEEP,
    &TOKEN_MARK,
    &TOKEN_RELEASE,
    &TOKEN_RELEASE_SHARDED,
    &TOKEN_EXTEND,
    &TOKEN_BULK_EXTEND,
];

impl TokenBackend {
    /// Where it counts the locks of dead liveness sessions it broke.
    pub(crate) fn counter(&self) -> Option<&AtomicU64> {
        self.broken.as_deref()
    }
}

impl Backend for TokenBackend {
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        Ok(new_token(self.tag))
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let Request {
            ttl,
            fence,
            wait,
            replicas,
            ..
        } = req;
        // A waiter whose look at a live holder's session is due sends the look
        // alone, in place of the attempt.
        if wait != Waiting::No
            && let Some(busy) = live::again(conn, keys, self.counter())?
        {
            return Ok(busy);
        }
        let ms = ttl_millis(ttl);
        if fence {
            let fence = keys.fence();
            let args = [
                Arg::from("EVALSHA"),
                TOKEN_ACQUIRE_FENCED.get_hash().into(),
                2.into(),
                keys.lock.as_str().into(),
                fence.as_str().into(),
                value.into(),
                ms.into(),
                (if wait == Waiting::No { "0" } else { "1" }).into(),
            ];
            let (mut reply, acked) = send_acquire(conn, &SCRIPTS, &args, replicas)?;
            // A waiter is told a holder that declared liveness (marked already).
            if let Value::Array(items) = &mut reply
                && items.len() == 3
                && let Some(Value::BulkString(holder)) = items.pop()
                && let Some(busy) = live::look(conn, keys, &holder, false, self.counter())?
            {
                return Ok(busy);
            }
            return Ok(acquired(reply, true, acked)?.unwrap_or_else(busy));
        }
        // Without a fence no script is needed: a plain `SET NX PX`, the same one
        // command as the hand-written floor; for a caller that waits, with `GET`,
        // so that a busy reply says whether the holder is a token to mark. A lone
        // caller's first attempt leaves it out: its try after subscribing names the
        // holder (unless the server cannot: then this attempt marks, as `First`).
        let nx_get = NX_GET.load(Ordering::Relaxed);
        let alone = wait == Waiting::FirstAlone && nx_get;
        let get = wait != Waiting::No && !alone && nx_get;
        let holder = match set_nx(conn, &keys.lock, value, ms, (get, replicas))? {
            Set::Won(acked) => return Ok(Acquire::Acquired { fence: None, acked }),
            Set::Busy(_) if wait == Waiting::No => {
                return Ok(Acquire::Busy {
                    remaining: None,
                    announces: false,
                });
            }
            Set::Busy(holder) => holder,
        };
        let markable = holder.as_deref().map(is_unmarked_token);
        // A holder that declared liveness: its session is looked at (and the
        // holder marked) in one script, which breaks the lock of a dead one.
        if let Some(h) = holder.as_deref()
            && let Some(busy) = live::look(conn, keys, h, markable == Some(true), self.counter())?
        {
            return Ok(busy);
        }
        // A caller that waits marks a redlease holder's token, once per holder (a
        // marked one shows its mark), learning its `PTTL` in the same round trip;
        // when the holder is unknown (a server without `SET NX GET`, a key of
        // another type) the script looks. Otherwise it asks the `PTTL` only when
        // the holder's TTL is not known yet. Either is a second round trip on this
        // slow path only. Where the server has conditional commands, a holder
        // `SET … NX GET` named is marked with one (no script); an unknown one (a
        // key of another type) is not a token to mark.
        let mark = markable.unwrap_or(wait.first() && !alone);
        let pttl: i64 = if mark && conn.conditional() {
            match holder.as_deref().filter(|h| is_unmarked_token(h)) {
                Some(holder) => cond::mark(conn, &keys.lock, holder)?,
                None if wait.first() => {
                    conn.run(|c| redis::cmd("PTTL").arg(&keys.lock).query(c))?
                }
                None => {
                    return Ok(Acquire::Busy {
                        remaining: None,
                        announces: false,
                    });
                }
            }
        } else if mark {
            with_scripts(conn, &SCRIPTS, |c| {
                c.run(|c| TOKEN_MARK.key(&keys.lock).invoke(c))
            })?
        } else if wait.first() {
            conn.run(|c| redis::cmd("PTTL").arg(&keys.lock).query(c))?
        } else {
            return Ok(Acquire::Busy {
                remaining: None,
                announces: false,
            });
        };
        Ok(busy(pttl))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        // The token never changes, so there is never another value to accept.
        fixed_extend_cmd(&TOKEN_EXTEND, key, value, ttl)
    }

    fn bulk_extend(&self) -> Option<&'static LazyLock<Script>> {
        Some(&TOKEN_BULK_EXTEND)
    }

    fn publishes(&self) -> bool {
        true
    }

    fn marked(&self) -> bool {
        true
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn broke(&self) {
        if let Some(count) = self.counter() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn conditional(&self) -> bool {
        true
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }
    fn refuses_min_hold(&self) -> Option<&'static str> {
        None
    }

    fn label(&self) -> &'static str {
        "token"
    }
}

/// A new redlease token of the client tagged `tag`: [`TOKEN_PREFIX`], the tag, `:`
/// and the next value of the process's token counter in base 36, such as
/// `rl2:0123456789abcdef:1z` (21 bytes and 1 to 13 digits: 25 bytes or fewer for
/// the process's first 1.7 million).
///
/// Unique: a tag names one client, which lives in one process, and the counter
/// never repeats there (64 bits; a billion tokens a second would take 584 years to
/// wrap it). The tag is what makes two clients' tokens differ: the first 16 hex
/// digits of a UUID v4, 60 random bits.
pub(crate) fn new_token(tag: ClientTag) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut buf = [0u8; 13];
    let counter = base36(COUNTER.fetch_add(1, Ordering::Relaxed) + 1, &mut buf);
    // One allocation of the token's own length, no formatter.
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + 17 + counter.len());
    token.push_str(TOKEN_PREFIX);
    token.push_str(tag.as_str());
    token.push(':');
    token.push_str(counter);
    token
}

/// `n` in base 36 (`0-9a-z`), written into the end of `buf`: a `u64` takes at most
/// 13 digits.
fn base36(mut n: u64, buf: &mut [u8; 13]) -> &str {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits and letters were written.
    std::str::from_utf8(&buf[start..]).unwrap_or_default()
}

/// Whether servers take `SET … NX GET` (Redis 7.0 and later). Cleared for good by
/// the first server that calls it a syntax error (6.2 and older), which is then
/// asked without `GET`.
static NX_GET: AtomicBool = AtomicBool::new(true);

/// What a `SET NX PX` found.
enum Set {
    /// The lock is ours (replicas that acknowledged, when asked).
    Won(Option<u32>),
    /// Someone holds it: its value, when the server said.
    Busy(Option<Vec<u8>>),
}

/// `SET key value NX PX ms`, with `GET` when `get` asks (the server can): one
/// command, which takes the lock or names its holder. A key of another type is
/// busy, holder unknown (`GET` makes it an error).
fn set_nx(
    conn: &mut Conn,
    key: &str,
    value: &str,
    ms: u64,
    (get, replicas): (bool, Option<Replicas>),
) -> RedisResult<Set> {
    let args = [
        Arg::from("SET"),
        key.into(),
        value.into(),
        "NX".into(),
        "PX".into(),
        ms.into(),
        "GET".into(),
    ];
    let args = if get { &args[..] } else { &args[..6] };
    let (reply, acked) = match send_acquire(conn, &[], args, replicas) {
        Err(e) if get && e.code() == Some("WRONGTYPE") => return Ok(Set::Busy(None)),
        Err(e) if get && e.code() == Some("ERR") && e.to_string().contains("syntax") => {
            log::debug!("the server has no `SET NX GET` ({e}); asking without `GET`");
            NX_GET.store(false, Ordering::Relaxed);
            return set_nx(conn, key, value, ms, (false, replicas));
        }
        other => other?,
    };
    Ok(match reply {
        Value::Nil if get => Set::Won(acked),
        Value::Nil => Set::Busy(None),
        Value::BulkString(holder) => Set::Busy(Some(holder)),
        _ => Set::Won(acked),
    })
}

/// Whether `value` is a redlease token no waiter has marked yet: what the mark
/// script (`scripts::MARK`) marks.
fn is_unmarked_token(value: &[u8]) -> bool {
    if value.len() == TOKEN_LEN_V1 && value.starts_with(TOKEN_PREFIX_V1.as_bytes()) {
        return true;
    }
    !value.ends_with(b"+")
        && !value.ends_with(&[KEPT_MARK as u8])
        && std::str::from_utf8(value).is_ok_and(|v| ClientTag::of_token(v).is_some())
}

/// A busy reply: `pttl` ≥ 0 bounds the wait, -2 (gone since) means retry now,
/// -1 (a key without TTL, not written by this scheme) gives no bound.
pub(super) fn busy(pttl: i64) -> Acquire {
    Acquire::Busy {
        remaining: remaining(pttl),
        announces: false,
    }
}

/// The wait a busy reply's `pttl` allows, as [`busy`] reads it.
pub(super) fn remaining(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO),
        n => u64::try_from(n).ok().map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::thread;

    use super::*;
    use crate::owner::ClientId;

    #[test]
    fn tokens_are_unique_across_clients_and_threads_and_name_their_client() {
        let tags = [ClientId::new().tag(), ClientId::new().tag()];
        let made: Vec<Vec<(ClientTag, String)>> = thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let tag = tags[t % 2];
                    s.spawn(move || (0..5000).map(|_| (tag, new_token(tag))).collect())
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        for (tag, token) in made.into_iter().flatten() {
            assert_eq!(ClientTag::of_token(&token), Some(tag), "{token}");
            let counter = token
                .strip_prefix(&format!("rl2:{tag}:"))
                .unwrap_or_else(|| panic!("not rl2:<tag>:<counter>: {token}"));
            assert!(!counter.is_empty() && counter.len() <= 13, "{token}");
            assert!(token.len() < 32, "longer than a UUID's hex: {token}");
            assert!(is_unmarked_token(token.as_bytes()), "{token}");
            assert!(!is_unmarked_token(format!("{token}+").as_bytes()));
            assert!(seen.insert(token.clone()), "made twice: {token}");
        }
        assert_eq!(seen.len(), 40_000);
    }

    #[test]
    fn the_counter_is_written_in_base_36() {
        let mut buf = [0u8; 13];
        for (n, want) in [
            (0, "0"),
            (1, "1"),
            (35, "z"),
            (36, "10"),
            (1_679_615, "zzzz"),
            (u64::MAX, "3w5e11264sgsf"),
        ] {
            assert_eq!(base36(n, &mut buf), want);
        }
        let tag = ClientId::new().tag();
        let (a, b) = (new_token(tag), new_token(tag));
        let parse = |t: &str| u64::from_str_radix(t.rsplit_once(':').unwrap().1, 36).unwrap();
        // Other tests make tokens concurrently: the counter only rises.
        assert!(parse(&b) > parse(&a), "{a} then {b}");
        let old = format!("rl1:{tag}0123456789abcdef");
        assert!(is_unmarked_token(old.as_bytes()));
        assert!(!is_unmarked_token(format!("{old}+").as_bytes()));
        for foreign in [
            "0123456789abcdef0123456789abcdef",
            "1700000000000",
            "rl2:x:1",
            "",
        ] {
            assert!(!is_unmarked_token(foreign.as_bytes()), "{foreign}");
        }
    }
}
