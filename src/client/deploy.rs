//! How the builder reaches servers in a deployment: [`build`](LockClientBuilder::build)
//! (connect, check the Redis user, assemble the topology), the Redlock, Sentinel and
//! Cluster constructors, and TLS certificates for every node.

use std::sync::Arc;

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::builder::{DEFAULT_NODE_TIMEOUT, LockClientBuilder, Servers};
use crate::client::LockClient;
use crate::client::doctor::{self, Checkup};
use crate::client::options::Settings;
use crate::error::{Error, Result};
use crate::metrics::Counters;
use crate::net::connection::Target;
use crate::net::node::{Node, NodeConfig};
use crate::owner::ClientId;
use crate::scheme::{self, Replicas};
use crate::threads::wait::KICK_PREFIX;
#[cfg(feature = "cluster")]
use crate::topology::Cluster;
use crate::topology::{IoThread, Redlock, Single, Topology, Wait, probe};

impl LockClient {
    /// Starts building a Redlock client over independent Redis masters, one URL
    /// each: a lock is held when a majority of them granted it.
    ///
    /// The client has the same entry points, guards and options as one built by
    /// [`builder`](Self::builder), with these differences:
    ///
    /// - **Acquire** sends one token's `SET NX PX` to every node at once and waits
    ///   for each at most the [node timeout](LockClientBuilder::node_timeout). It
    ///   holds when a majority granted it and the lease's validity (`ttl - elapsed -
    ///   drift`) is still positive; that validity is the guard's
    ///   [`valid_until`](crate::LockGuard::valid_until). Otherwise the token is
    ///   deleted on every node, in the background, and the attempt is busy (other
    ///   holders answered: the wait is bounded by their TTLs, or a short random
    ///   pause after a split vote) or failed (a majority failed to answer: retried
    ///   twice after a random pause of at most 50 ms, then
    ///   [`Error::NoQuorum`] naming each node's failure; `try_lock` makes one round).
    /// - **Renewal** extends every lease on every node, one pipeline per node per
    ///   tick; a renewal that a majority does not confirm within the lease's
    ///   validity loses the lease.
    /// - **Release** deletes the lock on every node and is
    ///   [`Release::Released`](crate::Release::Released) when a majority still held
    ///   it; [`Metrics::node_releases`](crate::Metrics::node_releases) counts the
    ///   nodes. There is no local hand-off.
    /// - **Waiting** listens for release messages on one node (the next when it
    ///   fails: a release publishes on every node), and polls.
    /// - **Not offered:** fencing (no single counter can order fences across
    ///   independent masters: use one master with replicas confirmed by `WAIT`) and
    ///   [`Scheme::LegacyTimestamp`](crate::Scheme::LegacyTimestamp) (its takeover
    ///   trusts one server's value). Both are refused with [`Error::Config`], by
    ///   `build()` and per call.
    ///
    /// Safety needs bounded clock drift between the nodes (each expires keys by its
    /// own clock), and a node that restarts must not rejoin with an empty dataset
    /// sooner than the longest TTL in use (or must persist every write with
    /// `appendfsync always`): else a lock held on a bare majority can be granted
    /// again. Cost: every call is one round trip to each node in parallel, so its
    /// latency is that of the slowest node of the fastest majority.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::redlock([
    ///     "redis://10.0.0.1/",
    ///     "redis://10.0.0.2/",
    ///     "redis://10.0.0.3/",
    /// ])
    /// .key_prefix("lock:")
    /// .build()?;
    /// let guard = client.lock("invoice:42")?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn redlock<I>(urls: I) -> LockClientBuilder
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        LockClientBuilder::over(Servers::Quorum(infos(urls)))
    }
}

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
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        master: impl Into<String>,
    ) -> LockClientBuilder {
        LockClientBuilder::over(Servers::Sentinel(infos(sentinels), master.into()))
    }
}

