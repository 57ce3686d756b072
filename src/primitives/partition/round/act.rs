//! The second half of a member's round: what it does with what it read.

use std::time::{Duration, Instant};

use super::{LockClient, Worker, part};
use crate::client::options::LockOptions;
use crate::primitives::partition::assign::assign;
use crate::primitives::partition::events::PartitionEvent;
use crate::scheme::partition::{View, ask_cmd, clear_cmd, force_cmd};
use crate::scheme::token::once;

impl Worker {
    /// Takes, asks for and gives up what the assignment computed from `view`
    /// says; returns the partitions taken, with their fences, for the round to
    /// tell once its record names them.
    pub(super) fn act(&mut self, client: &LockClient, view: &View) -> Vec<(u32, u64)> {
        let mut taken = Vec::new();
        let ids: Vec<String> = view.members.iter().map(|r| r.id.clone()).collect();
        let Some(me) = ids.iter().position(|i| *i == self.id) else {
            return taken;
        };
        let m = self.names.len();
        let owner: Vec<Option<usize>> = (0..m)
            .map(|i| {
                let p = part(i);
                if view.partitions[i].is_free() {
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
            match (view.partitions[i].is_free(), owner[i], mine) {
                (true, _, _) if self.take(client, p, &mut taken) && mine.is_some() => clear.push(p),
                // Held by no live member: a member whose liveness session
                // ended has its lock broken, and it is taken at once.
                (false, None, _)
                    if self.broke_dead_holder(client, p)
                        && self.take(client, p, &mut taken)
                        && mine.is_some() =>
                {
                    clear.push(p);
                }
                (false, Some(_), None) => ask_for.push(p),
                (false, Some(_), Some(a)) if a.left.is_zero() => {
                    let forced = self
                        .send(&force_cmd(&self.keys[1], &self.keys[2 + i], &self.id, p))
                        .map(|v| redis::from_redis_value_ref::<i64>(&v).unwrap_or(0));
                    if matches!(forced, Ok(1)) && self.take(client, p, &mut taken) {
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
        taken
    }

    /// One attempt at partition `p`'s lock; whether it is ours now (then it
    /// is added to `taken`, with its fence).
    fn take(&mut self, client: &LockClient, p: u32, taken: &mut Vec<(u32, u64)>) -> bool {
        let opts = LockOptions::new()
            .ttl(self.settings.ttl)
            .fencing(true)
            .wait(Duration::ZERO);
        match client.lock_with(&self.names[p as usize], &opts) {
            Ok(Some(guard)) => {
                let fence = guard.fence().unwrap_or(0);
                self.guards.insert(p, guard);
                taken.push((p, fence));
                true
            }
            Ok(None) => false,
            Err(e) => {
                log::warn!("member `{}`: taking partition {p}: {e}", self.id);
                false
            }
        }
    }

    /// Whether partition `p`'s lock was held by a client whose liveness session
    /// ended, and is free now: its value read, and removed if the holder's
    /// record is gone (`scheme/token/live.rs`). Only where the lock and the
    /// record share a server; never for a holder that declared no liveness.
    fn broke_dead_holder(&self, client: &LockClient, p: u32) -> bool {
        let lock = &self.keys[2 + p as usize];
        let prefix = &client.inner.settings.key_prefix;
        let topology = &self.hub.topology;
        let holder = match topology.query(lock, &[], redis::cmd("GET").arg(lock)) {
            Ok(redis::Value::BulkString(v)) => String::from_utf8(v).unwrap_or_default(),
            _ => return false,
        };
        let Some((session, cmd)) = once::break_cmd(prefix, lock, &holder) else {
            return false;
        };
        if !topology.one_step(&[lock, &session]) {
            return false;
        }
        let sent = Instant::now();
        match topology.query(lock, &once::BREAK_SCRIPTS, &cmd) {
            Ok(reply) => once::broke(&reply, session, sent, client.inner.id.broken()),
            Err(e) => {
                log::debug!(
                    "member `{}`: looking at partition {p}'s holder: {e}",
                    self.id
                );
                false
            }
        }
    }
}
