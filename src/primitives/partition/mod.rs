//! Partition groups: M partitions shared by the live members of a group, each
//! partition a fenced lease of its own. This folder is the API; the keys and the
//! scripts are in `scheme/partition/`.
//!
//! Layout: this file is [`PartitionGroup`] (the handle and its settings) and what
//! [`PartitionGroup::status`] returns; `member.rs` [`Member`]; `events.rs`
//! [`PartitionEvent`] and what a member's handle and thread share; `status.rs`
//! [`GroupStatus`];
//! `round/` a member's thread and its rounds; `assign.rs` the assignment every
//! member computes alike.

use std::fmt;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::scheme::Scheme;
use crate::scheme::partition::{
    Beat, PARTITION_SCRIPTS, View, asks_key, members_key, partition_name, read_view, round_cmd,
};

mod assign;
mod events;
mod member;
mod round;
mod status;

pub use events::PartitionEvent;
pub use member::Member;
use status::status_of;
pub use status::{GroupStatus, MemberInfo, PartitionInfo};

/// The most partitions a group may have.
pub const MAX_PARTITIONS: u32 = 4096;

/// A group of workers sharing M partitions, made by
/// [`LockClient::partitions`]. Sends nothing until [`join`](Self::join) or
/// [`status`](Self::status).
///
/// Each partition is a fenced token lock of its own, held by at most one member
/// at a time and renewed by the client's renewal thread like any lease. Each
/// member writes a renewed record; every member reads every record each round
/// and computes the same quotas (⌊M/N⌋ or ⌈M/N⌉ for N live members) and the same
/// preferred partitions (rendezvous hashing), so that a join or a leave moves
/// about M/N partitions. Free partitions are taken at once; one another member
/// holds beyond its quota is *asked for*: its owner gets
/// [`PartitionEvent::Revoking`] and should finish and
/// [`release`](Member::release) it; past the deadline the asker takes it anyway
/// (the fence, which rises with every new owner, refuses the late owner's
/// writes). At most [`max_moves`](Self::max_moves) partitions move between
/// members per round. A member that stops renewing its record stays a member for
/// the [`stability`](Self::stability) window: its partitions wait for it, so a
/// member that restarts with the same [`member_id`](Self::member_id) within it
/// gets them back and nothing moves.
///
/// Every key of a group is under the hash tag `{group}`, so a Redis Cluster
/// serves it from one slot.
#[derive(Clone)]
#[must_use]
pub struct PartitionGroup {
    pub(crate) client: LockClient,
    pub(crate) group: String,
    pub(crate) partitions: u32,
    pub(crate) settings: Settings,
}

/// A group's timings and limits.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) round: Duration,
    pub(crate) stability: Duration,
    pub(crate) grace: Duration,
    pub(crate) max_moves: usize,
    pub(crate) member_id: Option<String>,
}

impl LockClient {
    /// A group of `partitions` partitions named `group`, to [`join`](PartitionGroup::join)
    /// or read. Sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty group name, one with `{` or `}` (it is
    /// the keys' hash tag), or a number of partitions outside 1 to
    /// [`MAX_PARTITIONS`]; [`Error::Unsupported`] on a Redlock client (a quorum
    /// gives no fence to refuse a late owner with).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use redlease::PartitionEvent;
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let member = client.partitions("orders", 64)?.join()?;
    /// for event in member.events() {
    ///     match event {
    ///         PartitionEvent::Assigned { partition, fence } => println!("work on {partition} ({fence})"),
    ///         PartitionEvent::Revoking { partition, .. } => {
    ///             member.release(partition)?;
    ///         }
    ///         PartitionEvent::Lost { partition, .. } => println!("stop {partition} now"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn partitions(&self, group: &str, partitions: u32) -> Result<PartitionGroup> {
        if group.is_empty() || group.contains(['{', '}']) {
            return Err(Error::Invalid {
                what: "partition group name",
                reason: "must be non-empty, without `{` or `}`",
            });
        }
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::Invalid {
                what: "number of partitions",
                reason: "must be 1 to 4096",
            });
        }
        if self.inner.hub.topology.check(&Scheme::Token, true).is_err() {
            return Err(Error::Unsupported {
                what: "partition groups",
                by: "redlock (a quorum of independent masters gives no fencing token)",
            });
        }
        let ttl = self.inner.settings.ttl;
        // With liveness, a member that stops is gone after the liveness: its
        // record as its session's, and its locks broken by whoever takes them.
        let stability = self
            .inner
            .liveness
            .as_ref()
            .map_or(ttl, |live| live.ttl().min(ttl));
        Ok(PartitionGroup {
            client: self.clone(),
            group: group.to_owned(),
            partitions,
            settings: Settings {
                ttl,
                round: stability / 3,
                stability,
                grace: ttl,
                max_moves: usize::try_from(partitions).unwrap_or(usize::MAX),
                member_id: None,
            },
        })
    }
}

