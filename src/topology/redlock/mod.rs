//! [`Redlock`]: every lock on a quorum of N independent Redis masters.
//!
//! Each call asks every node at once, through the node's lane (a thread of its own),
//! waits for each at most the node timeout (a release: the read timeout), and
//! counts the answers by the majority
//! rule of [`Count`] (`quorum.rs` sends, `ballot.rs` counts). An acquire is one token,
//! the same `SET NX PX` on every node; it holds when a majority granted it while
//! its validity (`sent + ttl - drift`) is still ahead; anything else is taken out
//! again, off the caller's time, by the nodes' I/O threads. A caller that polls
//! looks first (`look.rs`): a poll that finds no majority free writes nothing.
//!
//! Layout: this file is [`Redlock`], its calls; `quorum.rs` the nodes and how a call
//! asks them all at once; `lane.rs` a node's lane thread; `ballot.rs` the majority rule
//! and the renewal tick's ballot; `answers.rs` reading an acquire's answers; `look.rs`
//! a polling caller's look before it tries.

mod answers;
mod ballot;
mod lane;
mod look;
mod quorum;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use self::answers::{RETRY_MAX, busy, jitter, late, remaining};
use self::ballot::{Ballot, Count, Vote};
use self::quorum::{Quorum, no_fencing, no_quorum, send};
use crate::error::{Error, Operation, Result};
use crate::metrics::{Counters, bump};
use crate::net::connection::{Conn, Target};
use crate::net::node::{Node, NodeConfig};
use crate::owner::{ClientTag, SessionWrite};
use crate::scheme::{
    Acquire, Announce, Backend, Extend, Freed, Keys, Release, Request, Scheme, Waiting, extend_on,
    new_token,
};
use crate::time::in_time;
use crate::topology::io::batch::{self, Spec};
use crate::topology::io::{IoThread, Link, Worker};
use crate::topology::{Attempt, HandOff, Handed, Renew, Renewed, Topology};

pub(crate) use self::quorum::{Wait, no_replicas, refuse};

/// Rounds an acquire makes when failures, not other holders, kept it from a
/// majority (only for callers that will wait; `try_lock` makes one).
///
/// A busy acquire tells its caller how long the holders have left, as one
/// server does, and the caller waits as one server's does: for a release
/// message or its next poll, whichever comes first. Its waiter hears release
/// messages from one node only (which may not have held the lock), so a release
/// it did not hear is found by a poll, within the client's longest polling step.
const ROUNDS: u32 = 3;

/// A quorum of independent masters holds every lock.
pub(crate) struct Redlock {
    quorum: Quorum,
    counters: Arc<Counters>,
    /// How long a background release is retried when the lease's TTL is unknown:
    /// the client's default TTL.
    ttl: Duration,
    /// The client's tag, which its tokens carry.
    tag: ClientTag,
}

impl Redlock {
    /// Connects to the nodes at `infos` and checks each with `check` (see
    /// [`Quorum::connect`]); the client keeps the returned thread handles. Also
    /// returns whether the waiter may subscribe.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when fewer than a majority answered the `PING`; what
    /// `check` returns for a node it refuses.
    pub(crate) fn connect(
        targets: Vec<Target>,
        config: NodeConfig,
        wait: Wait,
        ttl: Duration,
        (counters, tag): (&Arc<Counters>, ClientTag),
        check: impl Fn(&Node) -> Result<bool> + Sync,
    ) -> Result<(Self, Vec<IoThread>, bool)> {
        let (quorum, io, subscribe) =
            Quorum::connect(targets, config, wait, (counters, tag), check)?;
        let redlock = Self {
            quorum,
            counters: Arc::clone(counters),
            ttl,
            tag,
        };
        Ok((redlock, io, subscribe))
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("quorum", &self.quorum)
            .finish_non_exhaustive()
    }
}

