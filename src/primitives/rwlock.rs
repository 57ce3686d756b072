//! [`ReadWriteLock`]: many readers or one writer under one name, in Redisson's
//! `RReadWriteLock` format.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::options::LockOptions;
use crate::error::{Error, Result};
use crate::primitives::rw_guard::{ReadGuard, WriteGuard};
use crate::scheme::{Backend, RW_INSPECT, RW_SCRIPTS, RwBackend, Scheme, UPGRADE};

impl LockClient {
    /// A handle on the read-write lock `name` (under the client's key prefix):
    /// many readers or one writer at once across every client, redlease or
    /// Redisson, sharing it. Sends nothing.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an empty name; [`Error::Config`] on a Redlock
    /// client (a read-write lock is one server's format).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let config = client.read_write("config")?;
    /// let reading = config.read()?; // shared with other readers
    /// drop(reading);
    /// let writing = config.write()?; // alone
    /// writing.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_write(&self, name: &str) -> Result<ReadWriteLock> {
        if name.is_empty() {
            return Err(Error::InvalidKey {
                reason: "the key is empty",
            });
        }
        let hub = &self.inner.hub;
        if hub.topology.check(&Scheme::Reentrant, false).is_err() {
            return Err(Error::config(
                "read_write",
                "a read-write lock is one server's format (Redisson's); redlock cannot hold it",
            ));
        }
        let client_id = self.inner.reentrant.client_id().unwrap_or_default();
        Ok(ReadWriteLock {
            client: self.clone(),
            bare: name.to_owned(),
            full: format!("{}{name}", self.inner.settings.key_prefix),
            read: Arc::new(RwBackend::new(client_id, false)),
            write: Arc::new(RwBackend::new(client_id, true)),
        })
    }
}

/// A read-write lock in Redis: shared read holds or one exclusive write hold.
///
/// Made by [`LockClient::read_write`]. Cheap to clone. Each hold is a lease
/// renewed in the background and released when its guard drops. A hold belongs
/// to the client and the calling thread (Redisson's `<uuid>:<thread id>`): a
/// thread may read again while it reads, and read while it writes; a thread that
/// reads and asks to write gets [`Error::ReadHeld`] at once. A write release
/// wakes every waiting reader of this client, and they share. While a redlease
/// writer waits, redlease readers that hold no read of the name wait behind it,
/// unless a live Redisson reader holds the name: Redisson's readers ignore the
/// waiting writer, and while theirs overlap without a pause no writer gets in.
#[derive(Clone)]
pub struct ReadWriteLock {
    client: LockClient,
    /// The name without the client's prefix, as the lock entry points take it.
    bare: String,
    /// The name with the client's prefix.
    full: String,
    read: Arc<dyn Backend>,
    write: Arc<dyn Backend>,
}

impl ReadWriteLock {
    /// The lock's name, with the client's prefix.
    pub fn name(&self) -> &str {
        &self.full
    }

    /// Takes a read hold, waiting as long as it takes (while a writer holds or
    /// a redlease writer waits).
    ///
    /// # Errors
    /// [`Error::NotReadWriteLock`] when the name holds another format (left as
    /// it is), [`Error::Redis`] when Redis fails or does not answer in time,
    /// [`Error::Shutdown`] when the client is closed.
    pub fn read(&self) -> Result<ReadGuard> {
        self.read_with(&LockOptions::default())?
            .ok_or(Error::Shutdown)
    }