impl LockClient {
    /// The group `group` as its live members run it: with the number of
    /// partitions their records give (the largest, should they disagree).
    /// `Ok(None)` when no member is alive. One round trip; writes nothing.
    ///
    /// # Errors
    /// As [`partitions`](Self::partitions); [`Error::Redis`] when the read got
    /// no answer.
    pub fn find_partitions(&self, group: &str) -> Result<Option<PartitionGroup>> {
        let probe = self.partitions(group, 1)?;
        let keys = &probe.round_keys()[..2];
        let cmd = round_cmd(keys, "", probe.settings.stability, "", Beat::Read);
        let reply = self
            .inner
            .hub
            .topology
            .query(&keys[0], &PARTITION_SCRIPTS, &cmd)?;
        let view = read_view(&reply, 0)?;
        let m = view
            .members
            .iter()
            .map(|r| r.partitions)
            .max()
            .filter(|m| *m > 0);
        m.map(|m| self.partitions(group, m)).transpose()
    }
}

impl PartitionGroup {
    /// Each partition lease's time to live (renewed every third of it).
    /// Defaults to the client's TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// The time between a member's rounds (each one round trip: its record
    /// written, every record and lock read). Defaults to a third of the
    /// [`stability`](Self::stability) window.
    pub fn round(mut self, every: Duration) -> Self {
        self.settings.round = every;
        self
    }

    /// How long a member that stopped (killed, paused, cut off) stays a member:
    /// its partitions wait for it that long, then go to the others. Defaults to
    /// the client's TTL, or its [liveness](crate::LockClientBuilder::liveness)
    /// when shorter: a member that takes a partition from a member whose
    /// liveness session ended breaks the dead member's lock at once (on one
    /// server or Sentinel; in a Redis Cluster the lock waits for its TTL), so a
    /// killed member's partitions move within about the liveness, not the TTL.
    pub fn stability(mut self, window: Duration) -> Self {
        self.settings.stability = window;
        self
    }

    /// How long an owner asked for a partition has to release it before the
    /// asker takes it anyway. Defaults to the client's TTL.
    pub fn revoke_grace(mut self, grace: Duration) -> Self {
        self.settings.grace = grace;
        self
    }

    /// The most partitions asked of other members per round, group-wide (free
    /// ones are not counted). Defaults to the number of partitions.
    pub fn max_moves(mut self, moves: usize) -> Self {
        self.settings.max_moves = moves.max(1);
        self
    }

    /// The id the next [`join`](Self::join) takes: give a stable one (a host
    /// name, a pod name) so a member that restarts within the
    /// [`stability`](Self::stability) window gets its partitions back. Defaults
    /// to a new random id per join.
    pub fn member_id(mut self, id: &str) -> Self {
        self.settings.member_id = Some(id.to_owned());
        self
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.group
    }

    /// The number of partitions.
    pub fn len(&self) -> u32 {
        self.partitions
    }

    /// Always false: a group has at least one partition.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Reads the group's members and each partition's owner, fence and TTL, in
    /// one round trip; writes nothing. The owner is read from the partition's
    /// lock (its token names the holder's client), so a partition names its
    /// holder from the moment it is taken; the fence from the holder's record
    /// (see [`PartitionInfo::fence`]).
    ///
    /// # Errors
    /// [`Error::Redis`] when the read got no answer.
    pub fn status(&self) -> Result<GroupStatus> {
        let view = self.read(Beat::Read, "", "")?;
        Ok(status_of(&view))
    }

    /// The names (under the client's prefix) of every partition's lock.
    pub(crate) fn names(&self) -> Vec<String> {
        (0..self.partitions)
            .map(|i| partition_name(&self.group, i))
            .collect()
    }

    /// The keys of a round: members, asks, then every partition's lock.
    pub(crate) fn round_keys(&self) -> Vec<String> {
        let prefix = &self.client.inner.settings.key_prefix;
        let mut keys = vec![
            members_key(prefix, &self.group),
            asks_key(prefix, &self.group),
        ];
        keys.extend(self.names().iter().map(|n| format!("{prefix}{n}")));
        keys
    }

    /// One round script as `beat` says, for member `id` with record `body`.
    pub(crate) fn read(&self, beat: Beat, id: &str, body: &str) -> Result<View> {
        let keys = self.round_keys();
        let cmd = round_cmd(&keys, id, self.settings.stability, body, beat);
        let reply = self
            .client
            .inner
            .hub
            .topology
            .query(&keys[0], &PARTITION_SCRIPTS, &cmd)?;
        Ok(read_view(&reply, self.partitions as usize)?)
    }
}

impl fmt::Debug for PartitionGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionGroup")
            .field("group", &self.group)
            .field("partitions", &self.partitions)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
