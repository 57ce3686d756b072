//! One thread's own connection to a node, made again whenever it broke, within
//! the call's bound: a dead node fails at once (connection refused) rather than
//! after the pool's checkout timeout, and a silent one within the bound. A
//! Redlock lane and a quorum node's I/O thread each keep one.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult};

use crate::error::{Error, Result};
use crate::net::connection::{Conn, is_stale};
use crate::net::node::Node;

/// One thread's own connection to a node.
pub(crate) struct Link {
    node: Arc<Node>,
    conn: Option<Conn>,
    /// The read and write timeout set on `conn`.
    timeout: Duration,
}

impl Link {
    pub(crate) fn new(node: Arc<Node>) -> Self {
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
    pub(crate) fn conn(&mut self, deadline: Instant, timeout: Duration) -> Result<&mut Conn> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("no time left to reach the node"));
        }
        let conn = if let Some(conn) = self.conn.take().filter(|c| !c.broken && c.con.is_open()) {
            self.conn.insert(conn)
        } else {
            let con = self.node.connect_within(left)?;
            self.timeout = Duration::ZERO;
            self.conn.insert(Conn::new(con).with_caps(self.node.caps()))
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
    pub(crate) fn call<T>(
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
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }
}

/// A timeout error ([`Error::is_timeout`]) for a node that did not answer in time.
pub(crate) fn timed_out(what: &'static str) -> Error {
    Error::from(redis::RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        what,
    )))
}