#[cfg(feature = "cluster")]
impl LockClient {
    /// Starts building a client of a Redis Cluster, from the URLs of one or more
    /// of its nodes (seeds): the slot map is read from the first that answers.
    ///
    /// Each lock lives on the master serving its key's slot. The key is used as
    /// given, so redis-py, redsync or Redisson clients locking the same key on the
    /// same cluster exclude redlease and are excluded by it; what redlease adds
    /// lands in the key's slot: the fence counter is one per slot
    /// (`<prefix>redlease:fence:{t}`, `t` a short tag of the slot), and so does the
    /// release channel (`{key}:released`), published with `SPUBLISH` on Redis 7
    /// (sharded pub/sub: the message stays on the key's shard) and with classic
    /// `PUBLISH`, which the cluster broadcasts to every node, before. Every node is reached with the user, password and TLS mode of the
    /// first seed URL (and the builder's [`tls`](LockClientBuilder::tls)
    /// certificates); database 0 only, as Redis Cluster has no other.
    ///
    /// - **Redirections are followed within the call:** `MOVED` (resharding, a
    ///   failover) updates the slot map and sends the call to the new master;
    ///   `ASK` (a slot mid-migration) sends it once to the importing master after
    ///   `ASKING`. `TRYAGAIN`, which a free lock's fenced acquire meets until its
    ///   slot has moved (its two keys, lock and fence counter, are not both on
    ///   either master), is busy to a caller that waits: it waits it out within
    ///   its deadline. A [`try_lock`](LockClient::try_lock) sends it again for up
    ///   to one read timeout, then returns it as its error. A
    ///   master that stops answering has the slot map read again in the
    ///   background, so its slots follow the replica that takes over.
    /// - **Renewal** sends one pipeline per master per tick. A renewal that meets
    ///   a migration (`ASK`) counts as failed, and is tried again at the next
    ///   tick; a slot migration that outlasts a lease's TTL loses it (reported).
    /// - **Waiting** listens for release messages with one waiter thread per
    ///   master on Redis 7 (each on the shard channels of its slots; one on one
    ///   master before, moving to the next when it fails), and polls, as on one
    ///   server.
    ///
    /// A failover of a shard's master can lose a lock as on one server with
    /// replicas (asynchronous replication): see
    /// [`replicas`](LockClientBuilder::replicas) (`WAIT` on the shard's master)
    /// and fencing.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::cluster([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .key_prefix("lock:")
    /// .build()?;
    /// let guard = client.lock("invoice:42")?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<I>(seeds: I) -> LockClientBuilder
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        LockClientBuilder::over(Servers::Cluster(infos(seeds)))
    }
}

/// The connection infos of `urls`; a bad one is reported by `build()`.
fn infos<I>(urls: I) -> Vec<redis::RedisResult<ConnectionInfo>>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    urls.into_iter()
        .map(IntoConnectionInfo::into_connection_info)
        .collect()
}

impl LockClientBuilder {
    /// Checks the settings, connects (one `PING`), checks what the Redis user may do,
    /// and starts the background threads.
    ///
    /// The check runs one lock cycle (release, acquire, extend, release) of the
    /// default scheme on a key of its own, `<prefix>redlease:probe:<uuid>`, and tries
    /// `SUBSCRIBE` on the wake-up channels, so that a Redis ACL that would let the
    /// client take locks it cannot release is refused here, before any lock is
    /// taken. A user that may not subscribe (Redis 7's default for new users) gets a
    /// client whose waits poll, with one warning logged.
    ///
    /// Then it reads the server's configuration (one `INFO` per master, see
    /// [`server_check`](Self::server_check)) and logs each critical finding.
    ///
    /// Waits at most the connect timeout plus the read timeout, and a few more
    /// round trips, each bounded by the read timeout.
    ///
    /// # Errors
    /// [`Error::Config`] for a value out of range or a bad URL, [`Error::Redis`] when
    /// the server cannot be reached (or its TLS certificate is not trusted),
    /// [`Error::Permission`] when the Redis user lacks a
    /// permission locks need, [`Error::UnsafeServer`] when the server is
    /// configured so that locks can be lost and
    /// [`server_check`](Self::server_check) refuses it, [`Error::Spawn`] when a
    /// thread cannot start.
    pub fn build(self) -> Result<LockClient> {
        self.validate()?;
        let config = NodeConfig {
            pool_size: self.pool_size,
            connect_timeout: self.connect_timeout,
            read_timeout: self.read_timeout,
            write_timeout: self.write_timeout,
            scripts_only: !self.conditional_commands,
        };
        // Before any lock: a user who could take locks but not release them is
        // refused, and one who may not subscribe polls.
        let kick = format!("{KICK_PREFIX}probe");
        let id = self
            .liveness
            .map_or_else(ClientId::new, |_| ClientId::new_live());
        let backend = scheme::backend(&self.scheme, &id);
        let check = |node: &Node| {
            let kick = self.pubsub.then_some(kick.as_str());
            probe(node, &*backend, &self.key_prefix, kick, None).map(|a| a.subscribe)
        };
        let counters = Arc::new(Counters::default());
        let (topology, io, subscribe): (Arc<dyn Topology>, _, _) = match &self.servers {
            Servers::One(url) => {
                let info = (**url).clone().map_err(|_| bad_url())?;
                let node = Node::connect(self.target(info)?, config)?;
                single(node, &counters, check)?
            }
            Servers::Quorum(urls) => {
                let infos = urls.iter().cloned().collect::<Result<Vec<_>, _>>();
                let wait = Wait {
                    fixed: self.node_timeout,
                    default: DEFAULT_NODE_TIMEOUT,
                };
                let infos = infos.map_err(|_| bad_url())?;
                let targets = infos
                    .into_iter()
                    .map(|info| self.target(info))
                    .collect::<Result<Vec<_>>>()?;
                let (redlock, io, subscribe) = Redlock::connect(
                    targets,
                    config,
                    wait,
                    self.ttl,
                    (&counters, id.tag()),
                    check,
                )?;
                (Arc::new(redlock), io, subscribe)
            }
            #[cfg(feature = "sentinel")]
            Servers::Sentinel(urls, name) => {
                let node = Node::connect(self.sentinel_target(urls, name)?, config)?;
                single(node, &counters, check)?
            }
            #[cfg(feature = "cluster")]
            Servers::Cluster(urls) => {
                let (seeds, open) = self.cluster_targets(urls)?;
                let check = |node: &Node, (first, last): (u16, u16)| {
                    let kick = self.pubsub.then_some(kick.as_str());
                    let fits = |lock: &str| {
                        (first..=last).contains(&crate::net::slots::slot(lock.as_bytes()))
                    };
                    probe(node, &*backend, &self.key_prefix, kick, Some(&fits)).map(|a| a.subscribe)
                };
                let (cluster, io, subscribe) =
                    Cluster::connect(&seeds, open, config, &counters, check)?;
                (Arc::new(cluster), io, subscribe)
            }
        };
        if self.pubsub && !subscribe {
            log::warn!(
                "the redis user may not subscribe to redlease's channels: waits poll \
                 instead of being woken by releases"
            );
        }
        let checkup = Checkup::new()
            .ttl(self.ttl)
            .key_prefix(self.key_prefix.clone())
            .replicas(self.replicas.is_some_and(|(n, _)| n > 0));
        let build_findings = doctor::at_build(&*topology, &checkup, self.server_check)?;
        let settings = Settings {
            key_prefix: self.key_prefix,
            ttl: self.ttl,
            renewal: self.renewal,
            renew_interval: self.renew_interval,
            max_hold: self.max_hold,
            fencing: self.fencing,
            pubsub: self.pubsub && subscribe,
            background: self.background,
            liveness: self.liveness,
            scheme: self.scheme,
            replicas: self
                .replicas
                .map_or(Ok(None), |(n, t)| Replicas::checked(n, t))?,
        };
        LockClient::start(
            settings,
            topology,
            io,
            counters,
            (self.backoff_min, self.backoff_max),
            id,
            build_findings,
        )
    }
}

