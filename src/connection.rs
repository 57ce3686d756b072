//! Pooled connections with every network call bounded by a timeout.

use std::fmt;
#[cfg(feature = "sentinel")]
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisResult};

#[cfg(feature = "sentinel")]
use crate::sentinel::Master;

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
}

/// Where a manager's connections go.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server, always the same.
    Server(Box<redis::Client>),
    /// The current master of a Sentinel-managed group, asked of the sentinels at
    /// every new connection, so connections made after a failover reach the new one.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<Master>),
}

/// A pooled connection that remembers when it can no longer be trusted.
///
/// After a timeout or I/O error the reply stream may be out of step with the
/// requests (a late reply would answer the next command), so the connection is
/// marked `broken` and the pool throws it away instead of reusing it.
pub(crate) struct Conn {
    pub(crate) con: redis::Connection,
    pub(crate) broken: bool,
}

impl Conn {
    /// Runs `f`, marking the connection broken when it fails below the protocol level.
    pub(crate) fn run<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let result = f(&mut self.con);
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
}

/// Whether `e` says the connection was dead before the command could be answered
/// (closed or reset by a server that restarted), as opposed to a timeout, after
/// which the command may still run.
pub(crate) fn is_stale(e: &redis::RedisError) -> bool {
    (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout()
}

impl Manager {
    pub(crate) fn connect_raw(&self) -> RedisResult<redis::Connection> {
        self.connect_within(self.connect_timeout)
    }

    /// A new connection made within `timeout` (at most the connect timeout), with
    /// the read and write timeouts set.
    pub(crate) fn connect_within(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        let timeout = timeout.min(self.connect_timeout);
        let con = match &self.target {
            Target::Server(client) => client.get_connection_with_timeout(timeout)?,
            #[cfg(feature = "sentinel")]
            Target::Sentinel(master) => master.connect(timeout, self.read_timeout)?,
        };
        con.set_read_timeout(Some(self.read_timeout))?;
        con.set_write_timeout(Some(self.write_timeout))?;
        Ok(con)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> RedisResult<Conn> {
        Ok(Conn {
            con: self.connect_raw()?,
            broken: false,
        })
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

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where the connections go, without credentials.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Server(client) => Redacted(Some(client.get_connection_info())).fmt(f),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(master) => {
                write!(f, "master {:?} of sentinels", master.name())?;
                for (i, info) in master.sentinels().iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{}", Redacted(Some(info)))?;
                }
                Ok(())
            }
        }
    }
}

/// Shows where a server is (host, port, database) and never its credentials.
pub(crate) struct Redacted<'a>(pub(crate) Option<&'a ConnectionInfo>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(info) = self.0 else {
            return f.write_str("<invalid url>");
        };
        let db = info.redis_settings().db();
        match info.addr() {
            ConnectionAddr::Tcp(host, port) => write!(f, "redis://{host}:{port}/{db}"),
            ConnectionAddr::TcpTls { host, port, .. } => write!(f, "rediss://{host}:{port}/{db}"),
            ConnectionAddr::Unix(path) => write!(f, "unix://{}?db={db}", path.display()),
            _ => f.write_str("<redis server>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[test]
    fn redacted_hides_user_and_password() {
        let info = "redis://alice:s3cret@10.0.0.1:7000/2"
            .into_connection_info()
            .unwrap();
        let shown = Redacted(Some(&info)).to_string();
        assert_eq!(shown, "redis://10.0.0.1:7000/2");
    }
}
