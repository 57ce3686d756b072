//! The soak's partition group: every worker is a member of one group of
//! [`PARTITIONS`] partitions on the proxied single master, and writes to the fenced
//! resource under each partition it holds (names `p0`…, each with its fence); a
//! watcher in the soak's process reads the group's status to time how long the
//! partitions stay without an owner after each fault's heal.
//!
//! In the history a partition is a name like any other: `ENTER` when `Assigned`
//! (then `CLAIM` with its fence), read-modify-writes (`READ`, `SET` with the fence)
//! while held, `EXIT` with held = 1 before a `Revoking`'s release (so the next owner
//! cannot enter before it leaves), held = 0 on `Lost`. The soak's checker counts
//! overlaps, stale writes and lost updates on them as on locks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::{LockClient, Member, PartitionEvent, PartitionGroup};

use crate::{Res, Resource, TTL};

/// The group's name.
pub const GROUP: &str = "P";
/// Its partitions.
pub const PARTITIONS: u32 = 8;
/// The members' round (a third of the lease, the default, said out loud).
pub const ROUND: Duration = Duration::from_millis(500);
/// How long the partitions may stay without an owner after a heal: a lease (the
/// old owner's runs out) and two rounds (the record that named it expires, then
/// a member takes it at its next round).
pub const RECOVERY_BOUND: Duration = Duration::from_millis(1500 + 2 * 500);
/// How often the watcher reads the group's status.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The history's name of partition `p`.
pub fn name(p: u32) -> String {
    format!("p{p}")
}

/// Whether a history name is a partition's.
pub fn is_partition(name: &str) -> bool {
    name.strip_prefix('p')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The group as every member and the watcher see it.
pub fn group(client: &LockClient) -> redlease::Result<PartitionGroup> {
    Ok(client
        .partitions(GROUP, PARTITIONS)?
        .ttl(TTL)
        .round(ROUND)
        .stability(TTL)
        .revoke_grace(TTL))
}

/// Joins as worker `id` (a stable id: a worker restarted after a kill finds its
/// partitions waiting for it) and works on what it holds on its own thread, with
/// its own connection to the resource, until `stop`; then reports its exits and
/// leaves.
pub fn spawn(
    client: &LockClient,
    id: u64,
    resource: &str,
    stop: Arc<AtomicBool>,
) -> Res<thread::JoinHandle<Result<(), String>>> {
    let member = group(client)?.member_id(&format!("w{id}")).join()?;
    let mut res = Resource::connect(resource)?;
    Ok(thread::spawn(move || {
        let worked = work(&member, &mut res, &stop).map_err(|e| e.to_string());
        let left = member.leave().map_err(|e| e.to_string());
        worked.and(left)
    }))
}

fn work(member: &Member, res: &mut Resource, stop: &AtomicBool) -> Res<()> {
    let mut rng = fastrand::Rng::new();
    // The partitions entered, with their fences and whether writes go on.
    let mut held: BTreeMap<u32, (u64, bool)> = BTreeMap::new();
    while !stop.load(Ordering::Acquire) {
        for event in member.events().try_iter() {
            match event {
                PartitionEvent::Assigned { partition, fence } => {
                    if held.remove(&partition).is_some() {
                        res.ask(&format!("EXIT {} 0 1", name(partition)))?;
                    }
                    let p = name(partition);
                    res.ask(&format!("ENTER {p} {fence} partition single"))?;
                    let claimed = res.ask(&format!("CLAIM {p} {fence}"))? == "OK";
                    held.insert(partition, (fence, claimed));
                }
                PartitionEvent::Revoking { partition, .. } => {
                    // Done with it: leave the history, then hand it over.
                    if held.remove(&partition).is_some() {
                        let still = member.held().iter().any(|(p, _)| *p == partition);
                        res.ask(&format!("EXIT {} {} 1", name(partition), u8::from(still)))?;
                    }
                    if let Err(e) = member.release(partition) {
                        crate::error(res, "partition release", &e)?;
                    }
                }
                PartitionEvent::Lost { partition, .. } if held.remove(&partition).is_some() => {
                    res.ask(&format!("EXIT {} 0 1", name(partition)))?;
                }
                _ => {}
            }
        }
        for (partition, (fence, writing)) in &mut held {
            if !*writing {
                continue;
            }
            let p = name(*partition);
            let value: u64 = res.ask(&format!("READ {p}"))?.parse()?;
            thread::sleep(Duration::from_millis(rng.u64(0..=20)));
            // Refused: a newer owner claimed it; its `Lost` follows.
            *writing = res.ask(&format!("SET {p} {fence} {}", value + 1))? == "OK";
        }
        thread::sleep(Duration::from_millis(20));
    }
    for partition in held.keys() {
        let still = member.held().iter().any(|(p, _)| p == partition);
        res.ask(&format!("EXIT {} {} 1", name(*partition), u8::from(still)))?;
    }
    Ok(())
}

/// Reads the group's status every [`WATCH_EVERY`] until `stop`: when each read
/// that answered (time since `start`) found every partition's lease held.
pub fn watch(
    client: &LockClient,
    start: Instant,
    stop: &AtomicBool,
    samples: &Mutex<Vec<(Duration, bool)>>,
) {
    let Ok(group) = group(client) else { return };
    while !stop.load(Ordering::Acquire) {
        if let Ok(status) = group.status() {
            // Owned: its lease is held. (`owner` names the holder only once the
            // holder's record lists it, a round after the take.)
            let owned = status.partitions.iter().all(|p| p.ttl.is_some());
            samples.lock().push((start.elapsed(), owned));
        }
        thread::sleep(WATCH_EVERY);
    }
}

/// For each heal (time since start), how long until a status read found every
/// partition owned (`None`: none did before the end).
pub fn recoveries(samples: &[(Duration, bool)], heals: &[Duration]) -> Vec<Option<Duration>> {
    heals
        .iter()
        .map(|heal| {
            samples
                .iter()
                .find(|(t, owned)| *owned && t >= heal)
                .map(|(t, _)| t.saturating_sub(*heal))
        })
        .collect()
}
