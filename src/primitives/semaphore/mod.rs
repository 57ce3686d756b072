//! [`Semaphore`]: N permits under one name, each permit a lease, in Redisson's
//! `RPermitExpirableSemaphore` format.
//!
//! Layout: this file is the handle, one permit at a time and the count
//! ([`Permits`]); `many.rs` several permits at once; `ticket.rs` a permit's
//! ticket adopted ([`LockClient::adopt_permit`]). The wire format is
//! `scheme/semaphore/`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::options::{LockOptions, Wait};
use crate::error::{Error, Result};
use crate::format::LockFormat;
use crate::primitives::family::acquire_family;
use crate::primitives::handle::Handle;
use crate::primitives::held::PermitGuard;
use crate::scheme::{Admin, Announce, Backend, Found, Release, SemaphoreBackend, State, id_bytes};

mod many;
mod ticket;

impl LockClient {
    /// A handle on the semaphore `name` (under the client's key prefix): at most
    /// N holders at once across every client, redlease or Redisson, sharing it.
    ///
    /// Sends nothing: the semaphore is created by
    /// [`ensure_permits`](Semaphore::ensure_permits),
    /// [`set_permits`](Semaphore::set_permits) or
    /// [`add_permits`](Semaphore::add_permits) (or by a Redisson client); until
    /// then it has no permit to give.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::Unsupported`] on a
    /// Redlock client (a semaphore is one server's format).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// imports.ensure_permits(3)?;
    /// let permit = imports.acquire()?; // one of 3; renewed while it lives
    /// // ... at most 3 processes run this at once ...
    /// permit.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Ok(Semaphore {
            handle: Handle::new(self, name, LockFormat::Semaphore)?,
            // The permit ids carry the client's tag, as its tokens do (and the
            // mark of a client with liveness: `scheme/semaphore/names.rs`).
            backend: Arc::new(SemaphoreBackend::new(&self.inner.id)),
        })
    }
}

/// A semaphore in Redis: N permits under a name, each held as a lease.
///
/// Made by [`LockClient::semaphore`]. Cheap to clone. Acquiring takes one permit
/// and returns a [`PermitGuard`], renewed in the background like a lock's lease
/// and given back when dropped; a holder that dies gives its permit back when its
/// lease ends, or, when its client declared
/// [liveness](crate::LockClientBuilder::liveness), when a caller waiting for a
/// permit finds its session ended (about one liveness after its death; not in
/// a Redis Cluster). [`acquire_many`](Self::acquire_many) and its family take several
/// at once, all or none, as one [`PermitsGuard`](crate::PermitsGuard). Waiting callers are woken by the semaphore's release messages
/// (Redisson's and ours), and poll as a fallback.
#[derive(Clone)]
pub struct Semaphore {
    /// The key is that of the free-permit count.
    handle: Handle,
    backend: Arc<dyn Backend>,
}

/// How many permits a semaphore has, as last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    free: i64,
    held: u64,
}

impl Permits {
    /// Permits free now. Negative when the total was set below the permits held.
    pub fn free(&self) -> i64 {
        self.free
    }
    /// Permits held now (expired leases not counted).
    pub fn held(&self) -> u64 {
        self.held
    }
    /// Free and held.
    pub fn total(&self) -> i64 {
        self.free.saturating_add_unsigned(self.held)
    }
}

