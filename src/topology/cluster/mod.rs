//! [`Cluster`]: locks spread over the masters of a Redis Cluster by key slot.
//!
//! Each lock lives on the master serving its key's slot, and every name a lock
//! touches is in that slot (the fence counter carries a tag of the slot; the
//! release channel is classic pub/sub, which reaches every node). A call goes to
//! the master the map names, through that master's [`Single`]: its pool, its I/O
//! thread. The answers that say a call ran nowhere are followed within the call
//! (see [`retry`]):
//!
//! - `MOVED` (a slot moved for good, a failover): the connection noted the new
//!   master in the map's sink; the call is sent again to the master named.
//! - `ASK` (a slot being migrated, the key already on the new master): the call
//!   is sent there, each command preceded by `ASKING`.
//! - `TRYAGAIN` (a script's keys, lock and fence counter, not all on the master
//!   asked: a free lock's fenced acquire meets it until its slot has moved): sent
//!   again from the start, where the map says (the slot may have moved meanwhile).
//! - `CLUSTERDOWN` (the node sees the cluster failed, for a moment after a
//!   failover): sent again where the map, read again, says.
//!
//! The first two redirections are followed at once; after them, and after every
//! `TRYAGAIN` or `CLUSTERDOWN`, the call pauses 1, 2, 4 … ms (at most 100 ms,
//! jittered) before it is sent again, and redirections that disagree (a source
//! already told the new owner, the new owner still importing and pointing back)
//! have the map read again. A call keeps at it for one read timeout from its
//! first pause, never past its caller's bound; then a caller that waits is told
//! busy and waits as for a held lock (deadline, cancel, shutdown apply), and any
//! other call fails with the last answer. Nothing of this ran anywhere, so an
//! acquire is sent again too; one that got no answer (a timeout, a lost
//! connection) may have run, and is not.
//!
//! A node that fails (no answer, refused) has the `redlease-map` thread read the
//! whole map again, so a crashed master's slots move to the replica that took
//! over. Renewals go in one pipeline per master per tick; a renewal that meets a
//! moving slot is answered failed (the lease stays valid as it was) and is tried
//! again shortly, where the map then says.
//!
//! Layout: this file is [`Cluster`]: routing by slot and redirections; `retry.rs`
//! what a redirection or a down cluster asks for and how long it is waited out;
//! `slot_map.rs` the slot map and its `redlease-map` thread; `live.rs` the break
//! of a dead liveness session's token lock in two steps (its record read on its
//! own node).

mod live;
mod retry;
mod slot_map;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use self::retry::{Hop, Retry};
pub(crate) use self::slot_map::Opener;
use self::slot_map::{Shared, first_map};
use crate::error::{Error, Result};
use crate::metrics::Counters;
use crate::net::node::{Node, NodeConfig};
use crate::net::slots::slot;
use crate::owner::SessionWrite;
use crate::scheme::{Announce, Backend, Extend, Freed, Keys, Request, Waiting};
use crate::topology::io::{Free, IoThread};
use crate::topology::single::Single;
use crate::topology::{Attempt, HandOff, Handed, Renew, Renewed, Scripts, Topology};

/// The masters of a Redis Cluster hold the locks, each those of its slots.
pub(crate) struct Cluster {
    shared: Arc<Shared>,
    /// Asks the map thread to read the map again.
    nudge: Sender<()>,
    /// The masters known when the client was built: any of them carries every
    /// release message (classic pub/sub is broadcast over the cluster bus).
    subscribers: Vec<Arc<Node>>,
    /// Whether releases publish with `SPUBLISH` (Redis 7 has sharded pub/sub).
    sharded: bool,
    read_timeout: Duration,
}

/// How long a call keeps sending itself again after an answer that says it ran
/// nowhere (a [`Hop`]).
#[derive(Clone, Copy)]
enum Patience {
    /// For one read timeout from its first pause, and never past the instant given.
    Resend(Option<Instant>),
    /// Only the redirections followed at once: a hand-off, whose lock is then
    /// released the usual way.
    Return,
}

