//! The nodes of a Redlock quorum, and how a call asks them all at once: each
//! node's lane (a thread of its own, made with the client) runs the call, and the
//! caller waits for each node at most the node timeout, counting the answers by
//! the majority rule of [`Count`] as they come.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::ballot::{Ballot, Count, Vote};
use super::lane::{Call, Lane};
use crate::error::failure::Limits;
use crate::error::{Error, NodeFailure, Operation, Result};
use crate::metrics::Counters;
use crate::net::connection::{Conn, Target};
use crate::net::node::{Node, NodeConfig};
use crate::owner::{ClientTag, SessionWrite};
use crate::scheme::{Announce, Backend, Keys, Scheme, TokenBackend};
use crate::topology::io::batch::{Reply, Spec};
use crate::topology::io::{Cleanup, IoThread, Job, Worker};
use crate::topology::io::{Link, timed_out};

/// The nodes of a quorum.
pub(crate) struct Quorum {
    members: Vec<Member>,
    /// The token scheme, the only one a quorum serves: releases and extends run on
    /// the lanes after the caller may have returned, so they own their backend.
    token: Arc<dyn Backend>,
    /// How long a call waits for each node: fixed, or the default rule.
    wait: Wait,
}

/// One node of the quorum, and the sending ends of its two threads.
struct Member {
    node: Arc<Node>,
    address: String,
    lane: Lane,
    worker: Worker,
}

/// How long a call waits for each node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    /// Set by the builder: used as is.
    pub(crate) fixed: Option<Duration>,
    /// Otherwise: this, but never more than 1/20 of the lease's TTL.
    pub(crate) default: Duration,
}

/// A lane call's answer: which node, and what it said.
type Answer<T> = (usize, Result<T>);

impl Quorum {
    /// Opens every node, `PING`s them all at once and runs `check` (what the Redis
    /// user may do; whether it may subscribe) on those that answer, and starts each
    /// node's lane and I/O thread, whose handles the client keeps. A majority must
    /// answer; the others are tried again by every call. Returns whether the first
    /// node lets the waiter subscribe (`true` while it is down: its waiter polls
    /// until it is back).
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when fewer than a majority answered the `PING`, the
    /// error of `check` when it refuses a node's user (for instance
    /// [`Error::Permission`]).
    pub(crate) fn connect(
        targets: Vec<Target>,
        config: NodeConfig,
        wait: Wait,
        (counters, tag): (&Arc<Counters>, ClientTag),
        check: impl Fn(&Node) -> Result<bool> + Sync,
    ) -> Result<(Self, Vec<IoThread>, bool)> {
        let nodes: Vec<_> = targets
            .into_iter()
            .map(|target| Arc::new(Node::open(target, config)))
            .collect();
        let checks: Vec<Result<bool>> = std::thread::scope(|s| {
            let check = &check;
            let handles: Vec<_> = nodes
                .iter()
                .map(|n| s.spawn(move || n.ping().and_then(|()| check(n))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(Error::Shutdown)))
                .collect()
        });
        let mut count = Count::new(nodes.len());
        let mut failures = Vec::new();
        let mut subscribe = true;
        for (i, (node, checked)) in nodes.iter().zip(checks).enumerate() {
            match checked {
                Ok(may) => {
                    count.add(Vote::Yes);
                    subscribe &= i > 0 || may;
                }
                Err(e @ Error::Permission { .. }) => return Err(e),
                Err(e) => {
                    count.add(Vote::Failed);
                    failures.push(NodeFailure::new(node.address().to_string(), e));
                }
            }
        }
        if !count.won() {
            return Err(no_quorum(&count, failures));
        }
        let bound = wait.fixed.unwrap_or(wait.default);
        let mut members = Vec::with_capacity(nodes.len());
        let mut io = Vec::with_capacity(2 * nodes.len());
        for node in nodes {
            let (lane, lane_io) = Lane::spawn(Arc::clone(&node))?;
            let (worker, worker_io) =
                Worker::spawn_linked(Arc::clone(&node), Arc::clone(counters), bound)?;
            io.extend([lane_io, worker_io]);
            members.push(Member {
                address: node.address().to_string(),
                node,
                lane,
                worker,
            });
        }
        let quorum = Self {
            members,
            token: Arc::new(TokenBackend::new(tag)),
            wait,
        };
        Ok((quorum, io, subscribe))
    }

