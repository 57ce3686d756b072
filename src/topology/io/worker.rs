//! A node's I/O thread: the node's share of each renewal tick, and releases that
//! must happen but not on a caller's time (the value of an acquire whose reply was
//! lost, a hand-off that came too late). One thread per node, so a frozen node
//! delays only its own work: never a caller, never another node's renewals, and
//! never the renewal thread, which goes on reporting losses on time.
//!
//! For one server the thread goes through the node's pool. For a node of a quorum
//! it goes through a connection of its own ([`Link`]) made within each job's bound,
//! so a dead node answers at once and the majority decides without waiting for it.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::Link;
use super::background::{Cleanup, Free};
use super::batch::{self, Reply, Spec};
use super::handle::IoThread;
use super::pipeline::Loaded;
use super::wire;
use crate::error::{Error, Result};
use crate::metrics::Counters;
use crate::net::node::Node;
use crate::owner::SessionWrite;
use crate::scheme::{Announce, Release};
use crate::topology::{Renew, Renewed};

/// The first pause before a failed release is tried again; it doubles up to
/// [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(20);
const MAX_RETRY: Duration = Duration::from_secs(1);
/// How long a value found absent is looked for again: a write still held in a
/// buffer (of a server that was paused, of the network) lands soon after Redis
/// answers again, possibly after the answer that found nothing.
const SETTLE: Duration = Duration::from_secs(1);
/// What the last attempts at the pending releases get, all together, when the
/// client is dropped: a drop waits on the network no longer than this (a value
/// not removed by then expires with its TTL, as it would have).
const LAST_TRY: Duration = Duration::from_millis(50);

/// Work for a node's I/O thread.
pub(crate) enum Job {
    /// Renew these leases, answer on `done`.
    Renew {
        batch: Vec<Renew>,
        done: Sender<Vec<(u64, Renewed)>>,
    },
    /// Send these renewals for leases held on several nodes, and hand the raw
    /// replies (one per spec) to `then`, unapplied; nothing is sent once
    /// `report_by` has passed.
    Vote {
        specs: Arc<[Spec]>,
        report_by: Option<Instant>,
        then: Box<dyn FnOnce(Vec<Reply>) + Send>,
    },
    /// Delete `value` if it is still under the key.
    Release(Cleanup),
    /// A guard's release that its caller does not wait for: sent with the others
    /// queued meanwhile, in one write.
    Free(Box<Free>),
    /// Write the client's session record; then send `()` on `done`.
    Session {
        write: Arc<SessionWrite>,
        done: Option<Sender<()>>,
    },
    /// Make one last attempt at every pending release, and end.
    Stop,
}

/// The sending end of a node's I/O thread, kept by the topology (which guards
/// share): it never keeps the thread alive.
#[derive(Clone)]
pub(crate) struct Worker {
    tx: Sender<Job>,
}

impl Worker {
    /// The I/O thread of the one node holding the locks: it uses the node's pool.
    pub(crate) fn spawn(node: Arc<Node>, counters: Arc<Counters>) -> Result<(Self, IoThread)> {
        Self::start(node, counters, None)
    }

    /// The I/O thread of a node of a quorum: it uses a connection of its own, and
    /// gives each background release at most `bound` (the node timeout) before
    /// trying again later, so a silent node holds up its other work only briefly.
    pub(crate) fn spawn_linked(
        node: Arc<Node>,
        counters: Arc<Counters>,
        bound: Duration,
    ) -> Result<(Self, IoThread)> {
        Self::start(node, counters, Some(bound))
    }

    fn start(
        node: Arc<Node>,
        counters: Arc<Counters>,
        linked: Option<Duration>,
    ) -> Result<(Self, IoThread)> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (alive, ended) = crossbeam_channel::bounded::<()>(0);
        let handle = thread::Builder::new()
            .name("redlease-io".into())
            .spawn(move || {
                let _alive = alive;
                let link = linked.map(|bound| (Link::new(Arc::clone(&node)), bound));
                run(&rx, &node, &counters, link);
            })
            .map_err(Error::Spawn)?;
        let stop = tx.clone();
        let io = IoThread::new(handle, move || {
            let _ = stop.send(Job::Stop);
        })
        .ending(ended);
        Ok((Self { tx }, io))
    }

    /// Queues `job`; never blocks. Returns the job when the thread is gone.
    pub(crate) fn send(&self, job: Job) -> std::result::Result<(), Job> {
        self.tx.send(job).map_err(|e| e.0)
    }
}

