//! [`FairLock`]: a lock taken in arrival order, in Redisson's `RFairLock`
//! format.

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
use crate::scheme::{Backend, FAIR_SCRIPTS, FairBackend, fair_keys, leave_cmd};

impl LockClient {
    /// A handle on the fair lock `name` (under the client's key prefix): a lock
    /// whose waiters, redlease or Redisson, get it in their order of arrival.
    /// Its calls return the [`LockGuard`] of any lock. Sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::Unsupported`] on a
    /// Redlock client (a fair lock is one server's format).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let turn = client.fair_lock("deploy")?;
    /// let guard = turn.lock()?; // after every caller that queued before
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        let handle = Handle::new(self, name, LockFormat::Fair)?;
        Ok(FairLock {
            backend: Arc::new(FairBackend::new(&handle.client_id(), handle.broken())),
            handle,
        })
    }
}

/// A lock granted in arrival order across processes.
///
/// Made by [`LockClient::fair_lock`]. Cheap to clone. A hold belongs to the
/// client and the calling thread (Redisson's `<uuid>:<thread id>`), which may
/// lock again while it holds it. A waiter queues once, on its first busy
/// attempt, and keeps its place while it lives, whichever side (redlease or
/// Redisson) acquires before it: each of its attempts (at least one a second)
/// extends its entry, scored as Redisson's arithmetic expects; an entry not
/// extended for 4 s is dropped by the next attempt of any redlease waiter,
/// which wakes the new head. Its calls return the [`LockGuard`] of any lock
/// (without a [`fence`](LockGuard::fence)). A waiter breaks the lock of a
/// holder whose [liveness](crate::LockClientBuilder::liveness) session ended,
/// and the queue's head is woken, as the holder's release would.
#[derive(Clone)]
pub struct FairLock {
    handle: Handle,
    backend: Arc<dyn Backend>,
}

impl FairLock {
    /// The lock's name, as passed to [`LockClient::fair_lock`].
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The lock's key: its name with the client's prefix.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    acquire_family! {
        fn lock, try_lock, try_lock_for, try_lock_until, lock_with, with_lock: "releases it";
        take: take(), line: Until, guard: LockGuard,
        what: "the lock", busy: "held, or others wait before us",
        gave_up: " (its queue entry is taken out)",
        handle: turn = "fair_lock(\"deploy\")";
        /// its turn comes after every caller, redlease or Redisson, that
        /// queued before it.
        ///
        /// # Errors
        /// [`Error::WrongFormat`] when the name or its queue holds another format
        /// (left as it is), [`Error::Redis`] when Redis fails or does not answer in
        /// time, [`Error::Shutdown`] when the client is closed.
        waits;
        /// [`Error::Config`] for fencing or a scheme (a fair lock has neither);
        /// [`Error::Cancelled`].
        options;
    }

    /// How many callers wait in the queue (Redisson's and ours).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis fails.
    pub fn queue_len(&self) -> Result<u64> {
        let [queue, _, _] = fair_keys(self.key());
        let mut cmd = redis::cmd("LLEN");
        cmd.arg(&queue);
        let reply = self.handle.query(&FAIR_SCRIPTS, &cmd)?;
        Ok(redis::from_redis_value_ref(&reply).unwrap_or(0))
    }

    fn take(&self, opts: &LockOptions, wait: Wait) -> Result<Option<LockGuard>> {
        let waits = wait.bounds().0.is_none_or(|d| d > Instant::now());
        match self.handle.take(&self.backend, opts, wait) {
            // A caller that stops waiting leaves the queue (best effort: else its
            // entry is dropped at its deadline).
            out @ (Ok(None) | Err(Error::Cancelled { .. } | Error::Shutdown)) => {
                if waits {
                    self.leave();
                }
                out
            }
            Err(e) => Err(self.handle.explain(e, || self.found())),
            other => other,
        }
    }

    /// Takes the calling thread's entry out of the queue, waking the next
    /// waiter when it was the head of a free lock.
    fn leave(&self) {
        let cmd = leave_cmd(self.key(), &self.handle.client_id());
        if let Err(e) = self.handle.query(&FAIR_SCRIPTS, &cmd) {
            log::debug!("{}: leaving the fair lock's queue failed: {e}", self.key());
        }
    }

    /// What the name or its queue holds when it is not a fair lock.
    fn found(&self) -> Result<Option<&'static str>> {
        let [queue, timeouts, _] = fair_keys(self.key());
        for (key, fits) in [(self.key(), "hash"), (&queue, "list"), (&timeouts, "zset")] {
            let kind = self.handle.kind(key, &FAIR_SCRIPTS)?;
            if kind != "none" && kind != fits {
                return Ok(Some(self.handle.found(&kind)));
            }
        }
        Ok(None)
    }
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.debug(f, "FairLock")
    }
}
