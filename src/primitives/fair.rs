//! [`FairLock`]: a lock taken in arrival order, in Redisson's `RFairLock`
//! format.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::error::{Error, Result};
use crate::scheme::{Backend, FAIR_SCRIPTS, FairBackend, Scheme, fair_keys, leave_cmd};

impl LockClient {
    /// A handle on the fair lock `name` (under the client's key prefix): a lock
    /// whose waiters, redlease or Redisson, get it in their order of arrival.
    /// Its calls return the [`LockGuard`] of any lock. Sends nothing.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an empty name; [`Error::Config`] on a Redlock
    /// client (a fair lock is one server's format).
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
        if name.is_empty() {
            return Err(Error::InvalidKey {
                reason: "the key is empty",
            });
        }
        if self
            .inner
            .hub
            .topology
            .check(&Scheme::Reentrant, false)
            .is_err()
        {
            return Err(Error::config(
                "fair_lock",
                "a fair lock is one server's format (Redisson's); redlock cannot hold it",
            ));
        }
        let client_id = self.inner.reentrant.client_id().unwrap_or_default();
        Ok(FairLock {
            client: self.clone(),
            bare: name.to_owned(),
            full: format!("{}{name}", self.inner.settings.key_prefix),
            backend: Arc::new(FairBackend::new(client_id)),
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
/// which wakes the new head.
#[derive(Clone)]
pub struct FairLock {
    client: LockClient,
    /// The name without the client's prefix, as the lock entry points take it.
    bare: String,
    /// The name with the client's prefix.
    full: String,
    backend: Arc<dyn Backend>,
}

impl FairLock {
    /// The lock's name, with the client's prefix.
    pub fn name(&self) -> &str {
        &self.full
    }

    /// Takes the lock, waiting for its turn as long as it takes.
    ///
    /// # Errors
    /// [`Error::NotFairLock`] when the name or its queue holds another format
    /// (left as it is), [`Error::Redis`] when Redis fails or does not answer in
    /// time, [`Error::Shutdown`] when the client is closed.
    pub fn lock(&self) -> Result<LockGuard> {
        self.lock_with(&LockOptions::default())?
            .ok_or(Error::Shutdown)
    }

    /// One attempt; never waits, never queues. `Ok(None)`: held, or others
    /// wait before us.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.take(&LockOptions::default(), Some(Instant::now()))
    }

    /// Takes the lock, waiting at most `wait`. `Ok(None)`: not in time (its
    /// queue entry is taken out).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.lock_with(&LockOptions::default().wait(wait))
    }

    /// Takes the lock with per-call options (TTL, wait or deadline, renewal,
    /// `max_hold`, a [`CancelToken`](crate::CancelToken), `on_lost`). Without a
    /// wait or deadline it waits as long as it takes.
    ///
    /// # Errors
    /// As [`lock`](Self::lock); [`Error::Config`] for fencing or a scheme (a
    /// fair lock has neither); [`Error::Cancelled`].
    pub fn lock_with(&self, opts: &LockOptions) -> Result<Option<LockGuard>> {
        let by_wait = opts.wait.and_then(|w| Instant::now().checked_add(w));
        let deadline = match (by_wait, opts.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.take(opts, deadline)
    }

    /// How many callers wait in the queue (Redisson's and ours).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis fails.
    pub fn queue_len(&self) -> Result<u64> {
        let [queue, _, _] = fair_keys(&self.full);
        let mut cmd = redis::cmd("LLEN");
        cmd.arg(&queue);
        let reply = self
            .client
            .inner
            .hub
            .topology
            .query(&self.full, &FAIR_SCRIPTS, &cmd)?;
        Ok(redis::from_redis_value_ref(&reply).unwrap_or(0))
    }

    fn take(&self, opts: &LockOptions, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        if opts.fencing == Some(true) {
            return Err(Error::config("fencing", "a fair lock has no fencing token"));
        }
        if opts.scheme.is_some() {
            return Err(Error::config("scheme", "a fair lock has its own format"));
        }
        let mut opts = opts.clone().fencing(false);
        opts.backend = Some(Arc::clone(&self.backend));
        let waits = deadline.is_none_or(|d| d > Instant::now());
        match self.client.acquire(&self.bare, &opts, deadline, false) {
            // A caller that stops waiting leaves the queue (best effort: else its
            // entry is dropped at its deadline).
            out @ (Ok(None) | Err(Error::Cancelled { .. } | Error::Shutdown)) => {
                if waits {
                    self.leave();
                }
                out
            }
            Err(e @ Error::Redis(_)) => match self.found() {
                Ok(Some(found)) => Err(Error::NotFairLock {
                    name: self.full.as_str().into(),
                    found,
                }),
                _ => Err(e),
            },
            other => other,
        }
    }

    /// Takes the calling thread's entry out of the queue, waking the next
    /// waiter when it was the head of a free lock.
    fn leave(&self) {
        let client_id = self.client.inner.reentrant.client_id().unwrap_or_default();
        let cmd = leave_cmd(&self.full, client_id);
        if let Err(e) = self
            .client
            .inner
            .hub
            .topology
            .query(&self.full, &FAIR_SCRIPTS, &cmd)
        {
            log::debug!("{}: leaving the fair lock's queue failed: {e}", self.full);
        }
    }

    /// What the name or its queue holds when it is not a fair lock.
    fn found(&self) -> Result<Option<&'static str>> {
        let [queue, timeouts, _] = fair_keys(&self.full);
        let topology = &self.client.inner.hub.topology;
        for (key, fits) in [(&self.full, "hash"), (&queue, "list"), (&timeouts, "zset")] {
            let mut cmd = redis::cmd("TYPE");
            cmd.arg(key);
            let reply = topology.query(&self.full, &FAIR_SCRIPTS, &cmd)?;
            let kind: String = redis::from_redis_value_ref(&reply).unwrap_or_default();
            if kind != "none" && kind != fits {
                return Ok(Some(found(&kind)));
            }
        }
        Ok(None)
    }
}

/// What a key of type `kind` that no fair lock writes probably is.
fn found(kind: &str) -> &'static str {
    match kind {
        "string" => "a string (a token lock or a semaphore?)",
        "hash" => "a hash where the queue belongs",
        "list" => "a list",
        "set" => "a set",
        "zset" => "a sorted set",
        "stream" => "a stream",
        _ => "a value of another type",
    }
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.full)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_threads_and_formats_are_named() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<FairLock>();
        assert_eq!(found("string"), "a string (a token lock or a semaphore?)");
        assert_eq!(found("list"), "a list");
    }
}