/// The most releases one write carries: a few hundred microseconds of Redis's
/// time, so no batch holds up other clients long.
const MAX_BATCH: usize = 512;

/// `first` and every release queued behind it, up to [`MAX_BATCH`]; another
/// job found on the way is returned to run after the batch.
pub(super) fn collect(first: Free, rx: &Receiver<Job>) -> (Vec<Free>, Option<Job>) {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(Job::Free(free)) => batch.push(*free),
            Ok(other) => return (batch, Some(other)),
            Err(_) => break,
        }
    }
    (batch, None)
}

/// A pending release and when to try it next.
struct Pending {
    cleanup: Cleanup,
    next: Instant,
    pause: Duration,
    /// Set by the first answer that did not delete the value: look until then.
    settle: Option<Instant>,
}

/// How the thread reaches its node: the pool, or its own connection with the
/// bound of one background release.
struct Io<'a> {
    node: &'a Arc<Node>,
    link: Option<(Link, Duration)>,
}

fn run(rx: &Receiver<Job>, node: &Arc<Node>, counters: &Counters, link: Option<(Link, Duration)>) {
    let mut io = Io { node, link };
    let mut loaded = Loaded::default();
    let mut pending: Vec<Pending> = Vec::new();
    // A job met while collecting a batch of releases, run next.
    let mut carried: Option<Job> = None;
    loop {
        let next = pending.iter().map(|p| p.next).min();
        let job = match (carried.take(), next) {
            (Some(job), _) => Ok(job),
            (None, Some(at)) => rx.recv_deadline(at),
            (None, None) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match job {
            Ok(Job::Free(first)) => {
                let (batch, other) = collect(*first, rx);
                carried = other;
                for cleanup in wire::send(node, counters, batch) {
                    // Retried as any cleanup, until the value expires by itself.
                    let p = Pending {
                        next: Instant::now() + FIRST_RETRY,
                        cleanup,
                        pause: FIRST_RETRY,
                        settle: None,
                    };
                    pending.push(p);
                }
            }
            Ok(Job::Renew { batch, done }) => {
                let answers = batch::renew(node, counters, batch, &mut loaded);
                // The renewal thread may be gone (client dropped): nobody to tell.
                let _ = done.send(answers);
            }
            Ok(Job::Vote {
                specs,
                report_by,
                then,
            }) => {
                let bound = node.read_timeout();
                let (link, _) = io
                    .link
                    .get_or_insert_with(|| (Link::new(Arc::clone(node)), bound));
                then(batch::vote(link, counters, &specs, report_by, &mut loaded));
            }
            Ok(Job::Release(cleanup)) => {
                let p = Pending {
                    cleanup,
                    next: Instant::now(),
                    pause: FIRST_RETRY,
                    settle: None,
                };
                io.retry(p, &mut pending);
            }
            Ok(Job::Session { write, done }) => {
                io.write_session(&write);
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = pending.drain(..).partition(|p| p.next <= now);
                pending = later;
                for p in due {
                    io.retry(p, &mut pending);
                }
            }
            Ok(Job::Stop) | Err(RecvTimeoutError::Disconnected) => {
                let by = Instant::now() + LAST_TRY;
                let mut last: Vec<Cleanup> = pending.into_iter().map(|p| p.cleanup).collect();
                // Releases of guards dropped as the client went, queued behind
                // the stop, get the last try too.
                for job in rx.try_iter() {
                    if let Job::Free(free) = job
                        && let Some((free, others)) = free.take()
                    {
                        free.queued.cancel(&free.name, &free.parked);
                        last.push(free.cleanup);
                        last.extend(others);
                    }
                }
                for cleanup in last {
                    if io.release_by(&cleanup, Some(by)).is_none() {
                        log::debug!(
                            "a value of `{}` may be left; it expires with its ttl",
                            cleanup.keys.lock
                        );
                    }
                }
                return;
            }
        }
    }
}

impl Io<'_> {
    /// Tries `p` once; queues it again while it can still matter: until it is
    /// deleted, or, once Redis has answered, for the [`SETTLE`] window, or, while
    /// Redis does not answer, until the value expires by itself.
    fn retry(&mut self, mut p: Pending, pending: &mut Vec<Pending>) {
        let answer = if p.settle.is_none() && Instant::now() >= p.cleanup.until {
            None
        } else {
            self.release(&p.cleanup)
        };
        let now = Instant::now();
        let end = match answer {
            // Deleted: the write landed, and cannot land again.
            Some(Release::Released) => return,
            Some(_) if p.settle.is_none() => {
                p.pause = FIRST_RETRY;
                *p.settle.insert(now + SETTLE)
            }
            _ => p.settle.unwrap_or(p.cleanup.until),
        };
        p.next = now + p.pause;
        if p.next < end {
            p.pause = (p.pause * 2).min(MAX_RETRY);
            pending.push(p);
        } else if p.settle.is_none() {
            log::warn!(
                "could not remove a value of `{}` that may be stored; it expires with its ttl",
                p.cleanup.keys.lock
            );
        }
    }

    /// Runs `f` once on a pooled connection whose replies are waited for until
    /// `by` at most; the connection keeps its usual timeout afterwards.
    fn within<T>(
        &self,
        by: Instant,
        f: impl FnOnce(&mut crate::net::connection::Conn) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(super::timed_out("no time left to reach the node"));
        }
        let mut conn = self.node.get_timeout(left)?;
        conn.run(|c| c.set_read_timeout(Some(left)))?;
        let answer = f(&mut conn);
        let usual = Some(self.node.read_timeout());
        if conn.run(|c| c.set_read_timeout(usual)).is_err() {
            conn.broken = true;
        }
        Ok(answer?)
    }

    /// Writes the session record, through the pool or the thread's own connection
    /// (then within its bound); a failure is logged.
    fn write_session(&mut self, write: &SessionWrite) {
        if write.ended() {
            // The client is being dropped, which waits on nothing remote: the
            // delete is written to an idle connection, its reply never read; without
            // one, or on a frozen server, the record expires with its TTL.
            if !self.node.send_unanswered(&write.delete()) {
                log::debug!("session record `{}` left to expire", write.key);
            }
            return;
        }
        let send = |conn: &mut crate::net::connection::Conn| conn.run(|c| write.send(c));
        let answer = match &mut self.link {
            Some((link, bound)) => link.call(Instant::now() + *bound, *bound, send),
            None => self.node.with_retry(send),
        };
        if let Err(e) = answer {
            write.failed(&e);
        }
    }

    /// One compare-and-delete of `cleanup`'s value, through the pool or the
    /// thread's own connection (then within its bound); what Redis answered, if
    /// it did.
    fn release(&mut self, cleanup: &Cleanup) -> Option<Release> {
        self.release_by(cleanup, None)
    }

    /// [`release`](Self::release), answered by `by` if given (the connection's
    /// read timeout is then what is left until it).
    fn release_by(&mut self, cleanup: &Cleanup, by: Option<Instant>) -> Option<Release> {
        let Cleanup {
            backend,
            keys,
            value,
            ..
        } = cleanup;
        let delete = |conn: &mut crate::net::connection::Conn| {
            backend.release(
                conn,
                &keys.lock,
                Announce::always(&keys.channel),
                value,
                &[],
            )
        };
        let answer = match (&mut self.link, by) {
            (Some((link, bound)), None) => link.call(Instant::now() + *bound, *bound, delete),
            (None, None) => self.node.with_retry(delete),
            (Some((link, _)), Some(by)) => {
                let left = by.saturating_duration_since(Instant::now());
                link.call(by, left, delete)
            }
            (None, Some(by)) => self.within(by, delete),
        };
        match answer {
            Ok(freed) => {
                log::debug!("background release of `{}`: {:?}", keys.lock, freed.outcome);
                Some(freed.outcome)
            }
            Err(e) => {
                log::debug!("background release of `{}` failed: {e}", keys.lock);
                None
            }
        }
    }
}