impl Cluster {
    /// Reads the slot map from the first of `seeds` that answers, opens every
    /// master (`open` makes a node's target), checks the user's rights with
    /// `check` on one master (given a range of slots it serves), and starts the map
    /// thread. The client keeps the returned thread handle (dropping it stops every
    /// thread of the cluster); also returns whether the waiter may subscribe.
    ///
    /// # Errors
    /// [`Error::Config`] when a seed is not a cluster node, what the seeds failed
    /// with when none answered, what `check` returns.
    pub(crate) fn connect(
        seeds: &[(String, u16)],
        open: Opener,
        config: NodeConfig,
        counters: &Arc<Counters>,
        check: impl Fn(&Node, (u16, u16)) -> Result<bool>,
    ) -> Result<(Self, Vec<IoThread>, bool)> {
        let ranges = first_map(seeds, &open, config)?;
        let threads = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared::new(
            &ranges,
            open,
            config,
            Arc::clone(counters),
            &threads,
        )?);
        let subscribers: Vec<Arc<Node>> = shared
            .masters()
            .iter()
            .map(|s| Arc::clone(s.node()))
            .collect();
        let first = &ranges[0];
        let subscribe = check(
            shared.at(&format!("{}:{}", first.host, first.port))?.node(),
            (first.start, first.end),
        )?;
        let spublish = has_sharded_pubsub(&subscribers[0]);
        shared.redirects.set_sharded(spublish);
        let (nudge, map_io) = slot_map::spawn(Arc::clone(&shared))?;
        threads.lock().push(map_io);
        let cluster = Self {
            shared,
            nudge,
            subscribers,
            sharded: spublish,
            read_timeout: config.read_timeout,
        };
        let registry = Arc::clone(&threads);
        // Taken out first and dropped with the registry unlocked: the map thread that
        // is joined may be taking a new master in, which needs the lock.
        let handle = IoThread::group(move || {
            let threads = std::mem::take(&mut *registry.lock());
            drop(threads);
        });
        // The registry lives as long as the client's handle; the topology holds it
        // weakly (through `Shared`), so guards keep no thread alive.
        drop(threads);
        Ok((cluster, vec![handle], subscribe))
    }

    /// Sends `call` to the master of `key`'s slot, following the answers that
    /// say it ran nowhere ([`Hop`]) as `patience` says; `err` finds the error in
    /// what a call returns. Returns the last answer, and how long a caller that
    /// waits should pause before it tries again.
    fn routed<T>(
        &self,
        key: &str,
        err: impl Fn(&T) -> Option<&Error>,
        patience: Patience,
        mut call: impl FnMut(&Single, bool) -> T,
    ) -> Result<(T, Duration)> {
        let slot = slot(key.as_bytes());
        let mut retry = match patience {
            Patience::Resend(by) => Retry::new(self.read_timeout, by),
            // No span: no pause ends in time, only the free hops are followed.
            Patience::Return => Retry::new(Duration::ZERO, None),
        };
        // Where the next send goes when not by the map: a node named by `MOVED`,
        // or one that answered `ASK` (with `ASKING`).
        let mut next: Option<(Arc<Single>, bool)> = None;
        loop {
            let (single, asking) = match next.take() {
                Some(to) => to,
                None => (self.shared.master(slot, &self.nudge)?, false),
            };
            let out = call(&single, asking);
            let e = err(&out);
            if e.is_some_and(Error::is_connection_error) {
                // The master may have been replaced: have the map read again.
                let _ = self.nudge.try_send(());
            }
            let Some(hop) = e.and_then(Hop::of) else {
                return Ok((out, Duration::ZERO));
            };
            if retry.disagree(&hop) {
                let _ = self.nudge.try_send(());
            }
            if !retry.again(&hop) {
                return Ok((out, retry.next_pause()));
            }
            next = match hop {
                // A node we cannot open now is reached through the map.
                Hop::Moved(addr) => self.shared.at(&addr).ok().map(|s| (s, false)),
                Hop::Ask(addr) => match self.shared.at(&addr) {
                    Ok(s) => Some((s, true)),
                    Err(_) => return Ok((out, retry.next_pause())),
                },
                // From the start: the slot's move may have ended or gone on.
                Hop::TryAgain | Hop::Down => None,
            };
        }
    }
}

impl Topology for Cluster {
    fn acquire(&self, backend: &Arc<dyn Backend>, keys: &Keys, req: Request) -> Result<Attempt> {
        // Only the fence counter's name changes in a cluster: the token scheme
        // names it only when a fence is asked for.
        let keys = if req.fence || !backend.hands_over() {
            Cow::Owned(keys.clone().in_cluster())
        } else {
            Cow::Borrowed(keys)
        };
        // A caller that waits is bounded by its deadline (`return_by`) and, past
        // one read timeout, waits as for a held lock: see the top.
        let waits = req.wait != Waiting::No;
        let (out, pause) = self.routed(
            &keys.lock,
            error_of,
            Patience::Resend(req.return_by),
            |single, ask| single.acquire_asking(backend, &keys, req, ask),
        )?;
        match out {
            // Each `Hop` comes before anything runs: nothing was written.
            Err(e) if waits && Hop::of(&e).is_some() => Ok(Attempt::Busy {
                remaining: Some(pause),
                announces: false,
            }),
            // A liveness session's token holds it: its record is read on its
            // own node, and the token removed once it is gone.
            Ok(Attempt::Busy {
                remaining,
                announces,
            }) if waits => Ok(Attempt::Busy {
                remaining: match self.look_across(&**backend, &keys) {
                    Some(left) => Some(remaining.map_or(left, |r| r.min(left))),
                    None => remaining,
                },
                announces,
            }),
            out => out,
        }
    }

    fn release(
        &self,
        backend: &dyn Backend,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
    ) -> Result<Freed> {
        let (out, _) = self.routed(key, error_of, Patience::Resend(None), |single, ask| {
            single.release_asking(backend, key, announce, value, maybe, ask)
        })?;
        out
    }

