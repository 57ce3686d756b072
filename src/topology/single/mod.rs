//! [`Single`]: every lock on one Redis server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::error::{Error, Result};
use crate::metrics::{Counters, bump};
use crate::net::connection::is_stale;
use crate::net::node::Node;
use crate::owner::SessionWrite;
use crate::scheme::token::scripts::TOKEN_HANDOFF;
use crate::scheme::{
    Acquire, Announce, Backend, Extend, Freed, Keys, REPLY_FLOOR, Release, Request, Unreplicated,
    acquire_confirmed, extend_on, with_scripts,
};
use crate::time::ttl_millis;
use crate::topology::io::{Cleanup, Free, IoThread, Job, Worker};
use crate::topology::{Attempt, HandOff, Handed, Renew, Renewed, Scripts, Topology};

/// One Redis server holds every lock: each call is one command or script on it.
pub(crate) struct Single {
    node: Arc<Node>,
    counters: Arc<Counters>,
    worker: Worker,
}

impl Single {
    /// Serves locks from `node`, starting its I/O thread, whose handle the client
    /// keeps (guards keep the topology, and must not keep the thread).
    pub(crate) fn new(node: Node, counters: Arc<Counters>) -> Result<(Self, IoThread)> {
        let node = Arc::new(node);
        let (worker, io) = Worker::spawn(Arc::clone(&node), Arc::clone(&counters))?;
        let single = Self {
            node,
            counters,
            worker,
        };
        Ok((single, io))
    }

    #[cfg(feature = "cluster")]
    /// The server.
    pub(crate) fn node(&self) -> &Arc<Node> {
        &self.node
    }

    fn cleanup(&self, cleanup: Cleanup) {
        if let Err(Job::Release(c)) = self.worker.send(Job::Release(cleanup)) {
            log::warn!(
                "value of `{}` left to expire: client shut down",
                c.keys.lock
            );
        }
    }
}

impl std::fmt::Debug for Single {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Single")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Single {
    /// [`Topology::acquire`]; with `ask`, each command is preceded by `ASKING` (a
    /// cluster slot this node is importing).
    pub(crate) fn acquire_asking(
        &self,
        backend: &Arc<dyn Backend>,
        keys: &Keys,
        req: Request,
        ask: bool,
    ) -> Result<Attempt> {
        let mut retried = false;
        loop {
            // The retry goes to a fresh connection: those idle beside the dead one
            // likely died with it.
            let mut conn = if retried {
                self.node.fresh()?
            } else {
                self.node.get()?
            };
            // Reset when the connection is given back.
            conn.asking = ask;
            // Near the end of the caller's wait, wait for this reply only until the
            // call must return (at least a floor): one more timeout would stack.
            let read = self.node.read_timeout();
            let short = req
                .return_by
                .map(|t| t.saturating_duration_since(Instant::now()).max(REPLY_FLOOR))
                // Only worth two syscalls when it cuts the wait by an eighth or more
                // (a `try_lock` made now has nearly the whole read timeout).
                .filter(|d| *d < read.saturating_sub(read / 8));
            if let Some(d) = short {
                let _ = conn.con.set_read_timeout(Some(d));
            }
            let value = backend.new_value(&mut conn, req.ttl)?;
            bump(&self.counters.attempts, 1);
            let sent = Instant::now();
            // With replica confirmation the `WAIT` reply may take its timeout more.
            let base = short.unwrap_or(read);
            let outcome = acquire_confirmed(&**backend, &mut conn, keys, &value, req, base);
            if short.is_some() && !conn.broken {
                let _ = conn.con.set_read_timeout(Some(read));
            }
            let e = match outcome {
                Ok(Ok(Acquire::Acquired { fence, .. })) => {
                    return Ok(Attempt::Acquired { value, sent, fence });
                }
                Ok(Ok(Acquire::Busy {
                    remaining,
                    announces,
                })) => {
                    return Ok(Attempt::Busy {
                        remaining,
                        announces,
                    });
                }
                Ok(Err(Unreplicated { acked, required })) => {
                    return Err(Error::NotReplicated {
                        key: keys.lock.as_str().into(),
                        acked,
                        required,
                    });
                }
                Err(e) => e,
            };
            let broken = conn.broken;
            drop(conn);
            // A reentrant owner may lock again before a later cleanup would run: its
            // value is left to its TTL.
            if broken && !backend.reentrant() {
                // The reply was lost after the command may have reached Redis: take
                // our value out again, off the caller's time, so no lock is held
                // that nobody knows of.
                self.cleanup(Cleanup {
                    backend: Arc::clone(backend),
                    keys: keys.clone(),
                    value,
                    until: sent + req.ttl,
                });
            }
            // A pooled connection that died while idle (server restarted) fails on
            // first use without reaching any server: one retry.
            if broken && !retried && is_stale(&e) {
                retried = true;
                continue;
            }
            return Err(e.into());
        }
    }

