//! [`Latch`]: a fan-in count down whose waiters learn that a participant died.
//! This folder is its API; the wire format (Redisson's `RCountDownLatch` and the
//! participants beside it) is `scheme/latch.rs`.
//!
//! Why a lease per participant, and not the participant's session record: a
//! session record says that a client lives, not that the participant (one
//! job of that client, maybe one of many) is still on its way to count down; and
//! after a stall a client writes a new record under the same tag, so "the
//! record is there" cannot tell a dead participant from a live one. A
//! participant's lease is a token lock of its own, renewed by its client's
//! renewal thread like any lock, with the participant liveness as its TTL; its
//! value names the client (`rl2:<tag>:…`), so the waiter can name the client's
//! session record once the lease is gone. A lease given back unused (the
//! [`Participant`] dropped: the job failed) is as gone as one that expired.
//!
//! Layout: this file the handle, its checks and counts; `participant.rs` the
//! [`Participant`] a join returns; `wait.rs` the waits.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::client::LockClient;
use crate::client::options::LockOptions;
use crate::error::{Error, Result};
use crate::scheme::Scheme;
use crate::scheme::latch::{self as wire, Created, LATCH_SCRIPTS};

mod participant;
mod wait;

pub use participant::Participant;

/// A participant's liveness when the client has none: 5 seconds.
pub const DEFAULT_LATCH_LIVENESS: Duration = Duration::from_secs(5);
/// The shortest participant liveness accepted: 100 milliseconds.
const MIN_LIVENESS: Duration = Duration::from_millis(100);

/// Numbers the leases this process takes, so that each is a key of its own.
static NEXT_LEASE: AtomicU64 = AtomicU64::new(1);

/// A fan-in latch: `count` participants [`join`](Self::join) and count down;
/// waiters return when the count reaches zero, or with
/// [`Error::ParticipantDied`] as soon as a participant that joined is gone
/// without counting down. Made by [`LockClient::latch`].
///
/// The count is Redisson's `RCountDownLatch` (a Redisson `await()` on the same
/// name returns when ours reaches zero, and a Redisson `countDown()` counts
/// too); the participants are beside it, each a lease its client renews, with the
/// participant liveness as its TTL (see [`liveness`](Self::liveness)).
///
/// The keys of a latch that completes are gone ten minutes after
/// ([`DONE_TTL`](crate::LATCH_DONE_TTL)), those of one that never does a day after
/// its last join, count down or waiter's look
/// ([`ABANDONED_TTL`](crate::LATCH_ABANDONED_TTL)): participants running longer
/// than a day with nobody waiting would find it gone (it then reads as zero).
#[derive(Clone)]
pub struct Latch {
    client: LockClient,
    name: Box<str>,
    key: Box<str>,
    liveness: Duration,
}

impl LockClient {
    /// The latch `name` counting down from `count`, made when it is not there
    /// (Redisson's `trySetCount`, which publishes its "new count" message).
    /// A latch that exists is opened as it is, when made with the same count.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name, a count of 0, a latch of the name
    /// made with another count, or a name that holds something else (a Redisson
    /// latch made without participants, another value); [`Error::Unsupported`]
    /// on a Redlock quorum; Redis failures.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::Duration;
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/")
    ///     .liveness(Duration::from_secs(2))
    ///     .build()?;
    /// let latch = client.latch("nightly-merge", 8)?;
    /// // In each of the 8 shard workers:
    /// let me = latch.join()?;
    /// // ... the shard's work ...
    /// me.count_down()?;
    /// // In the merger: done, or the error naming a worker that died.
    /// latch.wait_for(Duration::from_secs(3600))?;
    /// # Ok(()) }
    /// ```
    pub fn latch(&self, name: &str, count: u32) -> Result<Latch> {
        if count == 0 {
            return Err(invalid(
                "latch count",
                "a latch counts down from at least 1",
            ));
        }
        self.make_latch(name, count)
    }

    /// The latch `name` as it is, made by [`latch`](Self::latch) elsewhere:
    /// for a waiter that does not know the count.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name, a latch that is not there (never
    /// made, or expired) or a name that holds something else;
    /// [`Error::Unsupported`] on a Redlock quorum; Redis failures.
    pub fn open_latch(&self, name: &str) -> Result<Latch> {
        self.make_latch(name, 0)
    }

    /// A handle on `name`, made with `count` when absent (0: never made).
    fn make_latch(&self, name: &str, count: u32) -> Result<Latch> {
        if name.is_empty() {
            return Err(invalid("latch name", "the name is empty"));
        }
        self.inner.hub.topology.holds("a latch")?;
        let key = format!("{}{name}", self.inner.settings.key_prefix);
        let liveness = self
            .inner
            .settings
            .liveness
            .unwrap_or(DEFAULT_LATCH_LIVENESS);
        let latch = Latch {
            client: self.clone(),
            name: name.into(),
            key: key.into(),
            liveness,
        };
        let sharded = self.inner.hub.topology.sharded();
        let reply = latch.query(&latch.key, &wire::create_cmd(&latch.key, count, sharded))?;
        match wire::created(&reply)? {
            Created::Latch { size, .. } if count == 0 || size == i64::from(count) => Ok(latch),
            Created::Latch { .. } => Err(invalid(
                "latch count",
                "the latch exists with another count",
            )),
            Created::Foreign => Err(invalid(
                "latch",
                "the name holds a count without participants (a Redisson latch?) or another value",
            )),
            Created::Absent => Err(invalid(
                "latch",
                "no latch of this name (never made, or expired)",
            )),
        }
    }
}

