//! Where a lock lives: the topology seam.
//!
//! The guard, the renewal thread and the waiter reach Redis only through
//! [`Topology`]; a topology reaches Redis through its nodes, and each node speaks
//! the lease's scheme ([`Backend`]). One server is [`Single`]; a Redlock quorum of
//! independent masters is [`Redlock`]; a Redis Cluster is `Cluster`, a
//! [`Single`] per master and a slot map.
//!
//! Layout: this file is the seam ([`Topology`] and what it answers); a folder per
//! deployment: `single/` one server, `redlock/` a quorum of independent masters,
//! `cluster/` a Redis Cluster (feature `cluster`); `io/` the per-node I/O machinery
//! they share; `probe.rs` what the Redis user may do, checked by `build()`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::error::Result;
use crate::lease::{LeaseState, LossReason};
use crate::net::node::Node;
use crate::owner::SessionWrite;
use crate::scheme::{Announce, Backend, Extend, Freed, Keys, Release, Request, Scheme};

#[cfg(feature = "cluster")]
mod cluster;
mod io;
mod probe;
pub(crate) mod redlock;
mod single;

#[cfg(feature = "cluster")]
pub(crate) use cluster::Cluster;
#[cfg(feature = "cluster")]
pub(crate) use cluster::Opener;
pub(crate) use io::{Cleanup, Free, IoThread, Parked, Queued, watch_at_exit};
pub(crate) use probe::probe;
pub(crate) use redlock::{Redlock, Wait};
pub(crate) use single::Single;

/// The scripts a [`Topology::query`] may call.
pub(crate) type Scripts = &'static [&'static std::sync::LazyLock<redis::Script>];

/// The outcome of one acquire attempt that got an answer.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The lock is ours: `value` is stored under the key, its TTL counts from
    /// `sent` (taken before the command left this process), `fence` when asked for.
    /// The client hands it over only while its validity lasts (`time::in_time`);
    /// a late one it releases with [`Topology::release_later`].
    Acquired {
        value: String,
        sent: Instant,
        fence: Option<u64>,
    },
    /// Someone else holds it, for at most `remaining` more (`None`: unknown);
    /// `announces`: its release is published whoever waits (see the scheme's
    /// `Acquire::Busy`).
    Busy {
        remaining: Option<Duration>,
        announces: bool,
    },
}

/// A lock handed from one holder of this client to another: our value is replaced
/// by `value` (TTL `ttl`), with a new fence when `fence`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandOff<'a> {
    pub(crate) ours: &'a str,
    pub(crate) value: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence: bool,
}

/// The answer to a [`HandOff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Replaced; the new holder's fence when one was asked for.
    Done(Option<u64>),
    /// Our value was gone (expired) or someone else's: nothing replaced.
    Refused(Release),
}

/// One lease to renew, as the renewal thread hands it over.
pub(crate) struct Renew {
    /// The renewal thread's name for the lease, echoed in the answer.
    pub(crate) id: u64,
    pub(crate) state: Arc<LeaseState>,
    /// The TTL to renew with (clipped to the lease's hold bound).
    pub(crate) ttl: Duration,
}

/// What one renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Extended; the lease's validity now counts from `sent`.
    Extended { sent: Instant },
    /// The lease is gone (expired) or someone else's.
    Lost(LossReason),
    /// Not sent: the lease was released, or its mutex busy (a release or an
    /// extend running on it).
    Skipped,
    /// No answer in time, or an error: the lease is as valid as before.
    Failed,
}

/// Where the locks live: one server, a quorum of independent masters, a cluster.
///
/// # Contract
///
/// - **Atomicity.** Each call's effect on one node is one atomic script or command
///   of the lease's scheme: nobody else's value is ever overwritten, extended or
///   deleted. Across nodes (Redlock) a call is a vote: it succeeds on a majority or
///   is undone where it landed.
/// - **Time.** Every call returns within the node timeouts it was built with (the
///   pool checkout, itself at most the read timeout, a write and a reply; a retry
///   on a connection that died while idle adds one more), never blocked by a
///   frozen node beyond them: a call that gets no reply returns, and what must
///   still happen (the removal of a value that may have landed) happens on the
///   node's I/O thread.
///   [`renew`](Topology::renew) never blocks its caller at all.
/// - **Ambiguity.** An `Err` from [`acquire`](Topology::acquire) means the command
///   may have landed: the topology has already queued the removal of the value it
///   tried to write (off the caller's time, retried until that value's TTL ends),
///   so the caller reports the error and must never report "not acquired". An
///   `Err` from [`release`](Topology::release) leaves the lock to its TTL; one from
///   [`extend`](Topology::extend) means the new TTL may or may not be set, and for
///   schemes whose value changes, that the new value may be stored.
/// - **Lateness.** An [`Attempt::Acquired`] may come after its lease's validity
///   ended (the reply was slow): a topology may refuse it itself, as Redlock does
///   between rounds, but need not; the client checks every grant, hand-offs
///   included, by the same rule (`time::in_time`), and gives a late one back
///   through [`release_later`](Topology::release_later).
pub(crate) trait Topology: Send + Sync + fmt::Debug {
    /// One attempt to take the lock under `keys` with `backend`'s format.
    fn acquire(&self, backend: &Arc<dyn Backend>, keys: &Keys, req: Request) -> Result<Attempt>;

