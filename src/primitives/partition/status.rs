//! [`GroupStatus`]: a group's members and partitions as one round read them.

use std::time::Duration;

use crate::scheme::partition::View;

/// A member's record, as [`PartitionGroup::status`](crate::PartitionGroup::status) read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member id.
    pub id: String,
    /// The host its process runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its program's name.
    pub program: String,
    /// How long its record lives without another round: it is a member until
    /// then (dead members are not listed).
    pub ttl: Duration,
    /// The partitions it said it held at its last round.
    pub partitions: Vec<u32>,
}

/// One partition, as [`PartitionGroup::status`](crate::PartitionGroup::status) read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Its number, 0 to M-1.
    pub partition: u32,
    /// The member that holds it, when its lock is held and a live member's
    /// record names it.
    pub owner: Option<String>,
    /// Its owner's fence (as the owner's record says).
    pub fence: Option<u64>,
    /// What is left of its lock's TTL; `None` when free.
    pub ttl: Option<Duration>,
}

/// A group's members and partitions, read in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The live members, by id.
    pub members: Vec<MemberInfo>,
    /// Every partition, by number.
    pub partitions: Vec<PartitionInfo>,
}

impl GroupStatus {
    /// Whether every partition has an owner and each live member holds ⌊M/N⌋ or
    /// ⌈M/N⌉ of them.
    pub fn is_balanced(&self) -> bool {
        let n = self.members.len();
        let m = self.partitions.len();
        if n == 0 || self.partitions.iter().any(|p| p.owner.is_none()) {
            return false;
        }
        let (low, high) = (m / n, m.div_ceil(n));
        self.members.iter().all(|mem| {
            let held = self
                .partitions
                .iter()
                .filter(|p| p.owner.as_deref() == Some(&mem.id))
                .count();
            (low..=high).contains(&held)
        })
    }
}

/// What a round view says, as [`GroupStatus`].
pub(super) fn status_of(view: &View) -> GroupStatus {
    let members = view
        .members
        .iter()
        .map(|r| MemberInfo {
            id: r.id.clone(),
            host: r.host.clone(),
            pid: r.pid,
            program: r.program.clone(),
            ttl: r.ttl,
            partitions: r.held.iter().map(|(p, _)| *p).collect(),
        })
        .collect();
    let partitions = (0..view.partitions.len())
        .map(|i| {
            let p = u32::try_from(i).unwrap_or(u32::MAX);
            let ttl = view.partitions[i];
            let owner = ttl.and_then(|_| {
                view.members.iter().find_map(|r| {
                    r.held
                        .iter()
                        .find(|(q, _)| *q == p)
                        .map(|(_, f)| (r.id.clone(), *f))
                })
            });
            PartitionInfo {
                partition: p,
                fence: owner.as_ref().map(|(_, f)| *f),
                owner: owner.map(|(id, _)| id),
                ttl,
            }
        })
        .collect();
    GroupStatus {
        members,
        partitions,
    }
}