    /// How long a call for a lease of `ttl` waits for each node.
    pub(crate) fn node_wait(&self, ttl: Option<Duration>) -> Duration {
        let Wait { fixed, default } = self.wait;
        let by_ttl = ttl.map_or(default, |t| t / 20);
        fixed
            .unwrap_or_else(|| default.min(by_ttl))
            .max(Duration::from_millis(1))
    }

    /// Runs `op` on every node at once, each on its lane, and collects the answers
    /// until `settled` says the count decides the call, every node answered, or
    /// `wait` has passed (nodes not answered by then: timeouts). Each lane passes
    /// its node's answer to `then` (node index, answer, that node's I/O thread)
    /// before sending it back, also after the caller has stopped listening.
    pub(crate) fn ask<T: Send + 'static>(
        &self,
        wait: Duration,
        op: impl Fn(&mut Conn) -> RedisResult<T> + Send + Sync + 'static,
        then: impl Fn(&Result<T>, &Worker) + Send + Sync + 'static,
        vote: impl Fn(&Result<T>) -> Vote,
        settled: impl Fn(&Count) -> bool,
    ) -> (Count, Vec<Result<T>>) {
        let n = self.members.len();
        let deadline = Instant::now() + wait;
        let op = Arc::new((op, then));
        let (tx, rx) = crossbeam_channel::bounded::<Answer<T>>(n);
        let mut answers: Vec<Option<Result<T>>> = (0..n).map(|_| None).collect();
        let mut count = Count::new(n);
        for (i, m) in self.members.iter().enumerate() {
            let (op, tx, worker) = (Arc::clone(&op), tx.clone(), m.worker.clone());
            let call = Box::new(move |link: &mut Link| {
                let (op, then) = &*op;
                let answer = link.call(deadline, wait, |c| op(c));
                then(&answer, &worker);
                let _ = tx.send((i, answer));
            });
            if let Some(call) = m.lane.send(call) {
                // The client is gone and a guard outlived it: ask on this thread.
                call(&mut Link::new(Arc::clone(&m.node)));
            }
        }
        drop(tx);
        while count.pending() > 0 && !settled(&count) {
            // A reply that came in time is read even if this thread was late.
            let Ok((i, answer)) = rx.recv_deadline(deadline).or_else(|_| rx.try_recv()) else {
                break;
            };
            count.add(vote(&answer));
            answers[i] = Some(answer);
        }
        let answers = answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(timed_out("no answer within the node timeout"))))
            .collect();
        (count, answers)
    }

    /// Takes an acquire's `value` back out on the nodes `stored` names (where it
    /// may have landed), off the caller's time: on each node's lane, behind the
    /// acquire's own `SET` (a delete that overtook it would leave the value to its
    /// TTL), then, where that failed, by the node's I/O thread, retried until
    /// `until`. It publishes only if a waiter marked the value or `always` asks: a
    /// moment's minority was nobody's lock; its message would wake our own waiter.
    pub(crate) fn take_back(
        &self,
        keys: &Keys,
        value: &str,
        until: Instant,
        (stored, always): (&dyn Fn(usize) -> bool, bool),
    ) {
        let wait = self.node_wait(None);
        let members = self.members.iter().enumerate();
        for (_, m) in members.filter(|(i, _)| stored(*i)) {
            let cleanup = self.cleanup(keys, value, until);
            let worker = m.worker.clone();
            let call = Box::new(move |link: &mut Link| {
                if Instant::now() >= until {
                    return;
                }
                let Cleanup { backend, keys, .. } = &cleanup;
                let delete = |c: &mut Conn| {
                    let announce = Announce {
                        always,
                        ..Announce::always(&keys.channel)
                    };
                    backend.release(c, &keys.lock, announce, &cleanup.value, &[])
                };
                if link.call(Instant::now() + wait, wait, delete).is_err() {
                    send(&worker, cleanup);
                }
            });
            if m.lane.send(call).is_some() {
                log::warn!("value of `{}` left to expire: client shut down", keys.lock);
            }
        }
    }

    /// What a node's I/O thread needs to delete `value` in the background.
    pub(crate) fn cleanup(&self, keys: &Keys, value: &str, until: Instant) -> Cleanup {
        Cleanup {
            backend: Arc::clone(&self.token),
            keys: keys.clone(),
            value: value.to_owned(),
            until,
        }
    }

    /// The failures among `answers`, each with its node, naming the call `op` on
    /// `key` and the node timeout `wait`.
    pub(crate) fn failures<T>(
        &self,
        answers: Vec<Result<T>>,
        op: Operation,
        key: &str,
        wait: Duration,
    ) -> Vec<NodeFailure> {
        answers
            .into_iter()
            .enumerate()
            .filter_map(|(i, a)| a.err().map(|e| self.failure(i, e, op, key, wait)))
            .collect()
    }

    /// Node `i`'s failure `e`, naming the call `op` on `key` and the node timeout.
    pub(crate) fn failure(
        &self,
        i: usize,
        e: Error,
        op: Operation,
        key: &str,
        wait: Duration,
    ) -> NodeFailure {
        let limits = Limits {
            reply: wait,
            checkout: wait,
        };
        let address = self.members[i].address.clone();
        NodeFailure::new(address, e.during(op, key, limits))
    }

    /// Sends the session record to every node's I/O thread; how many took it.
    pub(crate) fn write_session(
        &self,
        write: &Arc<SessionWrite>,
        done: Option<&crossbeam_channel::Sender<()>>,
    ) -> usize {
        let job = || Job::Session {
            write: Arc::clone(write),
            done: done.cloned(),
        };
        self.members
            .iter()
            .filter(|m| m.worker.send(job()).is_ok())
            .count()
    }

    /// How many nodes there are.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The token scheme's backend.
    pub(crate) fn token(&self) -> &Arc<dyn Backend> {
        &self.token
    }

    /// Node `i`, counted modulo the number of nodes.
    pub(crate) fn node(&self, i: usize) -> &Arc<Node> {
        &self.members[i % self.members.len()].node
    }

    /// Runs `call` on node `i`'s lane (modulo the number of nodes), not waiting for
    /// it; `false` once the lane has stopped.
    pub(crate) fn on(&self, i: usize, call: Call) -> bool {
        self.members[i % self.members.len()]
            .lane
            .send(call)
            .is_none()
    }

    /// Sends one renewal tick's `specs` to every node's I/O thread, each of which
    /// counts its replies into `ballot`.
    pub(crate) fn vote(
        &self,
        specs: &Arc<[Spec]>,
        report_by: Option<Instant>,
        ballot: &Arc<Ballot>,
    ) {
        for m in &self.members {
            let counted = Arc::clone(ballot);
            let job = Job::Vote {
                specs: Arc::clone(specs),
                report_by,
                then: Box::new(move |replies| counted.count(&replies)),
            };
            if m.worker.send(job).is_err() {
                ballot.count(&vec![Reply::Unanswered; specs.len()]);
            }
        }
    }
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<&str> = self.members.iter().map(|m| m.address.as_str()).collect();
        f.debug_struct("Quorum")
            .field("nodes", &nodes)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// Queues `cleanup` on a node's I/O thread.
