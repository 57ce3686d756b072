//! The plumbing every named primitive shares ([`FairLock`](crate::FairLock),
//! [`ReadWriteLock`](crate::ReadWriteLock), [`Semaphore`](crate::Semaphore)):
//! one [`Handle`] holding the name as passed and its key, made with the same
//! checks, acquiring through the client's one loop, and naming what a key of
//! another format holds with the one [`Error::WrongFormat`]. The guards these
//! handles return are defined once, in `held.rs`; the wire formats are in
//! `scheme/`.

use std::fmt;
use std::sync::Arc;

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::client::options::{LockOptions, Wait};
use crate::error::{Error, Result};
use crate::format::LockFormat;
use crate::scheme::Backend;
use crate::topology::Scripts;

/// A named primitive on one client: its name, its key, and the calls they share.
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) client: LockClient,
    /// The name as the caller passed it.
    name: Box<str>,
    /// The name with the client's prefix.
    key: Box<str>,
    /// What the primitive is: the format its key must hold.
    format: LockFormat,
}

impl Handle {
    /// A handle on `name` for a primitive of `format`. Sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::Unsupported`] where the
    /// topology cannot hold one server's format (Redlock).
    pub(crate) fn new(client: &LockClient, name: &str, format: LockFormat) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::Invalid {
                what: "lock key",
                reason: "the key is empty",
            });
        }
        client.inner.hub.topology.holds(format.phrase())?;
        let key = format!("{}{name}", client.inner.settings.key_prefix);
        Ok(Self {
            client: client.clone(),
            name: name.into(),
            key: key.into(),
            format,
        })
    }

    /// The name as the caller passed it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The name with the client's prefix.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The client's UUID, hyphenated: the first half of its Redisson owner fields.
    pub(crate) fn client_id(&self) -> String {
        self.client.inner.id.hyphenated()
    }

    /// Where the client counts the holds of dead liveness sessions its
    /// waiters broke.
    pub(crate) fn broken(&self) -> &std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.client.inner.id.broken()
    }

    /// One acquire of the name through `backend`, waiting as `wait` says.
    /// Errors come back as the client's loop returns them: see
    /// [`explain`](Self::explain).
    ///
    /// # Errors
    /// [`Error::Config`] for fencing or a scheme, which no primitive has (its
    /// format is its backend's); the acquire's errors.
    pub(crate) fn take(
        &self,
        backend: &Arc<dyn Backend>,
        opts: &LockOptions,
        wait: Wait,
    ) -> Result<Option<LockGuard>> {
        if opts.fencing == Some(true) {
            return Err(Error::config(
                "fencing",
                "a fair lock, read-write lock or semaphore has no fencing token",
            ));
        }
        if opts.scheme.is_some() {
            return Err(Error::config(
                "scheme",
                "a fair lock, read-write lock or semaphore has its own format",
            ));
        }
        let mut opts = opts.clone().fencing(false);
        opts.backend = Some(Arc::clone(backend));
        self.client.acquire(&self.name, &opts, wait)
    }

    /// The `Debug` output of the primitive `kind` on this handle: its key and
    /// client.
    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        f.debug_struct(kind)
            .field("key", &self.key())
            .field("client", &self.client)
            .finish_non_exhaustive()
    }

    /// Turns a Redis failure of a call on the name into [`Error::WrongFormat`]
    /// when `found` (a read of what the key holds) names another format; other
    /// errors, and a failed or clean read, pass `e` on.
    pub(crate) fn explain(
        &self,
        e: Error,
        found: impl FnOnce() -> Result<Option<&'static str>>,
    ) -> Error {
        match e {
            Error::Redis(_) => match found() {
                Ok(Some(found)) => self.wrong_format(found),
                _ => e,
            },
            e => e,
        }
    }

    /// [`Error::WrongFormat`] for this name: it holds `found`.
    pub(crate) fn wrong_format(&self, found: &'static str) -> Error {
        Error::wrong_format(&self.key, self.format, found)
    }

    /// Runs `cmd`, a call of one of `scripts` or a plain read, on the node of
    /// the name's slot.
    ///
    /// # Errors
    /// Redis failures.
    pub(crate) fn query(&self, scripts: Scripts, cmd: &redis::Cmd) -> Result<redis::Value> {
        self.client
            .inner
            .hub
            .topology
            .query(&self.key, scripts, cmd)
    }

    /// Redis's type name of `key` (the name's key or one beside it, in its slot).
    ///
    /// # Errors
    /// Redis failures.
    pub(crate) fn kind(&self, key: &str, scripts: Scripts) -> Result<String> {
        let mut cmd = redis::cmd("TYPE");
        cmd.arg(key);
        let reply = self.query(scripts, &cmd)?;
        Ok(redis::from_redis_value_ref(&reply).unwrap_or_default())
    }

    /// What a key of Redis type `kind` holds, said for a caller that asked for
    /// this handle's format.
    pub(crate) fn found(&self, kind: &str) -> &'static str {
        found(kind, self.format)
    }
}

/// What a key of Redis type `kind` that `expected` does not write probably is.
fn found(kind: &str, expected: LockFormat) -> &'static str {
    match (kind, expected) {
        ("string", LockFormat::Semaphore) => "a string that is no permit count (a token lock?)",
        ("string", _) => "a string (a token lock or a semaphore?)",
        ("hash", LockFormat::Semaphore) => "a hash (a reentrant or read-write lock?)",
        ("hash", LockFormat::ReadWrite) => "a hash without `mode` (a reentrant lock?)",
        // A fair lock's own key is a hash: one found beside it is misplaced.
        ("hash", _) => "a hash where the queue belongs",
        ("list", _) => "a list",
        ("set", _) => "a set",
        ("zset", _) => "a sorted set",
        ("stream", _) => "a stream",
        _ => "a value of another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_names_what_it_found_in_its_own_terms() {
        use LockFormat::{Fair, ReadWrite, Semaphore};
        let cases = [
            ("string", Fair, "a string (a token lock or a semaphore?)"),
            ("list", Fair, "a list"),
            (
                "hash",
                ReadWrite,
                "a hash without `mode` (a reentrant lock?)",
            ),
            (
                "hash",
                Semaphore,
                "a hash (a reentrant or read-write lock?)",
            ),
            (
                "string",
                Semaphore,
                "a string that is no permit count (a token lock?)",
            ),
            ("vectorset", Fair, "a value of another type"),
        ];
        for (kind, format, said) in cases {
            assert_eq!(found(kind, format), said, "{kind} for {format:?}");
        }
    }
}
