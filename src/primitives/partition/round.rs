//! A member's thread: its rounds, scheduled with `recv_deadline` on its command
//! channel, and what each round does with what it read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::assign::assign;
use super::events::{Command, PartitionEvent, Shared};
use super::{PartitionGroup, Settings};
use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::client::{Inner, LockClient};
use crate::error::Result;
use crate::owner::{host, program};
use crate::scheme::partition::{
    Beat, PARTITION_SCRIPTS, View, ask_cmd, clear_cmd, force_cmd, read_view, record_body, round_cmd,
};
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

    /// One round: report losses, beat and read, then act on the assignment.
    fn round(&mut self, client: &LockClient) {
        self.report_losses();
        if let Some(view) = self.beat() {
            self.act(client, &view);
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
        );
        self.query_round(Beat::Write, &body)
            .map_err(|e| log::warn!("member `{}`: round failed: {e}", self.id))
            .ok()
    }

    /// Takes, asks for and gives up what the assignment computed from `view`
    /// says.
    fn act(&mut self, client: &LockClient, view: &View) {
        let ids: Vec<String> = view.members.iter().map(|r| r.id.clone()).collect();
        let Some(me) = ids.iter().position(|i| *i == self.id) else {
            return;
        };
        let m = self.names.len();
        let owner: Vec<Option<usize>> = (0..m)
            .map(|i| {
                let p = part(i);
                if view.partitions[i].is_none() {
                    None
                } else if self.guards.contains_key(&p) {
                    Some(me)
                } else {
                    view.members
                        .iter()
                        .position(|r| r.id != self.id && r.held.iter().any(|(q, _)| *q == p))
                }
            })
            .collect();
        let target = assign(&ids, &owner, self.settings.max_moves);
        let now = Instant::now();
        for ask in &view.asks {
            if ask.by != self.id
                && self.guards.contains_key(&ask.partition)
                && self.told.insert(ask.partition)
            {
                let _ = self.events.send(PartitionEvent::Revoking {
                    partition: ask.partition,
                    deadline: now + ask.left,
                });
            }
        }
        let (mut ask_for, mut clear) = (Vec::new(), Vec::new());
        for i in (0..m).filter(|&i| target[i] == me) {
            let p = part(i);
            if self.guards.contains_key(&p) {
                continue;
            }
            let mine = view
                .asks
                .iter()
                .find(|a| a.partition == p && a.by == self.id);
            match (view.partitions[i], owner[i], mine) {
                (None, _, _) if self.take(client, p) && mine.is_some() => clear.push(p),
                (Some(_), Some(_), None) => ask_for.push(p),
                (Some(_), Some(_), Some(a)) if a.left.is_zero() => {
                    let forced = self
                        .send(&force_cmd(&self.keys[1], &self.keys[2 + i], &self.id, p))
                        .map(|v| redis::from_redis_value_ref::<i64>(&v).unwrap_or(0));
                    if matches!(forced, Ok(1)) && self.take(client, p) {
                        clear.push(p);
                    }
                }
                // Taken by someone else just now; held by nobody known (a gone
                // member's lease, running out); asked for and not yet past its
                // deadline: wait.
                _ => {}
            }
        }
        for a in view.asks.iter().filter(|a| a.by == self.id) {
            let i = a.partition as usize;
            if (i >= m || target[i] != me || self.guards.contains_key(&a.partition))
                && !clear.contains(&a.partition)
            {
                clear.push(a.partition);
            }
        }
        // Withdrawn before new asks, so the asks out never exceed the moves allowed.
        if !clear.is_empty() {
            let _ = self.send(&clear_cmd(&self.keys[1], &self.id, &clear));
        }
        if !ask_for.is_empty()
            && let Err(e) = self.send(&ask_cmd(
                &self.keys[1],
                &self.id,
                self.settings.grace,
                &ask_for,
            ))
        {
            log::warn!("member `{}`: ask failed: {e}", self.id);
        }
    }

    /// One attempt at partition `p`'s lock; whether it is ours now.
    fn take(&mut self, client: &LockClient, p: u32) -> bool {
        let opts = LockOptions::new()
            .ttl(self.settings.ttl)
            .fencing(true)
            .wait(Duration::ZERO);
        match client.lock_with(&self.names[p as usize], &opts) {
            Ok(Some(guard)) => {
                let fence = guard.fence().unwrap_or(0);
                self.guards.insert(p, guard);
                let _ = self.events.send(PartitionEvent::Assigned {
                    partition: p,
                    fence,
                });
                true
            }
            Ok(None) => false,
            Err(e) => {
                log::warn!("member `{}`: taking partition {p}: {e}", self.id);
                false
            }
        }
    }
}

fn part(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
