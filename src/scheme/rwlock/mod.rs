//! The read-write lock: Redisson's `RReadWriteLock`, field for field.
//!
//! A read-write lock named `n` (with the client's prefix) is a hash at `n`:
//! - `mode`: `read` or `write`;
//! - one field per reader, `<client uuid>:<thread id>`, whose value is its hold
//!   count, and per writer `<client uuid>:<thread id>:write` likewise;
//! - with a `PEXPIRE` that covers every hold.
//!
//! Each read hold also has a timeout key, `{n}:<uuid>:<thread>:rwlock_timeout:<i>`
//! for its `i`-th hold (`n:<uuid>…` when `n` holds a `{`, Redisson's
//! `suffixName`), with the hold's TTL: a reader that dies stops renewing its
//! keys, and the next release that finds no live timeout key deletes the name.
//! Releases publish on `redisson_rwlock:{n}` (`prefixName`): `0` when the last
//! reader leaves, `1` when a writer does, as Redisson's `LockPubSub` reads them.
//!
//! Where these scripts differ from Redisson's (`scripts.rs`), no Redisson client
//! can tell: a hash without `mode` (a reentrant lock) is refused, never turned
//! into a read-write lock; TTLs are only lengthened while more holds remain; a
//! reader of a thread asking to write is answered at once (Redisson would wait
//! for itself); a write release that leaves this thread's reads publishes too;
//! and a redlease writer that waits sets `{n}:redlease:write_wait` (the server
//! time in ms it began waiting, a short TTL refreshed by each of its attempts),
//! while which redlease readers holding no read of the name do not start one.
//! A redlease reader's timeout keys hold `redlease` (Redisson writes `1` and
//! reads only their TTL), so the read script tells the holds apart: while every
//! live read hold honours the mark, readers defer for as long as the writer
//! waits (the holds drain and it gets in). Beside a live Redisson reader, which
//! does not know the mark and keeps the name read-held whatever redlease
//! readers do, the writer gets in only where Redisson's readers leave the name
//! free, so redlease readers take turns with it (phase-fair, with a bound): a
//! turn opens every [`TURN`] from the mark's start, a reader that was waiting
//! when the latest one opened reads, one that came after waits for the next (at
//! most `TURN` from the start of its call). The readers held back go in
//! together and hold together, and the moments between are the writer's.
//!
//! Layout: this file is the wire format's backend and the replies it reads;
//! `scripts.rs` its Lua scripts, `inspect.rs` the read-only one; `names.rs`
//! the names Redisson derives; `live.rs` the break of holders whose liveness
//! session ended. The handle, [`ReadWriteLock`](crate::ReadWriteLock), is
//! `primitives/rwlock.rs`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisResult, Script, Value};

use super::redisson::{owner, publish_cmd, suffix_name, unexpected};
use super::token::busy;
use super::{
    Acquire, Announce, Backend, Freed, Keys, Request, Waiting, send_acquire, with_scripts,
};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::time::ttl_millis;

mod inspect;
mod live;
mod names;
mod scripts;

pub(crate) use names::{channel, timeout_prefix, write_wait};

pub(crate) use inspect::INSPECT as RW_INSPECT;
use scripts::{
    READ_ACQUIRE, READ_EXTEND, READ_RELEASE, WRITE_ACQUIRE, WRITE_EXTEND, WRITE_RELEASE,
};

/// How long a waiting writer's mark holds new redlease readers back after its
/// last attempt: several of its polling steps, so a writer that died stops
/// holding them back within it.
pub(crate) const WRITE_WAIT: Duration = Duration::from_secs(2);

/// How often redlease readers get a turn beside a waiting writer while a read
/// hold that ignores its mark (a Redisson reader's) is live: the bound on how
/// long such a reader defers to the writer, from the start of its call. Those
/// holds keep the name read-held whatever redlease readers do, so the writer
/// gets in only where they leave it free, and redlease readers holding then
/// would take those moments from it. From the server time the writer began
/// waiting (the mark's value), a turn opens every `TURN`: a reader whose call
/// began before the latest one opened (it was already waiting) reads; one that
/// came after waits for the next. Readers held back go in together, hold
/// together, and leave the rest of each turn to the writer.
pub(crate) const TURN: Duration = Duration::from_millis(250);

/// The detail of the error a reader of a thread gets when it asks to write.
pub(crate) const UPGRADE: &str = "a reader of this thread asked to write";

pub(crate) static RW_SCRIPTS: [&LazyLock<Script>; 8] = [
    &READ_ACQUIRE,
    &READ_RELEASE,
    &READ_EXTEND,
    &WRITE_ACQUIRE,
    &WRITE_RELEASE,
    &WRITE_EXTEND,
    &inspect::INSPECT,
    &live::BREAK,
];

/// One side of the read-write lock, for one client.
#[derive(Debug)]
pub(crate) struct RwBackend {
    /// The client's UUID: the first part of every field it writes.
    client: String,
    /// Whether this side writes.
    write: bool,
    /// Where to count the holds of dead liveness sessions its waiters broke.
    broken: Arc<AtomicU64>,
}