    /// [`Topology::release`], with `ask` as for [`acquire_asking`](Self::acquire_asking).
    pub(crate) fn release_asking(
        &self,
        backend: &dyn Backend,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
        ask: bool,
    ) -> Result<Freed> {
        // Compare-and-delete is idempotent, so a connection that died while idle
        // may be retried.
        self.node.with_retry(|conn| {
            conn.asking = ask;
            backend.release(conn, key, announce, value, maybe)
        })
    }

    /// [`Topology::query`], with `ask` as for [`acquire_asking`](Self::acquire_asking).
    pub(crate) fn query_asking(
        &self,
        scripts: Scripts,
        cmd: &redis::Cmd,
        ask: bool,
    ) -> Result<redis::Value> {
        self.node.with_retry(|conn| {
            conn.asking = ask;
            with_scripts(conn, scripts, |c| c.run(|c| cmd.query(c)))
        })
    }

    /// [`Topology::extend`], with `ask` as for [`acquire_asking`](Self::acquire_asking).
    pub(crate) fn extend_asking(
        &self,
        backend: &dyn Backend,
        (key, value, maybe): (&str, &str, &[String]),
        ttl: Duration,
        ask: bool,
    ) -> (String, Instant, Result<Extend>) {
        let (cmd, new_value) = backend.extend_cmd(key, value, maybe, ttl);
        let sent = Instant::now();
        let reply = self.node.with_retry(|conn| {
            conn.asking = ask;
            extend_on(backend, conn, (key, value, maybe), ttl, &cmd)
        });
        let outcome = reply.and_then(|v| Ok(backend.extend_reply(&v)?));
        (new_value, sent, outcome)
    }

    /// [`Topology::hand_off`], with `ask` as for [`acquire_asking`](Self::acquire_asking).
    pub(crate) fn hand_off_asking(&self, keys: &Keys, h: HandOff<'_>, ask: bool) -> Result<Handed> {
        let fence_key = keys.fence();
        let reply: Result<(i64, i64)> = self.node.with_retry(|conn| {
            conn.asking = ask;
            with_scripts(conn, &[&TOKEN_HANDOFF], |c| {
                c.run(|c| {
                    TOKEN_HANDOFF
                        .key(&keys.lock)
                        .key(&fence_key)
                        .arg(h.ours)
                        .arg(h.value)
                        .arg(ttl_millis(h.ttl))
                        .arg(if h.fence { "1" } else { "0" })
                        .invoke(c)
                })
            })
        });
        reply.map(|(n, fence)| match n {
            1 => Handed::Done(h.fence.then(|| u64::try_from(fence).unwrap_or(0))),
            0 => Handed::Refused(Release::Expired),
            _ => Handed::Refused(Release::Taken),
        })
    }
}

impl Topology for Single {
    fn acquire(&self, backend: &Arc<dyn Backend>, keys: &Keys, req: Request) -> Result<Attempt> {
        self.acquire_asking(backend, keys, req, false)
    }

    fn release(
        &self,
        backend: &dyn Backend,
        key: &str,
        announce: Announce<'_>,
        value: &str,
        maybe: &[String],
    ) -> Result<Freed> {
        self.release_asking(backend, key, announce, value, maybe, false)
    }

    fn release_later(&self, backend: Arc<dyn Backend>, keys: Keys, value: String, until: Instant) {
        self.cleanup(Cleanup {
            backend,
            keys,
            value,
            until,
        });
    }

    fn release_queued(&self, free: Box<Free>) -> std::result::Result<(), Box<Free>> {
        self.worker.send(Job::Free(free)).map_err(|job| match job {
            Job::Free(free) => free,
            _ => unreachable!("the job sent is given back"),
        })
    }

    fn extend(
        &self,
        backend: &dyn Backend,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (String, Instant, Result<Extend>) {
        self.extend_asking(backend, (key, value, maybe), ttl, false)
    }

    fn hand_off(&self, keys: &Keys, h: HandOff<'_>) -> Option<Result<Handed>> {
        Some(self.hand_off_asking(keys, h, false))
    }

    fn query(&self, _key: &str, scripts: Scripts, cmd: &redis::Cmd) -> Result<redis::Value> {
        self.query_asking(scripts, cmd, false)
    }

    fn one_step(&self, _keys: &[&str]) -> bool {
        true
    }

    fn renew(&self, batch: Vec<Renew>, done: Sender<Vec<(u64, Renewed)>>) {
        if let Err(Job::Renew { batch, done }) = self.worker.send(Job::Renew { batch, done }) {
            let _ = done.send(batch.into_iter().map(|r| (r.id, Renewed::Failed)).collect());
        }
    }

    fn write_session(&self, write: &Arc<SessionWrite>, done: Option<&Sender<()>>) -> usize {
        let write = Arc::clone(write);
        let done = done.cloned();
        usize::from(self.worker.send(Job::Session { write, done }).is_ok())
    }

    fn subscriber(&self, _: usize) -> &Arc<Node> {
        &self.node
    }

    fn read_timeout(&self) -> Duration {
        self.node.read_timeout()
    }

    fn publish(&self, _: usize, channel: &str, message: &str) -> Result<()> {
        self.node.publish(channel, message)
    }
}