impl Latch {
    /// The participant liveness: how long a participant's lease outlives its
    /// last renewal, so the longest a waiter takes to learn that it died. A
    /// pause or network cut of a participant longer than this counts as its
    /// death. Values under 100 ms are refused at [`join`](Self::join).
    /// Defaults to the client's
    /// [`liveness`](crate::LockClientBuilder::liveness), else 5 seconds.
    #[must_use]
    pub fn liveness(mut self, liveness: Duration) -> Self {
        self.liveness = liveness;
        self
    }

    /// The name as passed.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The count's key: the name with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Joins as a participant: takes a lease of its own (renewed by the
    /// client while the [`Participant`] lives) and lists it in the latch. Until
    /// it [counts down](Participant::count_down), a waiter that finds the lease
    /// gone returns [`Error::ParticipantDied`]. Sends two script calls; never
    /// waits for anyone.
    ///
    /// # Errors
    /// [`Error::Invalid`] when as many participants joined as the count, the
    /// latch is done or expired; [`Error::Config`] for a liveness under 100 ms;
    /// Redis failures.
    pub fn join(&self) -> Result<Participant> {
        if self.liveness < MIN_LIVENESS {
            return Err(Error::config("liveness", "must be at least 100 ms"));
        }
        let tag = self.client.inner.id.tag();
        let k = NEXT_LEASE.fetch_add(1, Ordering::Relaxed);
        let name = wire::lease_name(&self.name, tag.as_str(), k);
        let opts = LockOptions::new()
            .ttl(self.liveness)
            .wait(Duration::ZERO)
            .scheme(Scheme::Token);
        let guard = self
            .client
            .lock_with(&name, &opts)?
            .ok_or_else(|| invalid("latch join", "the participant's lease key was taken"))?;
        let token = guard.value();
        let reply = self.query(&self.key, &wire::join_cmd(&self.key, guard.key(), &token))?;
        match wire::int(&reply)?.unwrap_or(-1) {
            -1 => Err(invalid("latch join", "the latch is gone (it expired)")),
            -2 => Err(invalid("latch join", "the latch is done")),
            -3 => Err(invalid(
                "latch join",
                "the latch is full: as many participants joined as its count",
            )),
            _ => Ok(Participant::new(self.clone(), guard, token)),
        }
    }

    /// Counts down once for nobody in particular: Redisson's `countDown`
    /// (no participant is listed or removed). Returns the count after it (0 once
    /// done).
    ///
    /// # Errors
    /// Redis failures.
    pub fn count_down(&self) -> Result<u64> {
        self.count_down_for(("", ""))?
            .ok_or_else(|| invalid("latch count down", "unexpected reply"))
    }

    /// The count now: Redisson's `getCount` (0 once done, or when the latch
    /// expired).
    ///
    /// # Errors
    /// Redis failures.
    pub fn count(&self) -> Result<u64> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&*self.key);
        let reply = self.query(&self.key, &cmd)?;
        let count = wire::int(&reply)?;
        Ok(count.map_or(0, |c| u64::try_from(c).unwrap_or(0)))
    }

    /// The count down of the participant `(lease key, token)`; `None` when it
    /// is not listed.
    fn count_down_for(&self, who: (&str, &str)) -> Result<Option<u64>> {
        let sharded = self.client.inner.hub.topology.sharded();
        let reply = self.query(&self.key, &wire::count_down_cmd(&self.key, who, sharded))?;
        Ok(wire::counted(&reply)?.map(|c| u64::try_from(c).unwrap_or(0)))
    }

    /// Publishes Redisson's "new count" message (`1`: the count is not zero),
    /// which wakes every waiter to look again.
    fn wake(&self) -> Result<()> {
        let sharded = self.client.inner.hub.topology.sharded();
        let mut cmd = redis::cmd(wire::publish_verb(sharded));
        cmd.arg(wire::channel(&self.key)).arg(1);
        self.query(&self.key, &cmd).map(drop)
    }

    /// Runs `cmd` (a latch script or a plain read) on the node of `key`'s slot.
    fn query(&self, key: &str, cmd: &redis::Cmd) -> Result<redis::Value> {
        self.client
            .inner
            .hub
            .topology
            .query(key, LATCH_SCRIPTS, cmd)
    }
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch")
            .field("key", &self.key)
            .field("liveness", &self.liveness)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// [`Error::Invalid`] for `what`.
fn invalid(what: &'static str, reason: &'static str) -> Error {
    Error::Invalid { what, reason }
}

#[cfg(test)]
mod tests {
    #[test]
    fn latch_and_participant_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<super::Latch>();
        send::<super::Participant>();
    }
}