impl LockClientBuilder {
    /// A builder over `servers`, every other setting at its default.
    fn over(servers: Servers) -> Self {
        LockClientBuilder {
            servers,
            ..LockClientBuilder::new("redis://127.0.0.1/")
        }
    }

    /// Certificates for `rediss://` URLs: a CA to trust instead of the system's,
    /// a client certificate for mutual TLS; for every node of the client. A
    /// `rediss://` URL without this uses the system's trust store. Defaults to none.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
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
        let master = crate::net::sentinel::Master::new(name.to_owned(), infos, self.tls.clone());
        Ok(Target::Sentinel(Arc::new(master)))
    }

    /// The seed nodes of a cluster (`host`, `port`), and how to reach any node:
    /// with the first seed's user, password and TLS mode.
    #[cfg(feature = "cluster")]
    pub(super) fn cluster_targets(
        &self,
        urls: &[Result<ConnectionInfo, redis::RedisError>],
    ) -> Result<(Vec<(String, u16)>, crate::topology::Opener)> {
        use crate::net::connection::at;
        use redis::ConnectionAddr;
        let infos = urls.iter().cloned().collect::<Result<Vec<_>, _>>();
        let infos = infos.map_err(|_| bad_url())?;
        let first = infos
            .first()
            .ok_or(Error::config("urls", "a cluster needs a seed node"))?;
        self.check_tls(first)?;
        let mut seeds = Vec::new();
        for info in &infos {
            match info.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    seeds.push((host.clone(), *port));
                }
                _ => return Err(Error::config("urls", "cluster nodes are reached over tcp")),
            }
        }
        let (template, tls) = (first.clone(), self.tls.clone());
        let open: crate::topology::Opener = Box::new(move |host, port, redirects| {
            let node = at(&template, host, port);
            let redis_settings = node.redis_settings().clone().set_db(0);
            let info = node.set_redis_settings(redis_settings);
            Ok(Target::Shard(Box::new(tls.client(info)?), redirects))
        });
        Ok((seeds, open))
    }

    /// Certificates go with `rediss://` URLs only.
    fn check_tls(&self, info: &ConnectionInfo) -> Result<()> {
        if self.tls.is_set() && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(Error::config("tls", "certificates need a rediss:// url"));
        }
        Ok(())
    }
}

/// A client of one node: a server, or the master of a Sentinel group.
fn single(
    node: Node,
    counters: &Arc<Counters>,
    check: impl Fn(&Node) -> Result<bool>,
) -> Result<(Arc<dyn Topology>, Vec<IoThread>, bool)> {
    let subscribe = check(&node)?;
    let (single, io) = Single::new(node, Arc::clone(counters))?;
    Ok((Arc::new(single), vec![io], subscribe))
}

fn bad_url() -> Error {
    Error::config("url", "not a valid redis url")
}
