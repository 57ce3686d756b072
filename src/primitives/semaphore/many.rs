//! Several permits at once: [`Semaphore::acquire_many`] and its family, each
//! returning one [`PermitsGuard`] for all of them. The wire side (Redisson's
//! `acquire(permits)` format, the reservations of waiting callers) is
//! `scheme/semaphore/many.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Semaphore;
use crate::client::options::{LockOptions, Wait};
use crate::error::{Error, Result};
use crate::primitives::held::PermitsGuard;
use crate::scheme::{Admin, Backend, MAX_MANY, ManyBackend};

impl Semaphore {
    /// Takes `permits` permits at once, all or none, waiting as long as it
    /// takes: it waits for a release message, the end of the first lease, or a
    /// polling step, and tries again; never returns without the permits but
    /// with an error.
    ///
    /// The permits are one hold: one [`PermitsGuard`], renewed as one lease
    /// (every permit's lease moves together) and given back together. While it
    /// waits, the call reserves its permits: redlease callers arriving later
    /// (for one permit or several) take only what is free beyond them, so it
    /// waits at most until `permits` of the permits held when it arrived are
    /// given back or their leases end. Redisson's clients do not see the
    /// reservation: a steady stream of their acquires may still pass it. One
    /// round trip before the first attempt reads the semaphore's total.
    ///
    /// # Errors
    /// [`Error::Invalid`] for 0 permits, more than 10 000, or more than the
    /// semaphore has in all (nothing is taken or waited for; a total lowered
    /// below `permits` while the call waits ends the wait with it);
    /// [`Error::WrongFormat`] when the name holds something else;
    /// [`Error::Redis`] when Redis fails or does not answer in time (permits
    /// the attempt may have taken are given back in the background);
    /// [`Error::Shutdown`] when the client is closed.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// imports.ensure_permits(8)?;
    /// let big = imports.acquire_many(3)?; // a job that weighs 3 of the 8
    /// assert_eq!(big.permits(), 3);
    /// big.unlock()?; // gives back all 3
    /// # Ok(()) }
    /// ```
    pub fn acquire_many(&self, permits: u32) -> Result<PermitsGuard> {
        self.acquire_many_with(permits, &LockOptions::default())?
            .ok_or(Error::Shutdown)
    }

    /// One attempt at `permits` permits, all or none; never waits and reserves
    /// nothing. `Ok(None)`: fewer are free (nothing was taken).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// match imports.try_acquire_many(3)? {
    ///     Some(held) => drop(held),
    ///     None => println!("fewer than 3 are free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many(&self, permits: u32) -> Result<Option<PermitsGuard>> {
        self.take_many(permits, &LockOptions::default(), Wait::Once)
    }

    /// Takes `permits` permits, all or none, waiting at most `wait`.
    /// `Ok(None)`: not in time (the call's reservation is withdrawn).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// let wait = std::time::Duration::from_secs(5);
    /// if let Some(held) = imports.try_acquire_many_for(3, wait)? {
    ///     drop(held);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<PermitsGuard>> {
        self.acquire_many_with(permits, &LockOptions::default().wait(wait))
    }

    /// Takes `permits` permits, all or none, waiting until `deadline` at most.
    /// `Ok(None)`: not in time (the call's reservation is withdrawn).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    /// if let Some(held) = imports.try_acquire_many_until(3, deadline)? {
    ///     drop(held);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many_until(
        &self,
        permits: u32,
        deadline: Instant,
    ) -> Result<Option<PermitsGuard>> {
        self.take_many(
            permits,
            &LockOptions::default(),
            Wait::Until(Some(deadline)),
        )
    }

    /// Takes `permits` permits with per-call [`LockOptions`]: the lease's TTL,
    /// a wait or deadline, renewal, a [`CancelToken`](crate::CancelToken),
    /// `on_lost`. Without a wait or deadline it waits as
    /// [`acquire_many`](Self::acquire_many) does, as long as it takes.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many); [`Error::Config`] for fencing or
    /// a scheme; [`Error::Cancelled`] when the wait was cancelled.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// let opts = redlease::LockOptions::new().wait(std::time::Duration::from_secs(5));
    /// if let Some(held) = imports.acquire_many_with(3, &opts)? {
    ///     drop(held);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquire_many_with(
        &self,
        permits: u32,
        opts: &LockOptions,
    ) -> Result<Option<PermitsGuard>> {
        let wait = Wait::Until(opts.deadline_from(Instant::now()));
        self.take_many(permits, opts, wait)
    }

    /// Runs `f` while holding `permits` permits, then gives them back. Waits as
    /// [`acquire_many`](Self::acquire_many) does, as long as it takes.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), and [`Error::LockLost`] when the
    /// hold had ended by the time `f` returned: `f` then ran at least partly
    /// without it, and its result is dropped.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// let answer = imports.with_permits(2, || 6 * 7)?;
    /// assert_eq!(answer, 42);
    /// # Ok(()) }
    /// ```
    pub fn with_permits<R>(&self, permits: u32, f: impl FnOnce() -> R) -> Result<R> {
        let held = self.acquire_many(permits)?;
        let out = f();
        held.finish(out)
    }

    fn take_many(
        &self,
        permits: u32,
        opts: &LockOptions,
        wait: Wait,
    ) -> Result<Option<PermitsGuard>> {
        let invalid = |reason| Error::Invalid {
            what: "permit count",
            reason,
        };
        if permits == 0 {
            return Err(invalid("at least 1 permit is taken"));
        }
        if permits > MAX_MANY {
            return Err(invalid("at most 10000 permits are taken at once"));
        }
        // Checked before waiting, so that no call waits for what cannot come;
        // the acquire checks again on every attempt.
        let state = self.admin(Admin::State)?;
        if (state.existed || state.held > 0)
            && i64::from(permits) > state.free.saturating_add_unsigned(state.held)
        {
            return Err(invalid("more permits than the semaphore has in all"));
        }
        let many = Arc::new(ManyBackend::new(&self.handle.client.inner.id, permits));
        let backend: Arc<dyn Backend> = Arc::clone(&many) as Arc<dyn Backend>;
        let taken = self.handle.take(&backend, opts, wait);
        if !matches!(taken, Ok(Some(_))) && !matches!(wait, Wait::Once) {
            // A wait that ended without the permits leaves no reservation
            // behind to hold others back (one that cannot be withdrawn now
            // lapses a TTL after the last attempt).
            let sharded = self.handle.client.inner.hub.topology.sharded();
            let cmd = many.withdraw_cmd(self.key(), sharded);
            if let Err(e) = self.handle.query(self.backend.scripts(), &cmd) {
                log::debug!("reservation on `{}` not withdrawn: {e}", self.key());
            }
        }
        match taken {
            Ok(guard) => Ok(guard.map(PermitsGuard::from)),
            Err(Error::Redis(e)) if e.redis_error().and_then(|r| r.code()) == Some("TOOMANY") => {
                Err(invalid("more permits than the semaphore has in all"))
            }
            Err(e) => Err(self.handle.explain(e, || self.found())),
        }
    }
}
