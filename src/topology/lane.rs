//! A node's lane: the thread that runs callers' calls on one node of a quorum, so
//! that a caller can ask every node at once and wait for each at most its node
//! timeout. One lane per node, made with the client: no thread is spawned per call.
//!
//! A lane talks to its node through a [`Link`], a connection of its own made again
//! whenever it broke, within the call's bound: a dead node fails at once (connection
//! refused) rather than after the pool's checkout timeout, and a silent one within
//! the bound. Calls wait in the lane's queue in order, so a release of a value is
//! never overtaken by a later acquire on the same node.

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use redis::{ConnectionLike, RedisResult};

use super::worker::IoThread;
use crate::connection::{Conn, is_stale};
use crate::error::{Error, Result};
use crate::node::Node;

/// A call for a lane: runs on the lane's thread with its connection.
pub(super) type Call = Box<dyn FnOnce(&mut Link) + Send>;

/// What a lane is sent: a call, or `None` to stop.
type Msg = Option<Call>;

/// The sending end of a lane, kept by the topology: it never keeps the thread
/// alive (the client keeps the [`IoThread`], whose drop stops it).
pub(super) struct Lane {
    tx: Sender<Msg>,
}

impl Lane {
    pub(super) fn spawn(node: Arc<Node>) -> Result<(Self, IoThread)> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = thread::Builder::new()
            .name("redlease-lane".into())
            .spawn(move || run(&rx, Link::new(node)))
            .map_err(Error::Spawn)?;
        let stop = tx.clone();
        let io = IoThread::new(handle, move || {
            let _ = stop.send(None);
        });
        Ok((Self { tx }, io))
    }

    /// Queues `call`; never blocks. Gives the call back when the lane has stopped
    /// (the client was dropped).
    pub(super) fn send(&self, call: Call) -> Option<Call> {
        self.tx.send(Some(call)).err().and_then(|e| e.into_inner())
    }
}

fn run(rx: &Receiver<Msg>, mut link: Link) {
    // Connect before the first call needs it; a node that is down now is tried
    // again by each call.
    let bound = link.node.call_bound();
    let _ = link.conn(Instant::now() + bound, link.node.read_timeout());
    while let Ok(Some(call)) = rx.recv() {
        call(&mut link);
    }
}

/// One thread's own connection to a node.
pub(super) struct Link {
    node: Arc<Node>,
    conn: Option<Conn>,
    /// The read and write timeout set on `conn`.
    timeout: Duration,
}

impl Link {
    pub(super) fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            conn: None,
            timeout: Duration::ZERO,
        }
    }

    /// The connection, made first if there is none (or it broke) within what is
    /// left until `deadline`, with reads and writes bounded by `timeout`.
    ///
    /// # Errors
    /// A timeout when `deadline` has passed; the connection error otherwise.
    pub(super) fn conn(&mut self, deadline: Instant, timeout: Duration) -> Result<&mut Conn> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("no time left to reach the node"));
        }
        let conn = if let Some(conn) = self.conn.take().filter(|c| !c.broken && c.con.is_open()) {
            self.conn.insert(conn)
        } else {
            let con = self.node.connect_within(left)?;
            self.timeout = Duration::ZERO;
            self.conn.insert(Conn::new(con))
        };
        if self.timeout != timeout {
            // Marked broken on failure, so it is made again next time.
            conn.run(|c| {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))
            })?;
            self.timeout = timeout;
        }
        Ok(conn)
    }

    /// Runs an idempotent `f` (or one that cannot have run when the connection
    /// was dead): once more on a fresh connection if the first had died while
    /// idle (a restarted server), as the pool does.
    pub(super) fn call<T>(
        &mut self,
        deadline: Instant,
        timeout: Duration,
        mut f: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        let conn = self.conn(deadline, timeout)?;
        match f(conn) {
            Err(e) if conn.broken && is_stale(&e) => Ok(f(self.conn(deadline, timeout)?)?),
            other => Ok(other?),
        }
    }

    /// Where the node is, without credentials.
    pub(super) fn node(&self) -> &Node {
        &self.node
    }
}

/// A timeout error ([`Error::is_timeout`]) for a node that did not answer in time.
pub(super) fn timed_out(what: &'static str) -> Error {
    Error::from(redis::RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        what,
    )))
}