    fn release_later(&self, backend: Arc<dyn Backend>, keys: Keys, value: String, until: Instant) {
        match self.shared.master(slot(keys.lock.as_bytes()), &self.nudge) {
            Ok(single) => single.release_later(backend, keys.in_cluster(), value, until),
            Err(e) => log::warn!("value of `{}` left to expire: {e}", keys.lock),
        }
    }

    fn release_queued(&self, mut free: Box<Free>) -> std::result::Result<(), Box<Free>> {
        match self
            .shared
            .master(slot(free.cleanup.keys.lock.as_bytes()), &self.nudge)
        {
            Ok(single) => {
                free.cleanup.keys = free.cleanup.keys.in_cluster();
                single.release_queued(free)
            }
            Err(_) => Err(free),
        }
    }

    fn extend(
        &self,
        backend: &dyn Backend,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (String, Instant, Result<Extend>) {
        let out = self.routed(
            key,
            |r: &(String, Instant, Result<Extend>)| r.2.as_ref().err(),
            Patience::Resend(None),
            |single, ask| single.extend_asking(backend, (key, value, maybe), ttl, ask),
        );
        out.map_or_else(|e| (value.to_owned(), Instant::now(), Err(e)), |o| o.0)
    }

    fn hand_off(&self, keys: &Keys, h: HandOff<'_>) -> Option<Result<Handed>> {
        let keys = keys.clone().in_cluster();
        // Past the redirections followed at once, ours is released the usual way.
        let out = self.routed(&keys.lock, error_of, Patience::Return, |s, ask| {
            s.hand_off_asking(&keys, h, ask)
        });
        Some(out.and_then(|r| r.0))
    }

    fn query(&self, key: &str, scripts: Scripts, cmd: &redis::Cmd) -> Result<redis::Value> {
        let (out, _) = self.routed(key, error_of, Patience::Resend(None), |s, a| {
            s.query_asking(scripts, cmd, a)
        })?;
        out
    }

    fn one_step(&self, keys: &[&str]) -> bool {
        let mut slots = keys.iter().map(|k| slot(k.as_bytes()));
        let first = slots.next();
        slots.all(|s| Some(s) == first)
    }

    fn renew(&self, batch: Vec<Renew>, done: Sender<Vec<(u64, Renewed)>>) {
        let mut groups: HashMap<*const Single, (Arc<Single>, Vec<Renew>)> = HashMap::new();
        let mut unrouted = Vec::new();
        for r in batch {
            let at = slot(r.state.key.as_bytes());
            match self.shared.master(at, &self.nudge) {
                Ok(single) => {
                    let group = groups
                        .entry(Arc::as_ptr(&single))
                        .or_insert_with(|| (single, Vec::new()));
                    group.1.push(r);
                }
                Err(_) => unrouted.push((r.id, Renewed::Failed)),
            }
        }
        if !unrouted.is_empty() {
            let _ = done.send(unrouted);
        }
        for (single, group) in groups.into_values() {
            single.renew(group, done.clone());
        }
    }

    fn write_session(&self, write: &Arc<SessionWrite>, done: Option<&Sender<()>>) -> usize {
        let master = self.shared.master(slot(write.key.as_bytes()), &self.nudge);
        master.map_or(0, |single| single.write_session(write, done))
    }

    fn readers(&self, key: &str) -> Vec<Arc<Node>> {
        let master = self.shared.master(slot(key.as_bytes()), &self.nudge);
        master.map(|s| Arc::clone(s.node())).into_iter().collect()
    }

    fn fence_of(&self, keys: &Keys) -> String {
        keys.clone().in_cluster().fence()
    }

    fn subscribers(&self) -> usize {
        self.subscribers.len()
    }

    fn subscriber(&self, i: usize) -> &Arc<Node> {
        &self.subscribers[i % self.subscribers.len()]
    }

    fn sharded(&self) -> bool {
        self.sharded
    }

    fn subscriber_for(&self, channel: &str) -> Option<usize> {
        let slot = slot(channel.as_bytes());
        let master = self.shared.master(slot, &self.nudge).ok()?;
        let node = master.node();
        self.subscribers.iter().position(|n| Arc::ptr_eq(n, node))
    }

    fn read_timeout(&self) -> Duration {
        self.read_timeout
    }

    fn publish(&self, i: usize, channel: &str, message: &str) -> Result<()> {
        self.subscriber(i).publish(channel, message)
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

fn error_of<T>(r: &Result<T>) -> Option<&Error> {
    r.as_ref().err()
}

/// Whether `node` knows `SPUBLISH` (Redis 7): `COMMAND INFO` answers a null for
/// a command it does not have. A user who may not ask is given classic pub/sub.
fn has_sharded_pubsub(node: &Node) -> bool {
    let info = node.get().and_then(|mut c| {
        Ok(c.run(|c| {
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg("SPUBLISH")
                .query::<Vec<redis::Value>>(c)
        })?)
    });
    matches!(info.as_deref(), Ok([first]) if *first != redis::Value::Nil)
}
