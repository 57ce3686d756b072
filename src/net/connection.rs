//! Pooled connections with every network call bounded by a timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisResult};

pub(crate) use crate::net::caps::Caps;
use crate::net::caps::offers_delifeq;
#[cfg(feature = "cluster")]
use crate::net::slots::Redirects;
pub(crate) use crate::net::target::{Redacted, Target};

/// `info` with its address replaced by `host:port` (TLS kept).
pub(crate) fn at(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    info.clone().set_addr(addr)
}

/// The r2d2 pool of Redis connections.
pub(crate) type Pool = r2d2::Pool<Manager>;

/// Opens connections with a connect timeout and sets read/write timeouts on them,
/// so no pooled call can block forever on a dead or silent server.
#[derive(Clone)]
pub(crate) struct Manager {
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) write_timeout: Duration,
    /// What the node's connections may use of the server's conditional commands.
    pub(crate) caps: Arc<Caps>,
}

/// A pooled connection that remembers when it can no longer be trusted.
///
/// After a timeout or I/O error the reply stream may be out of step with the
/// requests (a late reply would answer the next command), so the connection is
/// marked `broken` and the pool throws it away instead of reusing it.
pub(crate) struct Conn {
    pub(crate) con: redis::Connection,
    pub(crate) broken: bool,
    /// Whether each command is preceded by `ASKING` (a cluster slot being
    /// imported by this node: its keys are served only after it). Set by the call
    /// that needs it; cleared when the connection is given back.
    pub(crate) asking: bool,
    /// The buffer a hand-packed command is written into (`resp`), kept for the next.
    pub(crate) packed: Vec<u8>,
    /// Whether the server has the conditional commands (`DELIFEQ`, `SET … IFEQ`:
    /// Valkey 9.0 and later), once asked: see [`Conn::conditional`]. Learned per
    /// connection, so a new one (after a reconnect, a failover to another server)
    /// learns it again.
    cond: Option<bool>,
    caps: Arc<Caps>,
    #[cfg(feature = "cluster")]
    redirects: Option<Arc<Redirects>>,
}

impl Conn {
    /// A connection that nothing has gone wrong with yet.
    pub(crate) fn new(con: redis::Connection) -> Self {
        Self {
            con,
            broken: false,
            asking: false,
            packed: Vec::new(),
            cond: None,
            caps: Arc::default(),
            #[cfg(feature = "cluster")]
            redirects: None,
        }
    }

    /// The connection with its node's capabilities.
    pub(crate) fn with_caps(mut self, caps: &Arc<Caps>) -> Self {
        self.caps = Arc::clone(caps);
        self
    }

    /// Whether the server takes `DELIFEQ key value` and `SET key value IFEQ
    /// expected` (Valkey 9.0 and later): the token lock's release, renewal and
    /// mark then run no script. Asked once per connection with `HELLO` (no
    /// protocol change; every user may send it, and it is never refused or
    /// logged), one round trip before its first lock call, so a connection
    /// made after a failover asks the server it reaches. A server that does not
    /// say (an older one, a proxy) counts as without them, as does a node whose
    /// user was refused `DELIFEQ` once ([`refuse_conditional`](Self::refuse_conditional)):
    /// the scripts serve, as before.
    pub(crate) fn conditional(&mut self) -> bool {
        if self.caps.scripts_only || self.caps.refused() {
            return false;
        }
        if let Some(cond) = self.cond {
            return cond;
        }
        let hello = self.run(|c| redis::cmd("HELLO").query::<redis::Value>(c));
        let cond = match hello {
            Ok(reply) => offers_delifeq(reply),
            Err(e) => {
                log::debug!("no conditional commands known on this server: {e}");
                false
            }
        };
        // A failed connection is thrown away: its answer is not kept past it.
        self.cond = Some(cond);
        cond
    }

    /// The user's ACL refused a conditional command: the node's connections keep
    /// to scripts from now on.
    pub(crate) fn refuse_conditional(&mut self) {
        log::info!(
            "the Redis user may not run DELIFEQ: releases use scripts (grant +delifeq to \
             run none)"
        );
        self.caps.refuse();
    }

