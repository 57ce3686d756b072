//! How the builder reaches servers in a deployment: TLS certificates for every
//! node, and the Sentinel constructor.

#[cfg(feature = "sentinel")]
use std::sync::Arc;

use redis::ConnectionInfo;
#[cfg(feature = "sentinel")]
use redis::IntoConnectionInfo;

use super::LockClientBuilder;
#[cfg(feature = "sentinel")]
use super::{Servers, bad_url};
#[cfg(feature = "sentinel")]
use crate::client::LockClient;
use crate::connection::Target;
use crate::error::{Error, Result};

#[cfg(feature = "sentinel")]
impl LockClient {
    /// Starts building a client for the master named `master` of the Redis
    /// Sentinels at `sentinels` (`redis://host:26379`, one or more).
    ///
    /// Every new connection asks the sentinels, in the order given, where the
    /// master is, and checks with `ROLE` that it is one; connections to a master
    /// that was demoted are closed by Sentinel (or answer `READONLY`) and are
    /// replaced by connections to the new one (a call that meets such a connection
    /// fails with a connection error: retry it). The master is reached with the
    /// user, password, database and TLS mode of the first sentinel URL.
    ///
    /// A failover can lose a lock: replication is asynchronous, so a lock granted
    /// just before the old master failed may be missing on the new one, and another
    /// client can take it. The holder then finds its renewal refused and reports
    /// the lease lost, but until that renewal both may believe they hold it.
    /// The remedies are replica confirmation (`WAIT` after the acquire, so a grant
    /// is on a replica before it is used) and fencing
    /// ([`LockOptions::fencing`](crate::LockOptions::fencing)), which makes a stale
    /// holder's writes harmless downstream.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .build()?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn sentinel<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        master: impl Into<String>,
    ) -> LockClientBuilder {
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info);
        LockClientBuilder {
            servers: Servers::Sentinel(sentinels.collect(), master.into()),
            ..LockClientBuilder::new("redis://127.0.0.1/")
        }
    }
}

impl LockClientBuilder {
    /// Certificates for `rediss://` URLs: a CA to trust instead of the system's,
    /// a client certificate for mutual TLS; for every node of the client. A
    /// `rediss://` URL without this uses the system's trust store. Defaults to none.
    #[cfg(feature = "tls-rustls")]
    pub fn tls(mut self, certs: crate::TlsCertificates) -> Self {
        self.tls.certs = Some(certs);
        self
    }

    /// Where the connections to the server at `info` go.
    pub(super) fn target(&self, info: ConnectionInfo) -> Result<Target> {
        self.check_tls(&info)?;
        Ok(Target::Server(Box::new(self.tls.client(info)?)))
    }

    /// Where the connections to the master `name` of the sentinels at `urls` go.
    #[cfg(feature = "sentinel")]
    pub(super) fn sentinel_target(
        &self,
        urls: &[Result<ConnectionInfo, redis::RedisError>],
        name: &str,
    ) -> Result<Target> {
        let infos = urls.iter().cloned().collect::<Result<Vec<_>, _>>();
        let infos = infos.map_err(|_| bad_url())?;
        self.check_tls(infos.first().ok_or_else(bad_url)?)?;
        let master = crate::sentinel::Master::new(name.to_owned(), infos, self.tls.clone());
        Ok(Target::Sentinel(Arc::new(master)))
    }

    /// Certificates go with `rediss://` URLs only.
    fn check_tls(&self, info: &ConnectionInfo) -> Result<()> {
        if self.tls.is_set() && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(Error::config("tls", "certificates need a rediss:// url"));
        }
        Ok(())
    }
}