impl Topology for Redlock {
    fn acquire(&self, backend: &Arc<dyn Backend>, keys: &Keys, req: Request) -> Result<Attempt> {
        if req.fence {
            return Err(no_fencing());
        }
        if req.replicas.is_some() {
            return Err(no_replicas());
        }
        // A caller that polls (it knows how long the holder has left) looks
        // before it writes, as one server's poll costs one command a node.
        if req.wait == Waiting::Poll
            && let Some(busy) = self.look(keys, req.ttl)
        {
            return Ok(busy);
        }
        let mut round = 1;
        loop {
            let value = new_token(self.tag);
            bump(&self.counters.attempts, 1);
            let op = {
                let (backend, keys, value) = (Arc::clone(backend), keys.clone(), value.clone());
                move |c: &mut Conn| backend.acquire(c, &keys, &value, req)
            };
            let wait = self.quorum.node_wait(Some(req.ttl));
            let sent = Instant::now();
            let (count, answers) = self.quorum.ask(
                wait,
                op,
                |_, _| {},
                |a| match a {
                    Ok(Acquire::Acquired { .. }) => Vote::Yes,
                    Ok(Acquire::Busy { .. }) => Vote::No,
                    Err(_) => Vote::Failed,
                },
                Count::acquire_settled,
            );
            // A lane sends its `SET` by `sent + wait` at the latest; the value lives
            // a TTL from when it lands.
            let until = sent + wait + req.ttl;
            if count.won() && in_time(sent, req.ttl) {
                return Ok(Attempt::Acquired {
                    value,
                    sent,
                    fence: None,
                });
            }
            // Not ours: take the value out wherever it may have landed (a node
            // that said busy never stored it). Only a majority, held too late,
            // may have been seen as the lock by anyone who did not mark it.
            let stored = |i: usize| !matches!(answers[i], Ok(Acquire::Busy { .. }));
            self.quorum
                .take_back(keys, &value, until, (&stored, count.won()));
            if !count.won() && count.answered_live() {
                let remaining = remaining(&count, busy(&answers));
                return Ok(Attempt::Busy {
                    remaining,
                    announces: false,
                });
            }
            // Failed: another round after a random pause, if the caller waits and
            // the round can end before the caller must return.
            let pause = jitter(RETRY_MAX);
            let past = |t: Instant| Instant::now() + pause + wait > t;
            if !req.wait.first() || round >= ROUNDS || req.return_by.is_some_and(past) {
                let (count, failures) = if count.won() {
                    log::debug!("acquire of `{}` took longer than its validity", keys.lock);
                    late(count, answers, &self.quorum, &keys.lock, wait)
                } else {
                    let failures =
                        self.quorum
                            .failures(answers, Operation::Acquire, &keys.lock, wait);
                    (count, failures)
                };
                return Err(no_quorum(&count, failures));
            }
            round += 1;
            std::thread::sleep(pause);
        }
    }

    fn release(
        &self,
        _backend: &dyn Backend,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
    ) -> Result<Freed> {
        let (always, keep) = (announce.always, announce.keep);
        let keys = Keys {
            lock: key.to_owned(),
            channel: announce.channel.to_owned(),
            // It only names the fence counter, which a release never touches.
            prefix: 0,
            slot_tag: None,
        };
        let op = {
            let (backend, keys) = (Arc::clone(self.quorum.token()), keys.clone());
            let (value, maybe) = (value.to_owned(), maybe.to_vec());
            move |c: &mut Conn| {
                let announce = Announce {
                    channel: &keys.channel,
                    always,
                    keep,
                };
                backend.release(c, &keys.lock, announce, &value, &maybe)
            }
        };
        // Each lane counts its node, and hands a failed delete to the node's I/O
        // thread: the caller returns as soon as a majority decided.
        let counters = Arc::clone(&self.counters);
        let cleanup = self.quorum.cleanup(&keys, value, Instant::now() + self.ttl);
        let then = move |answer: &Result<Freed>, worker: &Worker| match answer {
            Ok(f) if f.outcome == Release::Released => bump(&counters.node_releases, 1),
            Ok(_) => {}
            // A keep (a minimum hold) that failed leaves the node's key to its
            // TTL, which lasts past the hold's end: deleting it would end the
            // hold early.
            Err(_) if keep.is_some() => {}
            Err(_) => send(worker, cleanup.clone()),
        };
        // No validity to race: a node that is slow, or whose lane is busy with
        // this client's other calls, counts as what it says, not as failed.
        let wait = self
            .quorum
            .node_wait(None)
            .max(self.quorum.node(0).read_timeout());
        let (count, answers) = self.quorum.ask(
            wait,
            op,
            then,
            |a| match a {
                Ok(f) if f.outcome == Release::Released => Vote::Yes,
                Ok(_) => Vote::No,
                Err(_) => Vote::Failed,
            },
            |c| c.won() || c.refused(),
        );
        let found = |outcome| {
            answers
                .iter()
                .any(|a| matches!(a, Ok(f) if f.outcome == outcome))
        };
        // Each client's waiter listens on one node: the largest count is the best
        // estimate of how many clients heard the release.
        let listeners = answers.iter().flatten().map(|f| f.listeners).max();
        let outcome = if count.won() {
            Release::Released
        } else if count.refused() {
            if found(Release::Taken) {
                Release::Taken
            } else {
                Release::Expired
            }
        } else if count.may_hold() {
            let failures = self.quorum.failures(answers, Operation::Release, key, wait);
            return Err(no_quorum(&count, failures));
        } else {
            // Fewer than a majority failed: none of ours is left on a majority,
            // and the failed nodes may have held it with those that released it
            // (masters that died under a lease, maybe passed on between this
            // client's callers since): nothing contradicts a lease held to the end.
            Release::Released
        };
        Ok(Freed {
            outcome,
            listeners: listeners.unwrap_or(0),
        })
    }

