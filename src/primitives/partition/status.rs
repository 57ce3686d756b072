//! [`GroupStatus`]: a group's members and partitions as one round read them.
//!
//! A partition's holder is read from its lock: the token names the holder's
//! client ([`ClientTag`]), and each member's record names its client, so a
//! partition taken a moment ago shows its holder before the holder's record
//! lists it. The fence is not in the token (it comes from the client's shared
//! fence counter), so it is read from the holder's record: a member writes it
//! again right after a take, so it is unknown for at most one round trip.

use std::time::Duration;

use crate::owner::ClientTag;
use crate::scheme::partition::{Lock, Record, View};

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
    /// The partitions it holds: those whose [`PartitionInfo::owner`] it is.
    pub partitions: Vec<u32>,
}

/// One partition, as [`PartitionGroup::status`](crate::PartitionGroup::status) read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Its number, 0 to M-1.
    pub partition: u32,
    /// The live member that holds it: the one whose client the lock's token
    /// names. `None` when free, or held by no live member (a member gone whose
    /// lease runs out, another client): then [`client`](Self::client) says
    /// what the token names. A member of an older version, whose record names
    /// no client, is found by its record's list of partitions instead.
    pub owner: Option<String>,
    /// Its owner's fence, as the owner's record says: `None` when its record
    /// does not list it yet (for at most one round trip after the take).
    pub fence: Option<u64>,
    /// The redlease client whose token holds its lock; `None` when free, or
    /// when the value names no redlease client.
    pub client: Option<ClientTag>,
    /// What is left of its lock's TTL; `None` when free, `Duration::MAX` when
    /// the lock has no TTL.
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
    /// Whether every partition is held by a live member and each live member
    /// holds ⌊M/N⌋ or ⌈M/N⌉ of them.
    pub fn is_balanced(&self) -> bool {
        let n = self.members.len();
        let m = self.partitions.len();
        if n == 0 || self.partitions.iter().any(|p| p.owner.is_none()) {
            return false;
        }
        let (low, high) = (m / n, m.div_ceil(n));
        self.members
            .iter()
            .all(|mem| (low..=high).contains(&mem.partitions.len()))
    }
}

/// What a round view says, as [`GroupStatus`].
pub(super) fn status_of(view: &View) -> GroupStatus {
    let partitions: Vec<PartitionInfo> = view
        .partitions
        .iter()
        .enumerate()
        .map(|(i, lock)| {
            let p = u32::try_from(i).unwrap_or(u32::MAX);
            let Lock::Held { ttl, value } = lock else {
                return PartitionInfo {
                    partition: p,
                    owner: None,
                    fence: None,
                    client: None,
                    ttl: None,
                };
            };
            let client = value.as_deref().and_then(ClientTag::of_token);
            let owner = holder(&view.members, p, value.is_some(), client);
            PartitionInfo {
                partition: p,
                fence: owner.and_then(|r| listed(r, p)),
                owner: owner.map(|r| r.id.clone()),
                client,
                ttl: Some(ttl.unwrap_or(Duration::MAX)),
            }
        })
        .collect();
    let members = view
        .members
        .iter()
        .map(|r| MemberInfo {
            id: r.id.clone(),
            host: r.host.clone(),
            pid: r.pid,
            program: r.program.clone(),
            ttl: r.ttl,
            partitions: partitions
                .iter()
                .filter(|i| i.owner.as_ref() == Some(&r.id))
                .map(|i| i.partition)
                .collect(),
        })
        .collect();
    GroupStatus {
        members,
        partitions,
    }
}

/// The live member holding partition `p`, whose lock's token names `client`
/// (`read` false: the value was not read).
///
/// The member of that client, or, when several members share the client, the
/// one whose record lists `p`. A token naming no member's client may still be
/// a member of an older version (its record names no client): the one such
/// member whose record lists `p`. Never a member whose record names another
/// client: its list is stale.
fn holder(members: &[Record], p: u32, read: bool, client: Option<ClientTag>) -> Option<&Record> {
    let listing = |r: &&Record| listed(r, p).is_some();
    if !read {
        return members.iter().find(listing);
    }
    let client = client?;
    let mut same = members.iter().filter(|r| r.tag == Some(client));
    match (same.next(), same.next()) {
        (Some(only), None) => Some(only),
        (Some(first), Some(second)) => [first, second]
            .into_iter()
            .chain(same)
            .find(|r| listed(r, p).is_some()),
        (None, _) => members.iter().filter(|r| r.tag.is_none()).find(listing),
    }
}

/// The fence `r`'s record lists for partition `p`.
fn listed(r: &Record, p: u32) -> Option<u64> {
    r.held.iter().find(|(q, _)| *q == p).map(|(_, f)| *f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(c: char) -> ClientTag {
        ClientTag::of_hex(&c.to_string().repeat(16)).unwrap()
    }

    fn record(id: &str, tag: Option<ClientTag>, held: &[(u32, u64)]) -> Record {
        Record {
            id: id.into(),
            ttl: Duration::from_secs(2),
            host: "h".into(),
            pid: 1,
            program: "w".into(),
            partitions: 4,
            held: held.to_vec(),
            tag,
        }
    }

    fn held_by(t: ClientTag) -> Lock {
        Lock::Held {
            ttl: Some(Duration::from_millis(1968)),
            value: Some(format!("rl2:{t}:1z")),
        }
    }

    #[test]
    fn a_partition_taken_before_its_holders_record_lists_it_names_the_holder() {
        // `a` took 1 from `b` a moment ago: neither record says so yet.
        let view = View {
            members: vec![
                record("a", Some(tag('a')), &[(0, 5)]),
                record("b", Some(tag('b')), &[(1, 3), (2, 4), (3, 6)]),
            ],
            partitions: vec![
                held_by(tag('a')),
                held_by(tag('a')),
                held_by(tag('b')),
                held_by(tag('b')),
            ],
            asks: vec![],
        };
        let status = status_of(&view);
        let one = &status.partitions[1];
        assert_eq!(one.owner.as_deref(), Some("a"));
        assert_eq!((one.fence, one.client), (None, Some(tag('a'))));
        assert_eq!(status.partitions[0].fence, Some(5));
        assert_eq!(status.members[0].partitions, [0, 1]);
        assert_eq!(status.members[1].partitions, [2, 3]);
        assert!(status.is_balanced());
    }

    #[test]
    fn a_holder_that_is_no_member_shows_its_client_and_an_older_member_its_record() {
        let view = View {
            members: vec![
                // An older version's record names no client.
                record("old", None, &[(1, 7)]),
                // Two members of one client, told apart by their records.
                record("x", Some(tag('c')), &[(2, 8)]),
                record("y", Some(tag('c')), &[]),
            ],
            partitions: vec![
                held_by(tag('d')),
                held_by(tag('e')),
                held_by(tag('c')),
                Lock::Free,
            ],
            asks: vec![],
        };
        let status = status_of(&view);
        let owners: Vec<Option<&str>> = status
            .partitions
            .iter()
            .map(|p| p.owner.as_deref())
            .collect();
        // Partition 0: no member's client, and no older member lists it.
        assert_eq!(owners, [None, Some("old"), Some("x"), None]);
        assert_eq!(status.partitions[0].client, Some(tag('d')));
        assert_eq!(status.partitions[1].fence, Some(7));
        assert_eq!(status.partitions[3].ttl, None);
        assert!(!status.is_balanced());
    }
}