    /// One attempt at a read hold; never waits. `Ok(None)`: a writer holds it
    /// (or a redlease writer waits for it).
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.take(false, &LockOptions::default(), Some(Instant::now()), false)
            .map(|g| g.map(ReadGuard::new))
    }

    /// Takes a read hold, waiting at most `wait`. `Ok(None)`: not in time.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read_for(&self, wait: Duration) -> Result<Option<ReadGuard>> {
        self.read_with(&LockOptions::default().wait(wait))
    }

    /// Takes a read hold, waiting until `deadline` at most.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read_until(&self, deadline: Instant) -> Result<Option<ReadGuard>> {
        self.take(false, &LockOptions::default(), Some(deadline), true)
            .map(|g| g.map(ReadGuard::new))
    }

    /// Takes a read hold with per-call options (TTL, wait or deadline, renewal,
    /// `max_hold`, a [`CancelToken`](crate::CancelToken), `on_lost`). Without a
    /// wait or deadline it waits as long as it takes.
    ///
    /// # Errors
    /// As [`read`](Self::read); [`Error::Config`] for fencing or a scheme (a
    /// read-write lock has neither); [`Error::Cancelled`].
    pub fn read_with(&self, opts: &LockOptions) -> Result<Option<ReadGuard>> {
        self.take(false, opts, deadline(opts), true)
            .map(|g| g.map(ReadGuard::new))
    }

    /// Takes the write hold, waiting as long as it takes (while others read or
    /// write).
    ///
    /// # Errors
    /// [`Error::ReadHeld`] when this thread holds a read of the name, else as
    /// [`read`](Self::read).
    pub fn write(&self) -> Result<WriteGuard> {
        self.write_with(&LockOptions::default())?
            .ok_or(Error::Shutdown)
    }

    /// One attempt at the write hold; never waits. `Ok(None)`: held by others.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.take(true, &LockOptions::default(), Some(Instant::now()), false)
            .map(|g| g.map(WriteGuard::new))
    }

    /// Takes the write hold, waiting at most `wait`. `Ok(None)`: not in time.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write_for(&self, wait: Duration) -> Result<Option<WriteGuard>> {
        self.write_with(&LockOptions::default().wait(wait))
    }

    /// Takes the write hold, waiting until `deadline` at most.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write_until(&self, deadline: Instant) -> Result<Option<WriteGuard>> {
        self.take(true, &LockOptions::default(), Some(deadline), true)
            .map(|g| g.map(WriteGuard::new))
    }

    /// Takes the write hold with per-call options, as
    /// [`read_with`](Self::read_with).
    ///
    /// # Errors
    /// As [`write`](Self::write) and [`read_with`](Self::read_with).
    pub fn write_with(&self, opts: &LockOptions) -> Result<Option<WriteGuard>> {
        self.take(true, opts, deadline(opts), true)
            .map(|g| g.map(WriteGuard::new))
    }

    fn take(
        &self,
        write: bool,
        opts: &LockOptions,
        deadline: Option<Instant>,
        waits: bool,
    ) -> Result<Option<crate::LockGuard>> {
        if opts.fencing == Some(true) {
            return Err(Error::config(
                "fencing",
                "a read-write lock has no fencing token",
            ));
        }
        if opts.scheme.is_some() {
            return Err(Error::config(
                "scheme",
                "a read-write lock has its own format",
            ));
        }
        let mut opts = opts.clone().fencing(false);
        let backend = if write { &self.write } else { &self.read };
        opts.backend = Some(Arc::clone(backend));
        let deadline = if waits {
            deadline
        } else {
            Some(Instant::now())
        };
        match self.client.acquire(&self.bare, &opts, deadline, false) {
            Err(Error::Redis(f)) if f.redis_error().and_then(|e| e.detail()) == Some(UPGRADE) => {
                Err(Error::ReadHeld {
                    name: self.full.as_str().into(),
                })
            }
            // A name of another format: say what it is.
            Err(e @ Error::Redis(_)) => match self.found() {
                Ok(Some(found)) => Err(Error::NotReadWriteLock {
                    name: self.full.as_str().into(),
                    found,
                }),
                _ => Err(e),
            },
            other => other,
        }
    }

    /// What the name holds when it is not a read-write lock (or absent).
    fn found(&self) -> Result<Option<&'static str>> {
        let hub = &self.client.inner.hub;
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(RW_INSPECT.get_hash()).arg(1).arg(&self.full);
        let reply = hub.topology.query(&self.full, &RW_SCRIPTS, &cmd)?;
        let (kind, mode): (String, Option<String>) = match reply {
            redis::Value::Array(items) if items.len() >= 2 => (
                redis::from_redis_value_ref(&items[0]).unwrap_or_default(),
                redis::from_redis_value_ref(&items[1]).ok().flatten(),
            ),
            _ => return Ok(None),
        };
        Ok(match (kind.as_str(), mode) {
            ("none", _) | ("hash", Some(_)) => None,
            ("hash", None) => Some("a hash without `mode` (a reentrant lock?)"),
            ("string", _) => Some("a string (a token lock or a semaphore?)"),
            ("list", _) => Some("a list"),
            ("set", _) => Some("a set"),
            ("zset", _) => Some("a sorted set"),
            ("stream", _) => Some("a stream"),
            _ => Some("a value of another type"),
        })
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.full)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// The deadline of a call with `opts`: its wait or deadline, the earlier.
fn deadline(opts: &LockOptions) -> Option<Instant> {
    let by_wait = opts.wait.and_then(|w| Instant::now().checked_add(w));
    match (by_wait, opts.deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<ReadWriteLock>();
        send::<ReadGuard>();
        send::<WriteGuard>();
        let opts = LockOptions::default().wait(Duration::from_secs(1));
        assert!(deadline(&opts).is_some());
        assert!(deadline(&LockOptions::default()).is_none());
    }
}
