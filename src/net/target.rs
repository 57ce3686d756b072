//! Where a node's connections go: one server, the master a Sentinel names, a
//! node of a Redis Cluster; and how a server is shown without its credentials.

use std::fmt;
#[cfg(any(feature = "sentinel", feature = "cluster"))]
use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, ConnectionAddr, ConnectionInfo, RedisResult};

#[cfg(feature = "sentinel")]
use crate::net::sentinel::Master;
#[cfg(feature = "cluster")]
use crate::net::slots::Redirects;

/// Where a manager's connections go.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server, always the same.
    Server(Box<redis::Client>),
    /// The current master of a Sentinel-managed group, asked of the sentinels at
    /// every new connection, so connections made after a failover reach the new one.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<Master>),
    /// A node of a Redis Cluster: its connections note the redirections and
    /// failures they meet in `redirects`, where the topology picks them up.
    #[cfg(feature = "cluster")]
    Shard(Box<redis::Client>, Arc<Redirects>),
}

#[cfg(feature = "cluster")]
impl Target {
    /// The one server connections go to, when it is fixed.
    #[cfg_attr(
        not(feature = "sentinel"),
        expect(clippy::unnecessary_wraps, reason = "a sentinel target has none")
    )]
    pub(crate) fn info(&self) -> Option<&ConnectionInfo> {
        match self {
            Target::Server(client) => Some(client.get_connection_info()),
            #[cfg(feature = "cluster")]
            Target::Shard(client, _) => Some(client.get_connection_info()),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(_) => None,
        }
    }
}

impl Target {
    /// A new connection within `timeout` in all, handshake included (a Sentinel
    /// target: each step within it, replies within `read`).
    #[cfg_attr(not(feature = "sentinel"), expect(unused_variables))]
    pub(crate) fn connect(&self, timeout: Duration, read: Duration) -> RedisResult<Connection> {
        match self {
            Target::Server(client) => within(client, timeout),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(master) => master.connect(timeout, read),
            #[cfg(feature = "cluster")]
            Target::Shard(client, _) => within(client, timeout),
        }
    }
}

/// A connection to `client`'s server within `timeout` in all. `redis` gives the
/// TCP connect, then each reply of the handshake (`HELLO` or `AUTH`, `SELECT`, two
/// `CLIENT SETINFO` unless skipped, as the library's clients do), what is left of the limit it is given, and waits for every
/// reply even after one timed out: each step gets its share.
pub(crate) fn within(client: &redis::Client, timeout: Duration) -> RedisResult<Connection> {
    let s = client.get_connection_info().redis_settings();
    let steps = u32::from(s.protocol().supports_resp3() || s.password().is_some())
        + u32::from(s.db() != 0)
        + if s.skip_set_lib_name() { 0 } else { 2 };
    client.get_connection_with_timeout(timeout / steps.max(1))
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
            #[cfg(feature = "cluster")]
            Target::Shard(client, _) => Redacted(Some(client.get_connection_info())).fmt(f),
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