    /// Deletes the lock `key` if it still holds `value` (or one of `maybe`), waking
    /// waiters as `announce` says.
    fn release(
        &self,
        backend: &dyn Backend,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
    ) -> Result<Freed>;

    /// The same, off the caller's time: for a value nobody will use (a hand-off
    /// that came too late), retried until `until`, when it expires anyway.
    fn release_later(&self, backend: Arc<dyn Backend>, keys: Keys, value: String, until: Instant);

    /// Queues a guard's release for its node's I/O thread, which sends it with the
    /// others queued meanwhile, in one write; never blocks. Gives `free` back when
    /// this topology cannot (a quorum, whose release counts each node's answer)
    /// or its thread is gone: the caller then releases as usual.
    fn release_queued(&self, free: Box<Free>) -> std::result::Result<(), Box<Free>> {
        Err(free)
    }

    /// Sets the TTL of the lock holding `value` (or one of `maybe`) to `ttl`.
    /// Returns the value the extend leaves under the key, when it was sent, and
    /// what it found.
    fn extend(
        &self,
        backend: &dyn Backend,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (String, Instant, Result<Extend>);

    /// Passes a token lock to another holder of this client in one atomic step, so
    /// the key is never free in between. `None` when this topology cannot.
    fn hand_off(&self, keys: &Keys, hand_off: HandOff<'_>) -> Option<Result<Handed>>;

    /// Renews `batch` in one pipelined round trip per node, and sends the answers
    /// (`(id, outcome)`, one per lease) to `done`. Each lease's validity is moved
    /// forward before its answer is sent; no lease's answer waits past the moment
    /// its validity ends. Never blocks: the round trips run on the topology's own
    /// I/O threads, one per node.
    fn renew(&self, batch: Vec<Renew>, done: Sender<Vec<(u64, Renewed)>>);

    /// How many nodes can carry the release messages: a release publishes on each,
    /// so the waiter listens on one and moves to the next when it fails.
    fn subscribers(&self) -> usize {
        1
    }

    /// Node `i` (counted modulo [`subscribers`](Topology::subscribers)), whose
    /// pub/sub connection can carry the release messages.
    fn subscriber(&self, i: usize) -> &Arc<Node>;

    /// Whether release messages travel by sharded pub/sub (`SPUBLISH`, a Redis 7
    /// cluster): each subscriber node then carries the channels of its own slots
    /// only, and a wait listens on the node [`subscriber_for`](Topology::subscriber_for)
    /// names, with `SSUBSCRIBE`.
    fn sharded(&self) -> bool {
        false
    }

    /// The subscriber node that carries `channel`'s release messages when they
    /// are sharded; `None` when none of them does now (a slot moved to a master
    /// found later): the wait polls.
    fn subscriber_for(&self, _channel: &str) -> Option<usize> {
        Some(0)
    }

    /// Writes the client's session record where a reader of its key looks: the
    /// server, every master of a quorum, the master of the key's slot. Never
    /// blocks: the node's I/O thread writes it, logs a failure, and sends `()` on
    /// `done` once it has tried. Returns how many nodes it was sent to.
    fn write_session(&self, write: &Arc<SessionWrite>, done: Option<&Sender<()>>) -> usize;

    /// The nodes to read the lock `key` from, in order: the one server; every
    /// master of a quorum (the first that answers); the master of its slot.
    fn readers(&self, _key: &str) -> Vec<Arc<Node>> {
        (0..self.subscribers())
            .map(|i| Arc::clone(self.subscriber(i)))
            .collect()
    }

    /// The fence counter of the lock `keys` on the node that holds it.
    fn fence_of(&self, keys: &Keys) -> String {
        keys.fence()
    }

    /// How long a call waits for a reply (the nodes' read timeout).
    fn read_timeout(&self) -> Duration;

    /// Publishes `message` on `channel` on subscriber node `i` (a wake-up of the
    /// waiter thread listening there).
    fn publish(&self, i: usize, channel: &str, message: &str) -> Result<()>;

    /// Runs `cmd`, a call of one of `scripts`, on the node of `key`'s slot, and
    /// returns its reply: for the calls that hold no lease (a semaphore's count).
    /// Loads the scripts after `NOSCRIPT`. A quorum of independent masters has no
    /// one node for a key, and refuses.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a quorum; Redis failures.
    fn query(&self, key: &str, scripts: Scripts, cmd: &redis::Cmd) -> Result<redis::Value> {
        let _ = (key, scripts, cmd);
        Err(crate::error::Error::Unsupported {
            what: "one server's format",
            by: "redlock",
        })
    }

    /// Whether one script may take all of `keys` at once: they live on one node,
    /// and in a Redis Cluster in one slot. A quorum of independent masters never
    /// can (the default): it takes them one by one.
    fn one_step(&self, keys: &[&str]) -> bool {
        let _ = keys;
        false
    }

    /// Refuses a primitive this topology cannot hold: a quorum of independent
    /// masters has no one server for one server's formats (a fair lock, a
    /// read-write lock, a semaphore; `what` names it).
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming `what` and the
    /// topology.
    fn holds(&self, what: &'static str) -> Result<()> {
        let _ = what;
        Ok(())
    }

    /// Refuses what this topology cannot do safely: a scheme, or fencing.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming the option.
    fn check(&self, _scheme: &Scheme, _fencing: bool) -> Result<()> {
        Ok(())
    }
}