pub(crate) fn send(worker: &Worker, cleanup: Cleanup) {
    if let Err(Job::Release(c)) = worker.send(Job::Release(cleanup)) {
        log::warn!(
            "value of `{}` left to expire: client shut down",
            c.keys.lock
        );
    }
}

pub(crate) fn no_quorum(count: &Count, failures: Vec<NodeFailure>) -> Error {
    Error::NoQuorum {
        acquired: count.yes,
        required: count.quorum(),
        failures: failures.into_boxed_slice(),
    }
}

/// Refuses what a quorum cannot do safely: fencing (no single counter orders
/// fences across independent masters), the legacy timestamp scheme (its
/// takeover trusts one server's value) and the reentrant scheme (a quorum writes
/// tokens, not owner hashes).
///
/// # Errors
/// [`Error::Config`] naming `fencing` or `scheme`.
pub(crate) fn refuse(scheme: &Scheme, fencing: bool) -> Result<()> {
    if fencing {
        return Err(no_fencing());
    }
    if matches!(scheme, Scheme::LegacyTimestamp(_)) {
        return Err(Error::config(
            "scheme",
            "the legacy timestamp scheme cannot be made safe on a quorum; redlock uses tokens",
        ));
    }
    if matches!(scheme, Scheme::Reentrant) {
        return Err(Error::config(
            "scheme",
            "the reentrant scheme is one server's owner hash; redlock uses tokens",
        ));
    }
    Ok(())
}

/// Replica confirmation asks one master's replicas; a quorum's masters have none
/// that count.
pub(crate) fn no_replicas() -> Error {
    Error::config(
        "replicas",
        "redlock's masters are independent; confirm replicas of one master instead",
    )
}

pub(crate) fn no_fencing() -> Error {
    Error::config(
        "fencing",
        "redlock has no single counter to take fences from; use one master with `WAIT`",
    )
}
