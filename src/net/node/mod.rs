//! One Redis server as a lock store: its connection pool and the connector that
//! opens the waiter's dedicated pub/sub connection.
//!
//! A topology is made of nodes: one for a single server, N for a Redlock quorum.
//!
//! Layout: this file is `Node` and its connector; `idle.rs` the stack of idle
//! connections in front of the pool, and the checkout that never waits on a
//! connection the pool is still making.

mod idle;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;

use crate::error::Result;
use crate::error::failure::Limits;
use crate::net::connection::{Caps, Conn, Manager, Pool, Target, is_stale};
use idle::Idle;
pub(crate) use idle::NodeConn;

/// A Redis server, reached through a pool of connections with bounded timeouts.
pub(crate) struct Node {
    pool: Pool,
    manager: Manager,
    /// Healthy connections checked out of the pool and not in use.
    idle: Idle,
}

/// How a node's connections are made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeConfig {
    pub(crate) pool_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) write_timeout: Duration,
    /// Whether lock calls keep to scripts where the server has conditional
    /// commands too (see `Conn::conditional`).
    pub(crate) scripts_only: bool,
}

impl Node {
    /// Connects to `target`: one direct `PING` first, so an unreachable
    /// server is reported with its cause rather than as a pool timeout.
    ///
    /// Waits at most the connect timeout plus the read timeout.
    pub(crate) fn connect(target: Target, config: NodeConfig) -> Result<Self> {
        let node = Self::open(target, config);
        node.ping()?;
        Ok(node)
    }

    /// The node at `target`, without reaching it yet (its pool connects in the
    /// background).
    pub(crate) fn open(target: Target, config: NodeConfig) -> Self {
        let manager = Manager {
            target,
            connect_timeout: config.connect_timeout,
            read_timeout: config.read_timeout,
            write_timeout: config.write_timeout,
            caps: Caps::new(config.scripts_only),
        };
        // A caller waits for a connection at most as long as for a reply, so a
        // frozen server (new connections hang in their handshake) costs a call one
        // limit, never the connect timeout on top of the read timeout. A call never
        // waits on a connection the pool is making (`idle.rs`).
        // No idle timeout and no lifetime: r2d2 then schedules no reaper, whose
        // job (every 30 s) would keep the pool's three threads alive for up to
        // 30 s after the client is dropped. Connections idle in `Idle` are out
        // of the pool's sight anyway, and a dead one is found and replaced on use.
        let pool = r2d2::Pool::builder()
            .max_size(config.pool_size)
            .min_idle(Some(1))
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(config.connect_timeout.min(config.read_timeout))
            .test_on_check_out(false)
            .build_unchecked(manager.clone());
        Self {
            pool,
            manager,
            idle: Idle::default(),
        }
    }

    /// One `PING` on a direct connection, so an unreachable server is reported with
    /// its cause. Waits at most the connect timeout plus the read timeout.
    pub(crate) fn ping(&self) -> Result<()> {
        let mut con = self.manager.connect_raw()?;
        redis::cmd("PING").query::<()>(&mut con)?;
        Ok(())
    }

    /// A connection: an idle one, else one made for the call (see `idle.rs`),
    /// within the connect or the read timeout, whichever is shorter.
    pub(crate) fn get(&self) -> Result<NodeConn<'_>> {
        self.get_timeout(self.limits().checkout)
    }

    /// A connection as [`get`](Self::get) takes one, within `timeout`.
    pub(crate) fn get_timeout(&self, timeout: Duration) -> Result<NodeConn<'_>> {
        self.idle.take(&self.pool, &self.manager, timeout)
    }

    /// A connection made now, within the checkout limit, the idle ones dropped: for
    /// the retry of a call whose connection had died while idle.
    pub(crate) fn fresh(&self) -> Result<NodeConn<'_>> {
        self.idle.fresh(&self.manager, self.limits().checkout)
    }

    /// Runs an idempotent `f` on a pooled connection, once more on a fresh one if
    /// the first had died while idle.
    pub(crate) fn with_retry<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> RedisResult<T>,
    ) -> Result<T> {
        let mut conn = self.get()?;
        match f(&mut conn) {
            Err(e) if conn.broken && is_stale(&e) => {
                drop(conn);
                let mut other = self.fresh()?;
                Ok(f(&mut other)?)
            }
            other => Ok(other?),
        }
    }

    /// `PUBLISH channel message` on a pooled connection (a waiter thread's wake-up).
    pub(crate) fn publish(&self, channel: &str, message: &str) -> Result<()> {
        let mut conn = self.get()?;
        let published = conn.run(|c| {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query::<i64>(c)
        });
        Ok(published.map(drop)?)
    }

    /// `PUBLISH channel ""` on an idle connection, its reply never read: a waiter
    /// thread's wake-up sent from a `Drop`, which must not wait on the network (a
    /// stopped server answers nothing, and the write only fills a socket buffer).
    /// The connection, its reply unread, is discarded. `false` when no connection
    /// was idle, or the write failed.
    pub(crate) fn publish_unanswered(&self, channel: &str) -> bool {
        self.send_unanswered(redis::cmd("PUBLISH").arg(channel).arg(""))
    }

    /// Sends `cmd` on an idle connection, its reply never read: the last word of
    /// a client being dropped (its session record's delete), which must not wait
    /// on the network. As [`publish_unanswered`](Self::publish_unanswered): never
    /// makes a connection, and discards the one it used; `false` when none was
    /// idle, or the write failed.
    pub(crate) fn send_unanswered(&self, cmd: &redis::Cmd) -> bool {
        let Some(mut conn) = self.idle.try_take(&self.pool) else {
            return false;
        };
        conn.broken = true;
        conn.con
            .send_packed_command(&cmd.get_packed_command())
            .is_ok()
    }

    /// A new connection outside the pool (the waiter's pub/sub connection).
    pub(crate) fn connect_raw(&self) -> RedisResult<redis::Connection> {
        self.manager.connect_raw()
    }

    /// A new RESP3 connection outside the pool (a sharded waiter's pub/sub
    /// connection on a cluster node).
    pub(crate) fn connect_resp3(&self) -> RedisResult<redis::Connection> {
        self.manager.connect_resp3()
    }

    /// A new connection outside the pool, made within `timeout` (at most the
    /// connect timeout), with the node's read and write timeouts.
    pub(crate) fn connect_within(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        self.manager.connect_within(timeout)
    }

    /// What the node's connections may use of conditional commands (see
    /// `Conn::conditional`).
    pub(crate) fn caps(&self) -> &Arc<Caps> {
        &self.manager.caps
    }

    /// The reply timeout of the node's connections.
    pub(crate) fn read_timeout(&self) -> Duration {
        self.manager.read_timeout
    }

    /// The send timeout of the node's connections.
    pub(crate) fn write_timeout(&self) -> Duration {
        self.manager.write_timeout
    }

    /// The limits a failed call names: the read timeout, the pool checkout.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            reply: self.manager.read_timeout,
            checkout: self.manager.connect_timeout.min(self.manager.read_timeout),
        }
    }

    /// The longest one call can take: a connection, a write and a reply.
    pub(crate) fn call_bound(&self) -> Duration {
        let m = &self.manager;
        m.connect_timeout + m.write_timeout + m.read_timeout
    }

    /// Where the node is, without credentials.
    pub(crate) fn address(&self) -> &Target {
        &self.manager.target
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("server", &self.address())
            .finish_non_exhaustive()
    }
}
