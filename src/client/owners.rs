//! [`LockClient::inspect`] and [`LockClient::held`]: who holds a lock, and what
//! this client holds.

use super::LockClient;
use super::follow::following;
use crate::client::inspect::{self, HeldLock, LockInfo};
use crate::error::{Error, Operation, Result};
use crate::net::connection::Conn;
use crate::owner::Owner;
use crate::scheme::Keys;
use crate::threads::cancel::CancelToken;
use crate::topology::Topology;
use std::sync::Arc;
use std::time::Instant;

impl LockClient {
    /// Reads the lock `name` as Redis shows it: its format, time left, the
    /// prefix's fence counter, and each holder with its owner (host, process id,
    /// program, alive or gone), from the holder's client's session record.
    /// Holders are a token's or timestamp's value, each owner field of a
    /// reentrant lock, each reader and writer field of a read-write lock, and
    /// each permit id of a semaphore, expired ones included (up to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS)); a fair lock's waiters are in
    /// [`LockInfo::queue`]. The same reading as [`LockInfo::read`] on a plain
    /// connection.
    ///
    /// Costs two round trips and one more per holder that names a redlease
    /// client; locks pay nothing for it. A token of another client (redis-py) or
    /// a timestamp has no owner to name ([`Owner::None`](crate::Owner::None)); a
    /// session record of another version or garbled is
    /// [`Owner::Unknown`](crate::Owner::Unknown), never a guess. With Redlock,
    /// the first master that answers is read; in a cluster, the key's master.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name, [`Error::Redis`] when no node
    /// answered within the read timeout.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// for holder in client.inspect("invoice:42")?.holders() {
    ///     if let Some(s) = holder.owner().session() {
    ///         println!("held by pid {} on {} ({})", s.pid(), s.host(), s.program());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<LockInfo> {
        let prefix = &self.inner.settings.key_prefix;
        let keys = Keys::new(prefix, name, &*self.inner.default_backend)?;
        let topology = &self.inner.hub.topology;
        let shutdown = &self.inner.hub.shutdown;
        let fence = topology.fence_of(&keys);
        let info = on_reader(topology, shutdown, &keys.lock, |c| {
            c.run(|c| inspect::snapshot(c, &keys.lock, &fence))
        })?;
        // A session record lives where its own key does (another master of a
        // cluster), and on every master of a quorum.
        info.resolve(|tag| {
            let record = tag.session_key(prefix);
            on_reader(topology, shutdown, &record, |c| {
                c.run(|c| Owner::lookup(c, prefix, tag))
            })
        })
    }

    /// The leases this client holds now, as its renewal thread keeps them (no
    /// round trip): key, value and how long each stays valid without renewal.
    /// Waits for the renewal thread to answer (it never waits on the network),
    /// and for a release or extend running on a lease (each bounded by the read
    /// timeout).
    pub fn held(&self) -> Vec<HeldLock> {
        let held = self.inner.renewer.held();
        held.iter().map(|s| HeldLock::of(s)).collect()
    }
}

/// Runs `read` on the first node holding `key` that answers; on a cluster it
/// follows the slot's redirections for one read timeout (see [`following`]).
fn on_reader<T>(
    topology: &Arc<dyn Topology>,
    shutdown: &CancelToken,
    key: &str,
    mut read: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
) -> Result<T> {
    let deadline = Instant::now() + topology.read_timeout();
    following(Some(deadline), shutdown, || {
        let mut last = Error::Shutdown;
        for node in topology.readers(key) {
            match node.get().and_then(|mut c| Ok(read(&mut c)?)) {
                Ok(found) => return Ok(found),
                Err(e) => last = e.during(Operation::Inspect, key, node.limits()),
            }
        }
        Err(last)
    })
}
