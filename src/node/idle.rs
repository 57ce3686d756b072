//! [`Idle`]: a node's idle connections, in a stack in front of its pool.
//!
//! A call takes and gives back a connection with a pop and a push under a lock held
//! for nothing else, instead of the pool's clock reads and bookkeeping, so a lock
//! and unlock on one thread cost no pool checkout. The pool still makes, limits and
//! discards connections: the stack holds only what the pool handed out, and a
//! connection that failed is never kept.

use std::fmt;
use std::ops::{Deref, DerefMut};

use parking_lot::Mutex;
use redis::ConnectionLike;

use crate::connection::{Conn, Manager};
use crate::error::Result;

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
}

/// A connection of a node, in use; dropping it gives it back (a broken one to the
/// pool, which discards it).
pub(crate) struct NodeConn<'a> {
    /// Taken only by `drop`.
    conn: Option<Pooled>,
    idle: &'a Idle,
}

impl Idle {
    /// An idle connection, or else one from the pool by `get`, which waits for one
    /// as long as the pool's limit allows.
    pub(super) fn take(
        &self,
        get: impl FnOnce() -> std::result::Result<r2d2::PooledConnection<Manager>, r2d2::Error>,
    ) -> Result<NodeConn<'_>> {
        let top = {
            let mut stack = self.stack.lock();
            let conn = stack.conns.pop();
            // Counted under the lock that `give_back` takes: a connection given back
            // from now on goes to the pool, which wakes the caller waiting there.
            stack.waiting += usize::from(conn.is_none());
            conn
        };
        let conn = if let Some(conn) = top {
            conn
        } else {
            let conn = get();
            self.stack.lock().waiting -= 1;
            Box::new(conn?)
        };
        Ok(NodeConn {
            conn: Some(conn),
            idle: self,
        })
    }

    /// Keeps a healthy connection for the next call, plain again; one that failed (its replies
    /// may be out of step with its requests) or was closed goes to the pool, which
    /// discards it.
    fn give_back(&self, mut conn: Pooled) {
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
        self.conn.as_deref().unwrap()
    }
}

impl DerefMut for NodeConn<'_> {
    #[expect(clippy::unwrap_used, reason = "the connection is taken only by drop")]
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_deref_mut().unwrap()
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
