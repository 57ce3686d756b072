//! Redis Sentinel (feature `sentinel`): finding the current master of a group at
//! every new connection.
//!
//! The lookup is `SENTINEL GET-MASTER-ADDR-BY-NAME` on each sentinel in turn,
//! then `ROLE` on the address it names, so a sentinel whose view is stale (the
//! address is a replica now) is passed over. It is done here rather than with
//! `redis::sentinel::SentinelClient` because that client's blocking calls have no
//! connect or read timeout: one frozen sentinel would hang every new connection.
//! Here each step waits at most the client's connect and read timeouts.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult};

use crate::net::tls::Tls;

/// A master known by name to a set of sentinels.
pub(crate) struct Master {
    name: String,
    sentinels: Vec<ConnectionInfo>,
    tls: Tls,
}

impl Master {
    /// The master `name` of `sentinels`. The master is reached with the user,
    /// password, database and TLS of the first sentinel's URL (`rediss://` there
    /// means TLS to the master too), with the certificates in `tls`.
    pub(crate) fn new(name: String, sentinels: Vec<ConnectionInfo>, tls: Tls) -> Self {
        Self {
            name,
            sentinels,
            tls,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn sentinels(&self) -> &[ConnectionInfo] {
        &self.sentinels
    }

    /// A new connection to the current master, with `timeout` for reads and
    /// writes. Asks the sentinels in order; each one costs at most
    /// `connect + 2 * timeout` for the question and as much for the `ROLE` check.
    ///
    /// # Errors
    /// The last failure when no sentinel names a reachable master.
    pub(crate) fn connect(
        &self,
        connect: Duration,
        timeout: Duration,
    ) -> RedisResult<redis::Connection> {
        let mut last = RedisError::from((ErrorKind::InvalidClientConfig, "no sentinel given"));
        for sentinel in &self.sentinels {
            match self.ask(sentinel, connect, timeout) {
                Ok(con) => return Ok(con),
                Err(e) => {
                    log::debug!("sentinel lookup of master {:?} failed: {e}", self.name);
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Asks one sentinel where the master is, and connects there if it is one.
    fn ask(
        &self,
        sentinel: &ConnectionInfo,
        connect: Duration,
        timeout: Duration,
    ) -> RedisResult<redis::Connection> {
        let mut con = open(&self.tls.client(sentinel.clone())?, connect, timeout)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.name)
            .query(&mut con)?;
        let Some((host, port)) = addr else {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "sentinel does not know the master name",
            )));
        };
        let template = &self.sentinels[0];
        let addr = match template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = template.clone().set_addr(addr);
        let mut master = open(&self.tls.client(info)?, connect, timeout)?;
        // A sentinel may name the old master for a moment after a failover.
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut master)?;
        match role.first() {
            Some(redis::Value::BulkString(r)) if r == b"master" => Ok(master),
            _ => Err(RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the address a sentinel named is not a master",
            ))),
        }
    }
}

fn open(
    client: &redis::Client,
    connect: Duration,
    timeout: Duration,
) -> RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(connect)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

#[cfg(test)]
mod tests {
    use crate::{Error, LockClient};

    #[test]
    fn debug_names_the_master_and_the_sentinels_never_a_password() {
        let builder = LockClient::sentinel(
            [
                "redis://:hunter2@10.0.0.1:26379",
                "redis://u:hunter2@10.0.0.2:26379",
            ],
            "mymaster",
        );
        let shown = format!("{builder:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("10.0.0.2:26379"), "{shown}");
        assert!(shown.contains("mymaster"), "{shown}");
    }

    #[test]
    fn no_sentinel_is_a_config_error() {
        let err = LockClient::sentinel(Vec::<String>::new(), "mymaster")
            .build()
            .unwrap_err();
        assert!(
            matches!(err, Error::Config { option: "url", .. }),
            "{err:?}"
        );
    }
}
