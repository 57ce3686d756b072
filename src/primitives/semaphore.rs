//! [`Semaphore`]: N permits under one name, each permit a lease, in Redisson's
//! `RPermitExpirableSemaphore` format.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::options::LockOptions;
use crate::error::{Error, Result};
use crate::primitives::permit::PermitGuard;
use crate::scheme::{
    Admin, Announce, Backend, Found, Release, Scheme, SemaphoreBackend, State, id_bytes,
};

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
    /// [`Error::InvalidKey`] for an empty name; [`Error::Config`] on a Redlock
    /// client (a semaphore is one server's format).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// imports.ensure_permits(3)?;
    /// let permit = imports.acquire()?; // one of 3; renewed while it lives
    /// // ... at most 3 processes run this at once ...
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        let (hub, prefix) = (&self.inner.hub, &self.inner.settings.key_prefix);
        let client_id = self.inner.reentrant.client_id().unwrap_or_default();
        if name.is_empty() {
            return Err(Error::InvalidKey {
                reason: "the key is empty",
            });
        }
        if hub.topology.check(&Scheme::Reentrant, false).is_err() {
            return Err(Error::config(
                "semaphore",
                "a semaphore is one server's format (Redisson's); redlock cannot hold it",
            ));
        }
        let simple: String = client_id.chars().filter(char::is_ascii_hexdigit).collect();
        let tag = match simple.get(..16) {
            Some(tag) => tag.to_ascii_lowercase(),
            None => format!("{:016x}", fastrand::u64(..)),
        };
        Ok(Semaphore {
            client: self.clone(),
            bare: name.to_owned(),
            full: format!("{prefix}{name}"),
            backend: Arc::new(SemaphoreBackend::new(&tag)),
        })
    }
}

/// A semaphore in Redis: N permits under a name, each held as a lease.
///
/// Made by [`LockClient::semaphore`]. Cheap to clone. Acquiring takes one permit
/// and returns a [`PermitGuard`], renewed in the background like a lock's lease
/// and given back when dropped; a holder that dies gives its permit back when its
/// lease ends. Waiting callers are woken by the semaphore's release messages
/// (Redisson's and ours), and poll as a fallback.
#[derive(Clone)]
pub struct Semaphore {
    client: LockClient,
    /// The name without the client's prefix, as the lock entry points take it.
    bare: String,
    /// The name with the client's prefix: the key of the free-permit count.
    full: String,
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
    /// The semaphore's name, with the client's prefix.
    pub fn name(&self) -> &str {
        &self.full
    }

    /// Takes a permit, waiting as long as it takes.
    ///
    /// Waits for a release message, the end of the first lease, or a polling step,
    /// and tries again; never returns without a permit but with an error.
    ///
    /// # Errors
    /// [`Error::WrongFormat`] when the name holds something else (left as it is),
    /// [`Error::Redis`] when Redis fails or does not answer in time (a permit the
    /// attempt may have taken is given back in the background),
    /// [`Error::Shutdown`] when the client is closed.
    pub fn acquire(&self) -> Result<PermitGuard> {
        self.take(&LockOptions::default(), None, true)?
            .ok_or(Error::Shutdown)
    }