    fn release_later(&self, _backend: Arc<dyn Backend>, keys: Keys, value: String, until: Instant) {
        // Held where, and by whom seen, is unknown: everywhere, announced.
        self.quorum
            .take_back(&keys, &value, until, (&|_| true, true));
    }

    fn extend(
        &self,
        _backend: &dyn Backend,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (String, Instant, Result<Extend>) {
        let (cmd, new_value) = self.quorum.token().extend_cmd(key, value, maybe, ttl);
        let op = {
            let backend = Arc::clone(self.quorum.token());
            let (key, value, maybe) = (key.to_owned(), value.to_owned(), maybe.to_vec());
            move |c: &mut Conn| {
                let reply = extend_on(&*backend, c, (&key, &value, &maybe), ttl, &cmd)?;
                backend.extend_reply(&reply)
            }
        };
        let wait = self.quorum.node_wait(Some(ttl));
        let sent = Instant::now();
        let (count, answers) = self.quorum.ask(
            wait,
            op,
            |_, _| {},
            |a| match a {
                Ok(Extend::Extended) => Vote::Yes,
                Ok(_) => Vote::No,
                Err(_) => Vote::Failed,
            },
            |c| c.won() || c.refused(),
        );
        let outcome = if count.won() {
            Ok(Extend::Extended)
        } else if count.refused() {
            let taken = answers.iter().any(|a| matches!(a, Ok(Extend::Taken)));
            Ok(if taken { Extend::Taken } else { Extend::Gone })
        } else {
            let failures = self.quorum.failures(answers, Operation::Extend, key, wait);
            Err(no_quorum(&count, failures))
        };
        (new_value, sent, outcome)
    }

    fn hand_off(&self, _keys: &Keys, _hand_off: HandOff<'_>) -> Option<Result<Handed>> {
        // The hand-off script replaces our token on one server; across a quorum
        // it would be a vote like an acquire, no cheaper than a release.
        None
    }

    fn renew(&self, batch: Vec<Renew>, done: Sender<Vec<(u64, Renewed)>>) {
        let sent = Instant::now();
        let (flights, skipped) = batch::hold(batch);
        if !skipped.is_empty() {
            let _ = done.send(skipped);
        }
        if flights.is_empty() {
            return;
        }
        let report_by = flights.iter().map(|f| f.state.valid_until()).min();
        let specs: Arc<[Spec]> = flights
            .iter()
            .map(|f| Spec {
                backend: Arc::clone(&f.state.backend),
                key: f.state.key.clone(),
                value: f.held.value.clone(),
                ttl: f.ttl,
            })
            .collect();
        let ballot = Arc::new(Ballot::new(self.quorum.len(), sent, flights, done));
        self.quorum.vote(&specs, report_by, &ballot);
    }

    fn write_session(&self, write: &Arc<SessionWrite>, done: Option<&Sender<()>>) -> usize {
        self.quorum.write_session(write, done)
    }

    fn subscribers(&self) -> usize {
        self.quorum.len()
    }

    fn subscriber(&self, i: usize) -> &Arc<Node> {
        self.quorum.node(i)
    }

    fn read_timeout(&self) -> Duration {
        self.quorum.node_wait(None)
    }

    fn publish(&self, i: usize, channel: &str, message: &str) -> Result<()> {
        // Only the waiter's own wake-up goes through here: sent from the
        // subscriber's lane, never waited for.
        let (channel, message) = (channel.to_owned(), message.to_owned());
        let wait = self.quorum.node_wait(None);
        let deadline = Instant::now() + wait;
        let sent = self.quorum.on(
            i,
            Box::new(move |link: &mut Link| {
                let publish = |c: &mut Conn| {
                    c.run(|c| {
                        redis::cmd("PUBLISH")
                            .arg(&channel)
                            .arg(&message)
                            .query::<i64>(c)
                    })
                };
                let _ = link.call(deadline, wait, publish);
            }),
        );
        if sent { Ok(()) } else { Err(Error::Shutdown) }
    }

    fn check(&self, scheme: &Scheme, fencing: bool) -> Result<()> {
        refuse(scheme, fencing)
    }

    fn holds(&self, what: &'static str) -> Result<()> {
        Err(Error::Unsupported {
            what,
            by: "redlock",
        })
    }
}