    /// Runs `f`, marking the connection broken when it fails below the protocol level.
    pub(crate) fn run<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let result = if self.asking {
            redis::cmd("ASKING")
                .exec(&mut self.con)
                .and_then(|()| f(&mut self.con))
        } else {
            f(&mut self.con)
        };
        #[cfg(feature = "cluster")]
        if let (Err(e), Some(r)) = (&result, &self.redirects) {
            r.note(e);
        }
        // `READONLY`: the server was demoted to a replica (a failover); a new
        // connection finds the new master.
        if let Err(e) = &result
            && (e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.kind() == redis::ServerErrorKind::ReadOnly.into())
        {
            self.broken = true;
        }
        result
    }

    /// Whether releases on this connection publish with `SPUBLISH` (a Redis 7
    /// cluster's sharded pub/sub) instead of `PUBLISH`.
    #[cfg_attr(not(feature = "cluster"), expect(clippy::unused_self))]
    pub(crate) fn sharded(&self) -> bool {
        #[cfg(feature = "cluster")]
        return self.redirects.as_ref().is_some_and(|r| r.sharded());
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// Notes a cluster redirection found among a pipeline's replies (errors kept
    /// as replies).
    #[cfg_attr(
        not(feature = "cluster"),
        expect(clippy::unused_self, unused_variables)
    )]
    pub(crate) fn note_reply(&self, reply: &redis::Value) {
        #[cfg(feature = "cluster")]
        if let (redis::Value::ServerError(e), Some(r)) = (reply, &self.redirects)
            && e.code() == "MOVED"
        {
            r.moved(e.details().unwrap_or_default());
        }
    }
}

/// Whether `e` says the connection was dead before the command could be answered
/// (closed or reset by a server that restarted), as opposed to a timeout, after
/// which the command may still run.
pub(crate) fn is_stale(e: &redis::RedisError) -> bool {
    (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout()
}

/// Whether `e` is a read or write cut short by a signal (`EINTR`): nothing was
/// lost, the same call may be made again on the same connection. A socket with a
/// read timeout returns `EINTR` to any signal handler, `SA_RESTART` or not.
pub(crate) fn is_interrupted(e: &redis::RedisError) -> bool {
    // The `redis` crate keeps the I/O error behind an `Arc`, its `source()`.
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

impl Manager {
    pub(crate) fn connect_raw(&self) -> RedisResult<redis::Connection> {
        self.connect_within(self.connect_timeout)
    }

    /// A new connection for the pool or for one call, made within `timeout` (at
    /// most the connect and the read timeout).
    pub(crate) fn open(&self, timeout: Duration) -> RedisResult<Conn> {
        let con = self.connect_within(timeout);
        #[cfg(feature = "cluster")]
        if let Target::Shard(_, redirects) = &self.target {
            // A node that cannot be reached may have been replaced: the map is
            // asked for again.
            let mut conn = Conn::new(con.inspect_err(|e| redirects.note(e))?);
            conn.redirects = Some(Arc::clone(redirects));
            return Ok(conn.with_caps(&self.caps));
        }
        Ok(Conn::new(con?).with_caps(&self.caps))
    }

    /// A new connection that speaks RESP3 (pub/sub replies are pushes), within
    /// the connect timeout; only a cluster node's target makes one, any other
    /// target a plain connection.
    pub(crate) fn connect_resp3(&self) -> RedisResult<redis::Connection> {
        #[cfg(feature = "cluster")]
        if let Target::Shard(client, _) = &self.target {
            let info = client.get_connection_info().clone();
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(redis::ProtocolVersion::RESP3);
            let client = redis::Client::open(info.set_redis_settings(settings))?;
            let limit = self.connect_timeout.min(self.read_timeout);
            return self.timed(crate::net::target::within(&client, limit)?);
        }
        self.connect_raw()
    }

    /// A new connection made within `timeout`, at most the connect or the read
    /// timeout, whichever is shorter, handshake included: one nobody answers (sent
    /// while the network was dark) ends as soon as a reply would have.
    pub(crate) fn connect_within(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        let timeout = timeout.min(self.connect_timeout).min(self.read_timeout);
        self.timed(self.target.connect(timeout, self.read_timeout)?)
    }

    /// `con` with the read and write timeouts set.
    fn timed(&self, con: redis::Connection) -> RedisResult<redis::Connection> {
        con.set_read_timeout(Some(self.read_timeout))?;
        con.set_write_timeout(Some(self.write_timeout))?;
        Ok(con)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> RedisResult<Conn> {
        self.open(self.connect_timeout)
    }

    fn is_valid(&self, conn: &mut Conn) -> RedisResult<()> {
        conn.run(|c| redis::cmd("PING").query::<()>(c))
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.con.is_open()
    }
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("server", &self.target)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn only_an_interrupted_read_is_interrupted() {
        let io = |kind| redis::RedisError::from(io::Error::from(kind));
        assert!(is_interrupted(&io(io::ErrorKind::Interrupted)));
        assert!(!is_interrupted(&io(io::ErrorKind::TimedOut)));
        assert!(!is_interrupted(&io(io::ErrorKind::ConnectionReset)));
        assert!(!is_interrupted(&io(io::ErrorKind::UnexpectedEof)));
        let server = redis::make_extension_error("ERR".into(), Some("x".into()));
        assert!(!is_interrupted(&server));
    }
}