    /// One attempt to take a permit; never waits. `Ok(None)`: none is free.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        self.take(&LockOptions::default(), Some(Instant::now()), false)
    }

    /// Takes a permit, waiting at most `wait`. `Ok(None)`: none came free in time.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<PermitGuard>> {
        self.take(
            &LockOptions::default(),
            Instant::now().checked_add(wait),
            true,
        )
    }

    /// Takes a permit, waiting until `deadline` at most.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<PermitGuard>> {
        self.take(&LockOptions::default(), Some(deadline), true)
    }

    /// Takes a permit with per-call options: TTL, wait or deadline, renewal,
    /// `max_hold`, a [`CancelToken`](crate::CancelToken), an `on_lost` callback,
    /// replica confirmation. Without a wait or deadline it waits as long as it
    /// takes, and never returns `Ok(None)`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::Config`] for fencing (a permit has
    /// no fencing token) or a scheme (a semaphore has its own format);
    /// [`Error::Cancelled`] when the wait was cancelled.
    pub fn acquire_with(&self, opts: &LockOptions) -> Result<Option<PermitGuard>> {
        let now = Instant::now();
        let by_wait = opts.wait.and_then(|w| now.checked_add(w));
        let deadline = match (by_wait, opts.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.take(opts, deadline, true)
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
                name: self.full.clone(),
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

    /// Gives back the permit `permit_id` (32 hex digits), whoever took it: a
    /// permit recorded by a process that died, or a Redisson client's.
    /// [`Release::Expired`] when it was not held (released already, or its lease
    /// had ended).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an id that is not 32 hex digits, [`Error::Redis`].
    pub fn release(&self, permit_id: &str) -> Result<Release> {
        if id_bytes(permit_id).is_err() {
            return Err(Error::InvalidKey {
                reason: "a permit id is 32 hex digits",
            });
        }
        let hub = &self.client.inner.hub;
        let channel = self.backend.channel(&self.full);
        let announce = Announce::always(&channel);
        let freed = hub
            .topology
            .release(&*self.backend, &self.full, announce, permit_id, &[])?;
        Ok(freed.outcome)
    }

    fn take(
        &self,
        opts: &LockOptions,
        deadline: Option<Instant>,
        waits: bool,
    ) -> Result<Option<PermitGuard>> {
        if opts.fencing == Some(true) {
            return Err(Error::config("fencing", "a permit has no fencing token"));
        }
        if opts.scheme.is_some() {
            return Err(Error::config("scheme", "a semaphore has its own format"));
        }
        let mut opts = opts.clone().fencing(false);
        opts.backend = Some(Arc::clone(&self.backend));
        let deadline = if waits {
            deadline
        } else {
            Some(Instant::now())
        };
        match self.client.acquire(&self.bare, &opts, deadline, false) {
            Ok(guard) => Ok(guard.map(|g| PermitGuard::new(g, self.full.clone()))),
            // A value that is no count, or a key of another type: say what it is.
            Err(e @ Error::Redis(_)) => match self.admin(Admin::State) {
                Err(found @ Error::WrongFormat { .. }) => Err(found),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    fn admin(&self, op: Admin) -> Result<State> {
        let hub = &self.client.inner.hub;
        let cmd = op.cmd(&self.full, hub.topology.sharded());
        let reply = hub
            .topology
            .query(&self.full, self.backend.scripts(), &cmd)?;
        match Admin::reply(&reply)? {
            Found::Semaphore(state) => Ok(state),
            Found::Other(kind) => Err(Error::WrongFormat {
                name: self.full.as_str().into(),
                found: found(&kind),
            }),
        }
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
        f.debug_struct("Semaphore")
            .field("name", &self.full)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Permits must be at least 1 (a `u32` cannot be beyond Redis's counts).
fn nonzero(permits: u32) -> Result<u32> {
    if permits == 0 {
        return Err(Error::config("permits", "must be at least 1"));
    }
    Ok(permits)
}

/// Redis's type name as the format found under a name.
fn found(kind: &str) -> &'static str {
    match kind {
        "string" => "a string that is no permit count (a token lock?)",
        "hash" => "a hash (a reentrant or read-write lock?)",
        "list" => "a list",
        "set" => "a set",
        "zset" => "a sorted set",
        "stream" => "a stream",
        _ => "a value of another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_cross_threads_and_counts_add_up() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Semaphore>();
        send::<PermitGuard>();
        let p = Permits { free: -1, held: 3 };
        assert_eq!(p.total(), 2);
        assert!(nonzero(0).is_err());
        assert_eq!(found("hash"), "a hash (a reentrant or read-write lock?)");
    }
}