impl RwBackend {
    /// The read side (`write` false) or write side of client `client` (a UUID),
    /// counting the holds its waiters break in `broken`.
    pub(crate) fn new(client: &str, write: bool, broken: &Arc<AtomicU64>) -> Self {
        Self {
            client: client.to_owned(),
            write,
            broken: Arc::clone(broken),
        }
    }

    /// The calling thread's reader field, `<client uuid>:<thread id>`.
    pub(crate) fn reader(&self) -> String {
        owner(&self.client)
    }
}

impl Backend for RwBackend {
    /// The calling thread's field; the lease keeps it, so a guard moved to
    /// another thread still releases its own hold.
    fn new_value(&self, _conn: &mut Conn, _ttl: Duration) -> RedisResult<String> {
        let reader = self.reader();
        Ok(if self.write {
            reader + ":write"
        } else {
            reader
        })
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let name = keys.lock.as_str();
        let mark = write_wait(name);
        let ttl = ttl_millis(req.ttl);
        let waits = if req.wait == Waiting::No { "0" } else { "1" };
        let (reply, acked) = if self.write {
            let reader = value.strip_suffix(":write").unwrap_or(value);
            let args = [
                Arg::from("EVALSHA"),
                WRITE_ACQUIRE.get_hash().into(),
                2.into(),
                name.into(),
                mark.as_str().into(),
                ttl.into(),
                value.into(),
                reader.into(),
                waits.into(),
                ttl_millis(WRITE_WAIT).into(),
            ];
            send_acquire(conn, &RW_SCRIPTS, &args, req.replicas)?
        } else {
            let prefix = timeout_prefix(name, value);
            let base = suffix_name(name, "");
            let write_field = format!("{value}:write");
            let args = [
                Arg::from("EVALSHA"),
                READ_ACQUIRE.get_hash().into(),
                4.into(),
                name.into(),
                prefix.as_str().into(),
                mark.as_str().into(),
                base.as_str().into(),
                ttl.into(),
                value.into(),
                write_field.as_str().into(),
                ttl_millis(req.began.elapsed()).into(),
                ttl_millis(TURN).into(),
                waits.into(),
            ];
            send_acquire(conn, &RW_SCRIPTS, &args, req.replicas)?
        };
        match reply {
            Value::Nil => Ok(Acquire::Acquired { fence: None, acked }),
            Value::Int(pttl) => Ok(busy(pttl)),
            // A waiter is told the holders that declared liveness: a dead
            // one's holds are broken (see `live`).
            Value::Array(_) => {
                let looked = live::look(conn, keys, &reply, &self.broken)?;
                looked.ok_or_else(|| unexpected("read-write lock acquire", &reply))
            }
            Value::SimpleString(s) if s == "upgrade" => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "refused",
                UPGRADE.to_owned(),
            ))),
            other => Err(unexpected("read-write lock acquire", &other)),
        }
    }

    fn release(
        &self,
        conn: &mut Conn,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        _maybe: &[String],
    ) -> RedisResult<Freed> {
        let publish = publish_cmd(conn);
        let n = with_scripts(conn, &RW_SCRIPTS, |c| {
            c.run(|c| {
                if self.write {
                    WRITE_RELEASE
                        .key(key)
                        .arg("1")
                        .arg(value)
                        .arg(publish)
                        .arg(announce.channel)
                        .invoke::<i64>(c)
                } else {
                    READ_RELEASE
                        .key(key)
                        .key(timeout_prefix(key, value))
                        .key(suffix_name(key, ""))
                        .arg("0")
                        .arg(value)
                        .arg(publish)
                        .arg(announce.channel)
                        .invoke::<i64>(c)
                }
            })
        })?;
        Ok(Freed::from_reply(n))
    }

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        _maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        let mut cmd = redis::Cmd::with_capacity(8, 192);
        if self.write {
            cmd.arg("EVALSHA")
                .arg(WRITE_EXTEND.get_hash())
                .arg(1)
                .arg(key);
        } else {
            cmd.arg("EVALSHA")
                .arg(READ_EXTEND.get_hash())
                .arg(2)
                .arg(key)
                .arg(timeout_prefix(key, value));
        }
        if self.write {
            cmd.arg(value).arg(ttl_millis(ttl));
        } else {
            cmd.arg(ttl_millis(ttl)).arg(value);
        }
        (cmd, value.to_owned())
    }

    fn publishes(&self) -> bool {
        true
    }

    fn channel(&self, lock: &str) -> String {
        channel(lock)
    }

    fn reentrant(&self) -> bool {
        true
    }

    fn shares(&self) -> bool {
        !self.write
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &RW_SCRIPTS
    }

    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("a read-write lock (readers share the key)")
    }

    fn label(&self) -> &'static str {
        if self.write {
            "rwlock_write"
        } else {
            "rwlock_read"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_the_client_and_thread_and_writers_end_in_write() {
        let broken = Arc::default();
        let r = RwBackend::new("c0ffee", false, &broken);
        let w = RwBackend::new("c0ffee", true, &broken);
        let here = r.reader();
        assert!(here.starts_with("c0ffee:"));
        assert_eq!(here, w.reader(), "one number per thread");
        let there = std::thread::spawn(move || r.reader()).join().unwrap();
        assert_ne!(here, there);
        assert!(!w.shares() && w.reentrant() && w.publishes());
    }
}
