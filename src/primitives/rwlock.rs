//! [`ReadWriteLock`]: many readers or one writer under one name, in Redisson's
//! `RReadWriteLock` format.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::client::options::{LockOptions, Wait};
use crate::error::{Error, Result};
use crate::format::LockFormat;
use crate::primitives::family::acquire_family;
use crate::primitives::handle::Handle;
use crate::primitives::held::{ReadGuard, WriteGuard};
use crate::scheme::{Backend, RW_INSPECT, RW_SCRIPTS, RwBackend, UPGRADE};

impl LockClient {
    /// A handle on the read-write lock `name` (under the client's key prefix):
    /// many readers or one writer at once across every client, redlease or
    /// Redisson, sharing it. Sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::Unsupported`] on a
    /// Redlock client (a read-write lock is one server's format).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let config = client.read_write_lock("config")?;
    /// let reading = config.read()?; // shared with other readers
    /// drop(reading);
    /// let writing = config.write()?; // alone
    /// writing.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        let handle = Handle::new(self, name, LockFormat::ReadWrite)?;
        let client_id = handle.client_id();
        Ok(ReadWriteLock {
            read: Arc::new(RwBackend::new(&client_id, false, handle.broken())),
            write: Arc::new(RwBackend::new(&client_id, true, handle.broken())),
            handle,
        })
    }
}

/// A read-write lock in Redis: shared read holds or one exclusive write hold.
///
/// Made by [`LockClient::read_write_lock`]. Cheap to clone. Each hold is a lease
/// renewed in the background and released when its guard drops. A hold belongs
/// to the client and the calling thread (Redisson's `<uuid>:<thread id>`): a
/// thread may read again while it reads, and read while it writes; a thread that
/// reads and asks to write gets [`Error::ReadHeld`] at once. A write release
/// wakes every waiting reader of this client, and they share.
///
/// Waiting writers and readers take turns (phase-fair, with a bound): while a
/// redlease writer waits, a redlease reader that holds no read of the name
/// waits behind it as long as only redlease readers hold the name (they drain,
/// and the writer gets in). While a live Redisson reader holds it (Redisson's
/// readers ignore the waiting writer), the writer can get in only where
/// Redisson's readers leave the name free, so readers go in by turns: a turn
/// opens every 250 ms from when the writer began waiting, the readers that were
/// waiting when it opened go in together, and one that comes after waits for
/// the next. So a reader waits behind the writer for at most 250 ms from the
/// start of its call, and the writer has the moments the foreign readers leave
/// between our readers' turns. While Redisson's readers overlap without a
/// pause, no writer gets in at all.
///
/// A waiter breaks the holds of a client whose
/// [liveness](crate::LockClientBuilder::liveness) session ended: a dead
/// writer's, or each dead reader's beside live ones (see the guide's crash
/// recovery chapter).
#[derive(Clone)]
pub struct ReadWriteLock {
    handle: Handle,
    read: Arc<dyn Backend>,
    write: Arc<dyn Backend>,
}

impl ReadWriteLock {
    /// The lock's name, as passed to [`LockClient::read_write_lock`].
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The lock's key: its name with the client's prefix.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    acquire_family! {
        fn read, try_read, try_read_for, try_read_until, read_with, with_read: "releases it";
        take: take(false), line: Until, guard: ReadGuard,
        what: "a read hold",
        busy: "held by others (a writer, or a redlease writer waiting for it)",
        gave_up: "",
        handle: config = "read_write_lock(\"config\")";
        /// it waits while a writer holds the name or a redlease writer waits
        /// for it, and behind a waiting writer at most 250 ms, until its
        /// readers' next turn, while a Redisson reader holds it.
        ///
        /// # Errors
        /// [`Error::WrongFormat`] when the name holds another format (left as
        /// it is), [`Error::Redis`] when Redis fails or does not answer in time,
        /// [`Error::Shutdown`] when the client is closed.
        waits;
        /// [`Error::Config`] for fencing or a scheme (a read-write lock has
        /// neither); [`Error::Cancelled`].
        options;
    }

    acquire_family! {
        fn write, try_write, try_write_for, try_write_until, write_with, with_write: "releases it";
        take: take(true), line: Until, guard: WriteGuard,
        what: "the write hold", busy: "held by others (readers or a writer)",
        gave_up: "",
        handle: config = "read_write_lock(\"config\")";
        /// it waits while others read or write.
        ///
        /// # Errors
        /// [`Error::ReadHeld`] when this thread holds a read of the name, else as
        /// [`read`](Self::read).
        waits;
        /// [`Error::Config`] for fencing or a scheme (a read-write lock has
        /// neither); [`Error::Cancelled`].
        options;
    }

    /// One acquire of a read (`write` false) or the write hold, as the guard
    /// `G` of its side.
    fn take<G: From<LockGuard>>(
        &self,
        write: bool,
        opts: &LockOptions,
        wait: Wait,
    ) -> Result<Option<G>> {
        let backend = if write { &self.write } else { &self.read };
        let taken = match self.handle.take(backend, opts, wait) {
            Err(Error::Redis(f)) if f.redis_error().and_then(|e| e.detail()) == Some(UPGRADE) => {
                Err(Error::ReadHeld {
                    key: self.key().into(),
                })
            }
            // A name of another format: say what it is.
            Err(e) => Err(self.handle.explain(e, || self.found())),
            other => other,
        };
        taken.map(|g| g.map(G::from))
    }

    /// What the name holds when it is not a read-write lock (or absent).
    fn found(&self) -> Result<Option<&'static str>> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(RW_INSPECT.get_hash()).arg(1).arg(self.key());
        let reply = self.handle.query(&RW_SCRIPTS, &cmd)?;
        let (kind, mode): (String, Option<String>) = match reply {
            redis::Value::Array(items) if items.len() >= 2 => (
                redis::from_redis_value_ref(&items[0]).unwrap_or_default(),
                redis::from_redis_value_ref(&items[1]).ok().flatten(),
            ),
            _ => return Ok(None),
        };
        Ok(match (kind.as_str(), mode) {
            ("none", _) | ("hash", Some(_)) => None,
            (kind, _) => Some(self.handle.found(kind)),
        })
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.debug(f, "ReadWriteLock")
    }
}