impl Semaphore {
    /// The semaphore's name, as passed to [`LockClient::semaphore`].
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The semaphore's key (of its free-permit count): its name with the
    /// client's prefix.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    acquire_family! {
        fn acquire, try_acquire, try_acquire_for, try_acquire_until, acquire_with, with_permit: "gives it back";
        take: take(), line: Until, guard: PermitGuard,
        what: "a permit", busy: "none is free", gave_up: "",
        handle: imports = "semaphore(\"imports\")";
        /// it waits for a release message, the end of the first lease, or a
        /// polling step, and tries again; never returns without a permit but
        /// with an error.
        ///
        /// # Errors
        /// [`Error::WrongFormat`] when the name holds something else (left as it is),
        /// [`Error::Redis`] when Redis fails or does not answer in time (a permit the
        /// attempt may have taken is given back in the background),
        /// [`Error::Shutdown`] when the client is closed.
        waits;
        /// [`Error::Config`] for fencing (a permit has no fencing token) or a
        /// scheme (a semaphore has its own format); [`Error::Cancelled`] when
        /// the wait was cancelled.
        options;
    }

    /// Creates the semaphore with `permits` in all when it does not exist; when it
    /// does, checks that it has that many. One round trip.
    ///
    /// # Errors
    /// [`Error::PermitsMismatch`] when it exists with another total (left as it
    /// is: [`set_permits`](Self::set_permits) changes it), [`Error::Config`] for 0
    /// permits, [`Error::WrongFormat`] when the name holds something else.
    pub fn ensure_permits(&self, permits: u32) -> Result<Permits> {
        let state = self.admin(Admin::Ensure(nonzero(permits)?))?;
        let counted = Permits {
            free: state.free,
            held: state.held,
        };
        if state.existed && counted.total() != i64::from(permits) {
            return Err(Error::PermitsMismatch {
                key: self.key().into(),
                existing: counted.total(),
                requested: permits,
            });
        }
        Ok(counted)
    }

    /// Makes `permits` the semaphore's total (held and free), creating it when
    /// absent (Redisson's `setPermits`). Held permits stay held: lowering the
    /// total below them leaves none free until enough are given back.
    ///
    /// # Errors
    /// [`Error::Config`] for 0 permits, [`Error::WrongFormat`], [`Error::Redis`].
    pub fn set_permits(&self, permits: u32) -> Result<Permits> {
        self.admin(Admin::Set(nonzero(permits)?)).map(Permits::from)
    }

    /// Adds `permits` free permits, creating the semaphore when absent
    /// (Redisson's `addPermits`).
    ///
    /// # Errors
    /// As [`set_permits`](Self::set_permits).
    pub fn add_permits(&self, permits: u32) -> Result<Permits> {
        self.admin(Admin::Add(nonzero(permits)?)).map(Permits::from)
    }

    /// The permits free now (0 when the semaphore does not exist), after giving
    /// back those whose lease ended.
    ///
    /// # Errors
    /// [`Error::WrongFormat`], [`Error::Redis`].
    pub fn available_permits(&self) -> Result<i64> {
        Ok(self.admin(Admin::State)?.free)
    }

    /// The permits free and held; `None` when the semaphore does not exist.
    ///
    /// # Errors
    /// [`Error::WrongFormat`], [`Error::Redis`].
    pub fn permits(&self) -> Result<Option<Permits>> {
        let state = self.admin(Admin::State)?;
        Ok((state.existed || state.held > 0).then(|| Permits::from(state)))
    }

    /// Forces the release of the permit `permit_id` (32 hex digits, or 40 from a
    /// redlease client with liveness), whoever
    /// took it: a permit recorded by a process that died, or a Redisson
    /// client's. [`Release::Expired`] when it was not held (released already, or
    /// its lease had ended). A holder's own [`PermitGuard::unlock`] needs no id.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an id of neither form, [`Error::Redis`].
    pub fn release_by_id(&self, permit_id: &str) -> Result<Release> {
        if id_bytes(permit_id).is_err() {
            return Err(Error::Invalid {
                what: "permit id",
                reason: "a permit id is 32 hex digits, or 40 from a client with liveness",
            });
        }
        let hub = &self.handle.client.inner.hub;
        let channel = self.backend.channel(self.key());
        let announce = Announce::always(&channel);
        let freed = hub
            .topology
            .release(&*self.backend, self.key(), announce, permit_id, &[])?;
        Ok(freed.outcome)
    }

    fn take(&self, opts: &LockOptions, wait: Wait) -> Result<Option<PermitGuard>> {
        match self.handle.take(&self.backend, opts, wait) {
            Ok(guard) => Ok(guard.map(PermitGuard::from)),
            // A value that is no count, or a key of another type: say what it is.
            Err(e) => Err(self.handle.explain(e, || self.found())),
        }
    }

    fn admin(&self, op: Admin) -> Result<State> {
        match self.read(op)? {
            Found::Semaphore(state) => Ok(state),
            Found::Other(kind) => Err(self.handle.wrong_format(self.handle.found(&kind))),
        }
    }

    /// What the name holds when it is not a semaphore's count.
    fn found(&self) -> Result<Option<&'static str>> {
        Ok(match self.read(Admin::State)? {
            Found::Semaphore(_) => None,
            Found::Other(kind) => Some(self.handle.found(&kind)),
        })
    }

    fn read(&self, op: Admin) -> Result<Found> {
        let sharded = self.handle.client.inner.hub.topology.sharded();
        let cmd = op.cmd(self.key(), sharded);
        let reply = self.handle.query(self.backend.scripts(), &cmd)?;
        Ok(Admin::reply(&reply)?)
    }
}

impl From<State> for Permits {
    fn from(s: State) -> Self {
        Self {
            free: s.free,
            held: s.held,
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.debug(f, "Semaphore")
    }
}

/// Permits must be at least 1 (a `u32` cannot be beyond Redis's counts).
fn nonzero(permits: u32) -> Result<u32> {
    if permits == 0 {
        return Err(Error::config("permits", "must be at least 1"));
    }
    Ok(permits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_zero_permits_are_refused() {
        let p = Permits { free: -1, held: 3 };
        assert_eq!(p.total(), 2);
        assert!(nonzero(0).is_err());
    }
}
