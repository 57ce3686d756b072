//! A member's thread: its rounds, scheduled with `recv_deadline` on its command
//! channel.
//!
//! Layout: this file is the thread, its loop and a round's first half (losses
//! reported, the record written and the group read); `act.rs` the second half,
//! what a round does with what it read (takes, asks, forced takes).
//!
//! A round that took a partition writes the record again at once, before it
//! tells [`PartitionEvent::Assigned`]: the record names the partition and its
//! fence one round trip after the take, not a round later, and a reader that
//! has seen the event finds both there. A release asked for with
//! [`Member::release`](super::Member::release) writes it too before it returns,
//! so the record stops listing the partition.

mod act;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::events::{Command, PartitionEvent, Shared};
use super::{PartitionGroup, Settings};
use crate::client::guard::LockGuard;
use crate::client::{Inner, LockClient};
use crate::error::Result;
use crate::owner::{ClientTag, host, program};
use crate::scheme::partition::{Beat, PARTITION_SCRIPTS, View, read_view, record_body, round_cmd};
use crate::threads::cancel::Watch;
use crate::threads::wait::Hub;

/// The member's thread's state: it owns the partitions' guards.
pub(crate) struct Worker {
    client: Weak<Inner>,
    hub: Arc<Hub>,
    id: String,
    settings: Settings,
    /// Members, asks, then every partition's lock key.
    keys: Vec<String>,
    /// Every partition's lock name (under the client's prefix).
    names: Vec<String>,
    host: String,
    program: String,
    /// The tag this client's tokens carry, in the record so a reader maps a
    /// partition's token to its member.
    tag: ClientTag,
    guards: BTreeMap<u32, LockGuard>,
    /// Partitions whose owner (this member) was told of an ask.
    told: BTreeSet<u32>,
    events: Sender<PartitionEvent>,
    shared: Arc<Shared>,
    _shutdown: Watch,
}

impl Worker {
    pub(crate) fn new(
        group: &PartitionGroup,
        id: String,
        events: Sender<PartitionEvent>,
        shared: Arc<Shared>,
        tx: &Sender<Command>,
    ) -> Self {
        let inner = &group.client.inner;
        Self {
            client: Arc::downgrade(inner),
            hub: Arc::clone(&inner.hub),
            id,
            settings: group.settings.clone(),
            keys: group.round_keys(),
            names: group.names(),
            host: host(),
            program: program(),
            tag: inner.id.tag(),
            guards: BTreeMap::new(),
            told: BTreeSet::new(),
            events,
            shared,
            _shutdown: inner.hub.shutdown.watch(tx, Command::Shutdown),
        }
    }

    /// Runs rounds until told to leave, the handle is dropped, the client is
    /// dropped or shut down; then leaves.
    pub(crate) fn run(mut self, rx: &Receiver<Command>) {
        let mut next = Instant::now();
        loop {
            match rx.recv_deadline(next) {
                Ok(Command::Release(p, ack)) => {
                    let had = self.release(p);
                    if had {
                        self.beat();
                    }
                    let _ = ack.send(had);
                }
                Ok(Command::Leave(ack)) => {
                    self.leave();
                    let _ = ack.send(());
                    return;
                }
                Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let Some(inner) = self.client.upgrade() else {
                        break;
                    };
                    if self.hub.shutdown.is_cancelled() {
                        break;
                    }
                    self.round(&LockClient { inner });
                    self.shared.rounds.fetch_add(1, Ordering::AcqRel);
                    next = Instant::now() + self.settings.round;
                }
            }
        }
        self.leave();
    }

    fn release(&mut self, p: u32) -> bool {
        self.told.remove(&p);
        let Some(guard) = self.guards.remove(&p) else {
            return false;
        };
        self.publish();
        if let Err(e) = guard.unlock() {
            log::warn!("partition {p} of member `{}`: {e}", self.id);
        }
        true
    }

    /// Releases every partition and deletes the record (and the member's asks).
    fn leave(&mut self) {
        let held: Vec<u32> = self.guards.keys().copied().collect();
        for p in held {
            self.release(p);
        }
        if let Err(e) = self.query_round(Beat::Leave, "") {
            log::warn!("member `{}` leaving: {e}", self.id);
        }
    }

    fn publish(&self) {
        *self.shared.held.lock() = self
            .guards
            .iter()
            .map(|(p, g)| (*p, (g.fence().unwrap_or(0), g.lease_shared())))
            .collect();
    }

    fn query_round(&self, beat: Beat, body: &str) -> Result<View> {
        let cmd = round_cmd(&self.keys, &self.id, self.settings.stability, body, beat);
        let reply = self
            .hub
            .topology
            .query(&self.keys[0], &PARTITION_SCRIPTS, &cmd)?;
        Ok(read_view(&reply, self.names.len())?)
    }

    fn send(&self, cmd: &redis::Cmd) -> Result<redis::Value> {
        self.hub
            .topology
            .query(&self.keys[0], &PARTITION_SCRIPTS, cmd)
    }

    /// One round: report losses, beat and read, then act on the assignment;
    /// when it took partitions, beat again before telling them.
    fn round(&mut self, client: &LockClient) {
        self.report_losses();
        if let Some(view) = self.beat() {
            let taken = self.act(client, &view);
            if !taken.is_empty() {
                self.beat();
            }
            for (partition, fence) in taken {
                let _ = self
                    .events
                    .send(PartitionEvent::Assigned { partition, fence });
            }
        }
        self.publish();
    }

    fn report_losses(&mut self) {
        let lost: Vec<u32> = self
            .guards
            .iter()
            .filter(|(_, g)| !g.is_held())
            .map(|(p, _)| *p)
            .collect();
        for p in lost {
            if let Some(g) = self.guards.remove(&p) {
                self.told.remove(&p);
                let fence = g.fence().unwrap_or(0);
                drop(g);
                let _ = self.events.send(PartitionEvent::Lost {
                    partition: p,
                    fence,
                });
            }
        }
        self.publish();
    }

    /// Writes the record and reads the group.
    fn beat(&self) -> Option<View> {
        let held: Vec<(u32, u64)> = self
            .guards
            .iter()
            .map(|(p, g)| (*p, g.fence().unwrap_or(0)))
            .collect();
        let body = record_body(
            &self.host,
            std::process::id(),
            &self.program,
            part(self.names.len()),
            &held,
            self.tag,
        );
        self.query_round(Beat::Write, &body)
            .map_err(|e| log::warn!("member `{}`: round failed: {e}", self.id))
            .ok()
    }
}

pub(super) fn part(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
