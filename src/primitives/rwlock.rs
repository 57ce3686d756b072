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
            read: Arc::new(RwBackend::new(&client_id, false)),
            write: Arc::new(RwBackend::new(&client_id, true)),
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
#[derive(Clone)]
pub struct ReadWriteLock {
    handle: Handle,
    read: Arc<dyn Backend>,
    write: Arc<dyn Backend>,
}

/// Generates one side's family (`read`, `try_read`, `try_read_for`,
/// `try_read_until`, `read_with`, `with_read`, and the same for `write`): the
/// two differ in their backend, their guard and their docs only.
macro_rules! side {
    (
        $write:literal, $guard:ident, $what:literal,
        $lock:ident, $try_lock:ident, $try_for:ident, $try_until:ident,
        $with_opts:ident, $with_fn:ident,
        $(#[$lock_doc:meta])*
    ) => {
        #[doc = concat!("Takes ", $what, ", waiting as long as it takes")]
        $(#[$lock_doc])*
        pub fn $lock(&self) -> Result<$guard> {
            self.$with_opts(&LockOptions::default())?
                .ok_or(Error::Shutdown)
        }

        #[doc = concat!("One attempt at ", $what, "; never waits. `Ok(None)`: held by")]
        /// others (a writer, or, for a read, a redlease writer waiting for it).
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub fn $try_lock(&self) -> Result<Option<$guard>> {
            self.take($write, &LockOptions::default(), Wait::Once)
                .map(|g| g.map($guard::new))
        }

        #[doc = concat!("Takes ", $what, ", waiting at most `wait`. `Ok(None)`: not in time.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub fn $try_for(&self, wait: Duration) -> Result<Option<$guard>> {
            self.$with_opts(&LockOptions::default().wait(wait))
        }

        #[doc = concat!("Takes ", $what, ", waiting until `deadline` at most. `Ok(None)`: not")]
        /// in time.
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub fn $try_until(&self, deadline: Instant) -> Result<Option<$guard>> {
            self.take($write, &LockOptions::default(), Wait::Until(Some(deadline)))
                .map(|g| g.map($guard::new))
        }

        #[doc = concat!("Takes ", $what, " with per-call options (TTL, wait or deadline,")]
        /// renewal, `max_hold`, a [`CancelToken`](crate::CancelToken), `on_lost`).
        /// Without a wait or deadline it waits as long as it takes.
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), "); [`Error::Config`] for fencing or a")]
        /// scheme (a read-write lock has neither); [`Error::Cancelled`].
        pub fn $with_opts(&self, opts: &LockOptions) -> Result<Option<$guard>> {
            self.take($write, opts, Handle::until(opts))
                .map(|g| g.map($guard::new))
        }

        #[doc = concat!("Runs `f` while holding ", $what, ", then releases it. Waits like")]
        #[doc = concat!("[`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), "), and [`Error::LockLost`] when the")]
        /// lease had ended by the time `f` returned: `f` then ran at least partly
        /// without the hold, and its result is dropped.
        pub fn $with_fn<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
            let guard = self.$lock()?;
            let out = f();
            guard.finish(out)
        }
    };
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

    side!(
        false, ReadGuard, "a read hold",
        read, try_read, try_read_for, try_read_until, read_with, with_read,
        /// (while a writer holds or a redlease writer waits; behind a waiting
        /// writer at most 250 ms, until its readers' next turn, while a
        /// Redisson reader holds).
        ///
        /// # Errors
        /// [`Error::WrongFormat`] when the name holds another format (left as
        /// it is), [`Error::Redis`] when Redis fails or does not answer in time,
        /// [`Error::Shutdown`] when the client is closed.
    );

    side!(
        true, WriteGuard, "the write hold",
        write, try_write, try_write_for, try_write_until, write_with, with_write,
        /// (while others read or write).
        ///
        /// # Errors
        /// [`Error::ReadHeld`] when this thread holds a read of the name, else as
        /// [`read`](Self::read).
    );

    fn take(&self, write: bool, opts: &LockOptions, wait: Wait) -> Result<Option<LockGuard>> {
        let backend = if write { &self.write } else { &self.read };
        match self.handle.take(backend, opts, wait) {
            Err(Error::Redis(f)) if f.redis_error().and_then(|e| e.detail()) == Some(UPGRADE) => {
                Err(Error::ReadHeld {
                    key: self.key().into(),
                })
            }
            // A name of another format: say what it is.
            Err(e) => Err(self.handle.explain(e, || self.found())),
            other => other,
        }
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
        f.debug_struct("ReadWriteLock")
            .field("key", &self.key())
            .field("client", &self.handle.client)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<ReadWriteLock>();
    }
}
