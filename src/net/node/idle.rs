//! [`Idle`]: a node's idle connections, in a stack in front of its pool, and the
//! checkout that never waits on a connection the pool is still making.
//!
//! A call takes and gives back a connection with a pop and a push under a lock held
//! for nothing else, instead of the pool's clock reads and bookkeeping, so a lock
//! and unlock on one thread cost no pool checkout. The pool still makes, limits and
//! discards connections: the stack holds only what the pool handed out, and a
//! connection that failed is never kept.
//!
//! With none at hand in the stack or the pool, and room in the pool, a call makes
//! its own connection within its own time and closes it after use, while the pool
//! grows. It never waits on the pool's connects: one begun while the network was
//! dark sends a handshake nobody answers, and holds a connect thread of the pool
//! until it times out, long after the network healed (issue 23).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use parking_lot::Mutex;
use redis::ConnectionLike;

use crate::error::{Error, Result};
use crate::net::connection::{Conn, Manager, Pool};

/// Boxed once when the pool hands it out, so the stack moves a pointer, not the
/// connection's few hundred bytes.
type Pooled = Box<r2d2::PooledConnection<Manager>>;

/// Healthy connections checked out of the pool and not in use, most recently used
/// on top.
#[derive(Default)]
pub(super) struct Idle {
    stack: Mutex<Stack>,
}

#[derive(Default)]
struct Stack {
    conns: Vec<Pooled>,
    /// Callers waiting for the pool itself: connections given back while any wait
    /// go to the pool, which wakes them, instead of onto the stack.
    waiting: usize,
    /// Connections made by calls for themselves, in use: with the pool's, at most
    /// its size.
    own: u32,
}

/// A connection of a node, in use; dropping it gives it back (a broken one to the
/// pool, which discards it; one the call made for itself is closed).
pub(crate) struct NodeConn<'a> {
    /// Taken only by `drop`.
    conn: Option<Held>,
    idle: &'a Idle,
}

enum Held {
    Pooled(Pooled),
    Own(Box<Conn>),
}

impl Idle {
    /// An idle connection; else one the pool has at hand; else, if the pool has
    /// room, a new one made here within `timeout`; else one from the pool as soon as
    /// another call gives one back, waiting at most `timeout`.
    pub(super) fn take(
        &self,
        pool: &Pool,
        manager: &Manager,
        timeout: Duration,
    ) -> Result<NodeConn<'_>> {
        let top = self.stack.lock().conns.pop();
        if let Some(conn) = top {
            return Ok(self.held(Held::Pooled(conn)));
        }
        // An idle pooled connection, or else the pool starts making one in the
        // background (for the calls after this one) and returns at once.
        if let Ok(conn) = pool.get_timeout(Duration::ZERO) {
            return Ok(self.held(Held::Pooled(Box::new(conn))));
        }
        let mut stack = self.stack.lock();
        if let Some(conn) = stack.conns.pop() {
            drop(stack);
            return Ok(self.held(Held::Pooled(conn)));
        }
        if pool.state().connections + stack.own < pool.max_size() {
            stack.own += 1;
            drop(stack);
            return self.make(manager, timeout);
        }
        // Counted under the lock that `give_back` takes: a connection given back
        // from now on goes to the pool, which wakes this caller.
        stack.waiting += 1;
        drop(stack);
        let conn = pool.get_timeout(timeout);
        self.stack.lock().waiting -= 1;
        Ok(self.held(Held::Pooled(Box::new(conn?))))
    }

    /// An idle connection, from the stack or the pool, if one is at hand: never
    /// makes one, never waits (a `Drop`'s wake-up, see `Node::publish_unanswered`).
    pub(super) fn try_take(&self, pool: &Pool) -> Option<NodeConn<'_>> {
        let top = self.stack.lock().conns.pop();
        let conn = top.or_else(|| pool.try_get().map(Box::new))?;
        Some(self.held(Held::Pooled(conn)))
    }

    /// A connection made now, within `timeout`, after the idle ones are dropped: the
    /// retry of a call whose pooled connection had died while idle (a restarted
    /// server, a connection cut), which the others idle beside it likely share.
    pub(super) fn fresh(&self, manager: &Manager, timeout: Duration) -> Result<NodeConn<'_>> {
        let stale = {
            let mut stack = self.stack.lock();
            stack.own += 1;
            std::mem::take(&mut stack.conns)
        };
        for mut conn in stale {
            // Discarded by the pool, not kept as idle.
            conn.broken = true;
        }
        self.make(manager, timeout)
    }

    /// A connection of the call's own, counted in `own` by the caller.
    fn make(&self, manager: &Manager, timeout: Duration) -> Result<NodeConn<'_>> {
        match manager.open(timeout) {
            Ok(conn) => Ok(self.held(Held::Own(Box::new(conn)))),
            Err(e) => {
                self.stack.lock().own -= 1;
                Err(Error::connect(e))
            }
        }
    }

    fn held(&self, conn: Held) -> NodeConn<'_> {
        NodeConn {
            conn: Some(conn),
            idle: self,
        }
    }

    /// Keeps a healthy pooled connection for the next call, plain again; one that
    /// failed (its replies may be out of step with its requests) or was closed goes
    /// to the pool, which discards it; one the call made for itself is closed.
    fn give_back(&self, conn: Held) {
        let mut conn = match conn {
            Held::Pooled(conn) => conn,
            Held::Own(conn) => {
                self.stack.lock().own -= 1;
                drop(conn);
                return;
            }
        };
        // `ASKING` is for the call that set it (a cluster slot being imported).
        conn.asking = false;
        if conn.broken || !conn.con.is_open() {
            return;
        }
        let mut stack = self.stack.lock();
        if stack.waiting == 0 {
            stack.conns.push(conn);
            return;
        }
        drop(stack);
        // To the pool, which hands it to a waiting caller.
        drop(conn);
    }
}

impl Deref for NodeConn<'_> {
    type Target = Conn;

    #[expect(clippy::unwrap_used, reason = "the connection is taken only by drop")]
    fn deref(&self) -> &Conn {
        match self.conn.as_ref().unwrap() {
            Held::Pooled(conn) => conn,
            Held::Own(conn) => conn,
        }
    }
}

impl DerefMut for NodeConn<'_> {
    #[expect(clippy::unwrap_used, reason = "the connection is taken only by drop")]
    fn deref_mut(&mut self) -> &mut Conn {
        match self.conn.as_mut().unwrap() {
            Held::Pooled(conn) => conn,
            Held::Own(conn) => conn,
        }
    }
}

impl Drop for NodeConn<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.idle.give_back(conn);
        }
    }
}

impl fmt::Debug for NodeConn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeConn").finish_non_exhaustive()
    }
}
