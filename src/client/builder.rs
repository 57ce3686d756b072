//! [`LockClientBuilder`]: every client-wide setting, checked by `build()`, which
//! connects and starts the client's threads.

use std::fmt;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::client::LockClient;
use crate::client::options::{Renewal, check_interval, check_ttl};
use crate::error::{Error, Result};
use crate::net::connection::Redacted;
use crate::net::tls::Tls;
use crate::scheme::{Replicas, Scheme};
use crate::topology::redlock;

/// The shortest liveness accepted: 100 milliseconds.
const MIN_LIVENESS: Duration = Duration::from_millis(100);
/// Default lease time to live: 30 seconds.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default number of pooled connections: 16.
pub const DEFAULT_POOL_SIZE: u32 = 16;
/// Default time allowed to open a connection: 2 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time allowed for one reply (or one write): 2 seconds.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Default shortest retry delay while polling: 4 milliseconds.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(4);
/// Default longest retry delay while polling: 200 milliseconds.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_millis(200);
/// Default time a Redlock call waits for each node: 50 milliseconds, and never more
/// than 1/20 of the lease's TTL.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

impl LockClient {
    /// Starts building a client for the server at `url` (`redis://[user:password@]host[:port][/db]`).
    pub fn builder(url: impl IntoConnectionInfo) -> LockClientBuilder {
        LockClientBuilder::new(url)
    }
}

/// What [`build`](crate::LockClientBuilder::build) does with the server's
/// configuration ([`LockClientBuilder::server_check`](crate::LockClientBuilder::server_check)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerCheck {
    /// Reads nothing.
    Off,
    /// One `INFO` per master; each critical finding is logged at `warn` with its
    /// check and its fix, and the client is built anyway.
    #[default]
    Warn,
    /// The same, and a critical finding fails the build with
    /// [`Error::UnsafeServer`](crate::Error::UnsafeServer).
    Refuse,
}

/// Where the locks live, as the constructor was given it.
pub(super) enum Servers {
    /// Boxed: with `tls-rustls` a `ConnectionInfo` is large.
    One(Box<Result<ConnectionInfo, redis::RedisError>>),
    Quorum(Vec<Result<ConnectionInfo, redis::RedisError>>),
    /// The sentinels, and the name of the master they watch.
    #[cfg(feature = "sentinel")]
    Sentinel(Vec<Result<ConnectionInfo, redis::RedisError>>, String),
    /// Seed nodes of a Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Vec<Result<ConnectionInfo, redis::RedisError>>),
}

/// Builds a [`LockClient`]; made by [`LockClient::builder`] and
/// [`LockClient::redlock`].
///
/// Setters never fail; [`build`](Self::build) checks every value and returns
/// [`Error::Config`] for one out of range.
#[must_use]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each is one setting of the builder, set on its own"
)]
pub struct LockClientBuilder {
    pub(super) servers: Servers,
    pub(super) key_prefix: String,
    pub(super) ttl: Duration,
    pub(super) pool_size: u32,
    pub(super) conditional_commands: bool,
    pub(super) connect_timeout: Duration,
    pub(super) read_timeout: Duration,
    pub(super) write_timeout: Duration,
    pub(super) backoff_min: Duration,
    pub(super) backoff_max: Duration,
    pub(super) renewal: Renewal,
    pub(super) renew_interval: Option<Duration>,
    pub(super) max_hold: Option<Duration>,
    pub(super) fencing: bool,
    pub(super) pubsub: bool,
    pub(super) background: bool,
    pub(super) scheme: Scheme,
    pub(super) replicas: Option<(u32, Duration)>,
    pub(super) node_timeout: Option<Duration>,
    pub(super) tls: Tls,
    pub(super) server_check: ServerCheck,
    pub(super) liveness: Option<Duration>,
}

impl LockClientBuilder {
    pub(super) fn new(url: impl IntoConnectionInfo) -> Self {
        Self {
            servers: Servers::One(Box::new(url.into_connection_info())),
            key_prefix: String::new(),
            ttl: DEFAULT_TTL,
            pool_size: DEFAULT_POOL_SIZE,
            conditional_commands: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_IO_TIMEOUT,
            write_timeout: DEFAULT_IO_TIMEOUT,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            renewal: Renewal::Auto,
            renew_interval: None,
            max_hold: None,
            fencing: false,
            pubsub: true,
            background: false,
            scheme: Scheme::Token,
            replicas: None,
            node_timeout: None,
            tls: Tls::default(),
            server_check: ServerCheck::Warn,
            liveness: None,
        }
    }
    /// Prepended to every lock key. redlease's own keys live under it too (the fence
    /// counter `<prefix>redlease:fence`, the key `build` checks permissions on), so a
    /// Redis ACL key pattern for the prefix covers them; lock names starting with
    /// `redlease:` are reserved. Defaults to `""`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
    /// Lease time to live, between [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL). Defaults to 30 seconds.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Largest number of pooled connections. Defaults to 16.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }
    /// Whether the token lock uses the server's conditional commands where it has
    /// them (`DELIFEQ key token`, `SET key token IFEQ token`: Valkey 9.0 and
    /// later) instead of its compare-and-delete and compare-and-expire scripts.
    /// Defaults to `true`.
    ///
    /// The commands compare and write the same values on the wire as the
    /// scripts, so clients on either path, and redis-py, redsync or
    /// node-redlock holders, share a name. They cost the server about a fifth
    /// of a script each, and need no scripting permission: on such a server a
    /// user whose ACL denies `@scripting` can take, renew, wait for and release
    /// unfenced token locks. Each connection asks its server once (`COMMAND
    /// INFO DELIFEQ`), so a failover to an older server falls back to the
    /// scripts. `false` keeps every call on scripts, as on a server without
    /// the commands (for comparison, or a proxy that refuses `COMMAND`).
    pub fn conditional_commands(mut self, on: bool) -> Self {
        self.conditional_commands = on;
        self
    }
    /// Time allowed to open a connection, handshake included, or for a call to get
    /// one; the read timeout bounds both too. Defaults to 2 seconds.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// Time allowed for a reply: a call that gets none fails after this long with an
    /// [`Error::Redis`] that says so. Defaults to 2 seconds.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }
    /// Time allowed for sending a command. Defaults to 2 seconds.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }
    /// Shortest and longest delay between polling attempts (exponential, full jitter).
    /// Defaults to 4 ms and 200 ms.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }
    /// Default renewal policy. Defaults to [`Renewal::Auto`].
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.renewal = renewal;
        self
    }
    /// Time between renewals. Defaults to a third of each lease's TTL.
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }
    /// Stop renewing a lease this long after it was acquired. Defaults to no bound.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
    /// Take a fencing token with every lock. Defaults to `false`.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }
    /// Wake waiters by pub/sub (`true`) or only poll (`false`). Defaults to `true`.
    pub fn pubsub(mut self, on: bool) -> Self {
        self.pubsub = on;
        self
    }
    /// Release a dropped guard's lock in the background: the drop queues the
    /// release for the node's I/O thread and returns at once, and that thread
    /// sends every release queued meanwhile in one pipelined write. A batch worker
    /// that locks one name per item then waits on one round trip per item, not two.
    ///
    /// What it promises:
    /// - **The release still happens, and wakes waiters.** It is the same
    ///   owner-checked compare-and-delete, publishing the release message as a
    ///   release does (waiters of other clients are woken when it lands). One
    ///   that fails is retried until the lease would have expired anyway. It is
    ///   counted in [`Metrics`](crate::Metrics) as a release when Redis answers.
    /// - **A later lock of the same name in this client is not held up or
    ///   misled by it.** A caller of this client already acquiring or waiting
    ///   for the name is handed the lock, or woken, by a release on the dropping
    ///   thread, as without this option. A lock call that comes after the drop,
    ///   on the same terms (TTL, renewal, no fence), while the release is still
    ///   queued takes the lease back as it is: same token and validity, nothing
    ///   sent, no round trip, and the queued release is dropped. One whose
    ///   release is on the wire already (or on other terms) waits for its answer
    ///   (one round trip of the I/O thread, bounded by the read timeout), so it
    ///   is never reported busy only because this client's own release had not
    ///   landed yet. The order is about that answer only: the release compares
    ///   the token, so it can never remove the lock taken after it.
    /// - **[`unlock`](crate::LockGuard::unlock) is unchanged**: it waits for
    ///   Redis and returns what it found.
    /// - **Dropping the client, and [`shutdown`](crate::LockClient::shutdown),
    ///   send what is queued** (the drop waits for it up to the read timeout; a
    ///   shutdown until its deadline, and counts the queued releases in its
    ///   [report](crate::ShutdownReport)).
    ///
    /// **A process that ends without dropping its client sends them as it exits.**
    /// A client kept in a `static` (`LazyLock`, `OnceLock`) is never dropped, nor
    /// is one when `main` calls `std::process::exit`: an exit hook, registered once
    /// per process and armed by the first release a client queues, waits for every
    /// live client's queue, each up to its read timeout (as the client's drop
    /// would), and does nothing when nothing is queued. It holds no client alive,
    /// runs no user code (no logging, no callback) and waits on no lock without a
    /// bound, so an `exit` called from a lock's closure, a callback or while the
    /// I/O threads are busy still returns within the read timeout. It runs only
    /// when the process goes through `exit` (returning from `main` does):
    /// `SIGKILL`, `abort`, a panic with `panic = "abort"`, a signal's default
    /// action (an unhandled `SIGTERM` or `SIGINT`) and `_exit` leave the queued
    /// releases unsent and those locks held until their TTL runs out, as they
    /// leave every lock still held; a guard alive at the exit is not released
    /// either (handle the signal and call [`shutdown`](crate::LockClient::shutdown)).
    ///
    /// It applies to the token scheme on one server, a Sentinel's master or a
    /// cluster; a lock inside its minimum hold, another scheme or a Redlock quorum
    /// releases on the dropping thread as before. One lock call can ask for it, or
    /// against it, with [`LockOptions::release_in_background`](crate::LockOptions::release_in_background).
    /// Defaults to `false`.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/")
    ///     .release_in_background(true)
    ///     .build()?;
    /// for item in ["a", "b", "c"] {
    ///     let _guard = client.lock(item)?;
    ///     // ... process the item ...
    /// } // each drop queues its release and returns at once
    /// # Ok(()) }
    /// ```
    pub fn release_in_background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }
    /// Ties every lock of the client to the client's own liveness: a crashed
    /// holder's locks are free `liveness` after its last sign of life, not after
    /// their TTL.
    ///
    /// The client's session record (`<prefix>redlease:session:<tag>`) becomes a
    /// lease of its own, with `liveness` as its TTL: written once, then extended
    /// (`PEXPIRE`, one command for the whole client however many locks it holds)
    /// every third of it by the renewal thread, and never written again while
    /// it lives. Then:
    /// - **A holder always knows first.** Every lease's validity is the earlier
    ///   of its own and the session's, both counted from the send time of the
    ///   last confirmed write, less the drift allowance. A holder paused or cut
    ///   off for longer than `liveness` sees [`is_held`](crate::LockGuard::is_held)
    ///   turn false and gets [`LossReason::SessionEnded`](crate::LossReason::SessionEnded)
    ///   before anyone may break its locks. An extend that finds the record gone
    ///   ends the session the same way; later locks go under a new record.
    /// - **Waiters break a dead holder's lock.** A redlease client (with or
    ///   without liveness itself) waiting for a token lock whose value names a
    ///   session that declared liveness, and whose record is gone, removes exactly
    ///   that value and takes the lock (one script: compare, check the record,
    ///   delete), so the wait ends `liveness` after the holder's last refresh.
    ///   Values of writers that declared no liveness (clients without this
    ///   option, older versions, Redisson, redis-py, legacy timestamps) are never
    ///   broken: they stay bound by their TTL.
    /// - **The lock keys keep their own TTL** (30 s by default), so clients that
    ///   know nothing of sessions see the same locks as before.
    ///
    /// What it trades: a pause or a network cut longer than `liveness` loses
    /// every lock of the client, as a TTL that short would, but for one command
    /// per client per third of it instead of one per lock. A record that
    /// vanishes early (eviction, a `DEL` by hand, a write lost in a failover)
    /// exposes the locks as an evicted lock key would: keep the prefix's keys
    /// out of eviction. With [`replicas`](Self::replicas) on, each write of the
    /// record counts only once that many replicas acknowledged it (`WAIT` in
    /// the same pipeline), so a failover cannot end a session its client still
    /// counts on; without it, the extends a failing master took in its last
    /// moments are lost, and the new master can end the session first — the
    /// risk of any unreplicated write, here at the liveness's scale, not the
    /// TTL's. Fence what the
    /// lock protects ([`fencing`](Self::fencing)): a holder that learns of its
    /// loss late (a stop between two checks) is refused by the fence.
    ///
    /// Waiters break token locks (fenced or not), elections, Redisson-format
    /// reentrant locks, read-write locks (a dead writer, or each dead reader
    /// beside live ones) and fair locks (a dead holder, or a dead waiter at
    /// the queue's head; the queue's next is woken), and take back semaphore
    /// permits (the client's permit ids are then 40 hex digits, marked,
    /// instead of 32), on one server or a Sentinel's master; a partition
    /// group's members break the partitions of a member whose session ended,
    /// and its window defaults to the liveness. In a Redis Cluster the lock
    /// key and the session record sit in different slots: a token lock's dead
    /// holder is broken in two steps there (the record read on its node, then
    /// the exact token deleted), the other schemes stay TTL-bound. A Redlock quorum
    /// keeps no session on each node: [`build`](Self::build) refuses liveness
    /// with it.
    ///
    /// Must be at least 100 ms. Defaults to off.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::Duration;
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/")
    ///     .liveness(Duration::from_secs(2))
    ///     .build()?;
    /// let guard = client.lock("nightly-report")?;
    /// // If this process is SIGKILLed now, another client's `lock("nightly-report")`
    /// // returns about 2 s later, not after the 30 s TTL.
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn liveness(mut self, liveness: Duration) -> Self {
        self.liveness = Some(liveness);
        self
    }
    /// Default storage scheme. Defaults to [`Scheme::Token`].
    pub fn scheme(mut self, scheme: Scheme) -> Self {
        self.scheme = scheme;
        self
    }
    /// Confirm each acquisition on `count` replicas within `timeout` (`WAIT`, in the
    /// acquire's round trip); a lock fewer acknowledged is given back, and the call
    /// fails with [`Error::NotReplicated`]. It lowers, and does not remove, the risk
    /// of losing a lock on failover: see [`LockOptions::replicas`](crate::LockOptions::replicas)
    /// for its limits. `count` 0 turns it off. Defaults to no confirmation.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some((count, timeout));
        self
    }
    /// Redlock: how long a call waits for each node before counting it as failed.
    /// Keep it small against the TTL: an acquire whose majority answers after the
    /// lease's validity has ended is refused anyway. A release, which has no
    /// validity to race, waits at least the read timeout. Defaults to
    /// [`DEFAULT_NODE_TIMEOUT`] (50 ms), and never more than 1/20 of the lease's
    /// TTL; a value set here is used as is.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }
    /// What `build()` does with the server's configuration: one `INFO` per
    /// master, and each critical finding of the checks it decides (eviction that
    /// can delete leases, a replica, a failed save that stops writes) logged at
    /// `warn` with its check and its fix ([`ServerCheck::Warn`]), or refused with
    /// [`Error::UnsafeServer`] ([`ServerCheck::Refuse`]), or nothing read
    /// ([`ServerCheck::Off`]). [`LockClient::doctor`] runs every check.
    /// Defaults to [`ServerCheck::Warn`].
    pub fn server_check(mut self, check: ServerCheck) -> Self {
        self.server_check = check;
        self
    }
    pub(super) fn validate(&self) -> Result<()> {
        check_ttl("ttl", self.ttl)?;
        if self.pool_size == 0 {
            return Err(Error::config("pool_size", "must be at least 1"));
        }
        for (name, t) in [
            ("connect_timeout", self.connect_timeout),
            ("read_timeout", self.read_timeout),
            ("write_timeout", self.write_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::config(name, "must be above zero"));
            }
        }
        if self.backoff_min.is_zero() {
            return Err(Error::config("backoff", "minimum must be above zero"));
        }
        if self.backoff_min > self.backoff_max {
            return Err(Error::config("backoff", "minimum exceeds maximum"));
        }
        if let Some(every) = self.renew_interval {
            check_interval(every, self.ttl)?;
        }
        if self.max_hold.is_some_and(|d| d.is_zero()) {
            return Err(Error::config("max_hold", "must be above zero"));
        }
        self.replicas
            .map_or(Ok(None), |(n, t)| Replicas::checked(n, t))?;
        if self.node_timeout.is_some_and(|d| d.is_zero()) {
            return Err(Error::config("node_timeout", "must be above zero"));
        }
        if let Some(live) = self.liveness {
            check_ttl("liveness", live)?;
            if live < MIN_LIVENESS {
                return Err(Error::config("liveness", "must be at least 100 ms"));
            }
            if matches!(self.servers, Servers::Quorum(_)) {
                return Err(Error::config(
                    "liveness",
                    "a Redlock quorum keeps no session record on each master: its locks \
                     stay bound by their TTL",
                ));
            }
        }
        if let Servers::Quorum(urls) = &self.servers {
            check_quorum(urls, &self.scheme, self.fencing)?;
            if self.replicas.is_some_and(|(count, _)| count > 0) {
                return Err(redlock::no_replicas());
            }
        }
        Ok(())
    }
}

/// What a Redlock client refuses before connecting: no node, the same node twice
/// (two votes for one server would fake a majority), and what the topology refuses
/// (the legacy scheme, fencing).
fn check_quorum(
    urls: &[Result<ConnectionInfo, redis::RedisError>],
    scheme: &Scheme,
    fencing: bool,
) -> Result<()> {
    if urls.is_empty() {
        return Err(Error::config("urls", "redlock needs at least one node"));
    }
    let mut seen = std::collections::HashSet::new();
    for info in urls.iter().flatten() {
        if !seen.insert(Redacted(Some(info)).to_string()) {
            return Err(Error::config("urls", "the same node is listed twice"));
        }
    }
    redlock::refuse(scheme, fencing)
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("servers", &self.servers)
            .field("key_prefix", &self.key_prefix)
            .field("ttl", &self.ttl)
            .field("pool_size", &self.pool_size)
            .field("conditional_commands", &self.conditional_commands)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("backoff", &(self.backoff_min, self.backoff_max))
            .field("renewal", &self.renewal)
            .field("renew_interval", &self.renew_interval)
            .field("max_hold", &self.max_hold)
            .field("fencing", &self.fencing)
            .field("pubsub", &self.pubsub)
            .field("release_in_background", &self.background)
            .field("liveness", &self.liveness)
            .field("scheme", &self.scheme)
            .field("replicas", &self.replicas)
            .field("node_timeout", &self.node_timeout)
            .field("tls", &self.tls)
            .field("server_check", &self.server_check)
            .finish()
    }
}

impl fmt::Debug for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn shown(url: &Result<ConnectionInfo, redis::RedisError>) -> Redacted<'_> {
            Redacted(url.as_ref().ok())
        }
        match self {
            Servers::One(url) => shown(url).fmt(f),
            Servers::Quorum(urls) => f.debug_list().entries(urls.iter().map(shown)).finish(),
            #[cfg(feature = "sentinel")]
            Servers::Sentinel(urls, name) => {
                let sentinels: Vec<_> = urls.iter().map(shown).collect();
                write!(f, "master {name:?} of sentinels {sentinels:?}")
            }
            #[cfg(feature = "cluster")]
            Servers::Cluster(urls) => {
                let seeds: Vec<_> = urls.iter().map(shown).collect();
                write!(f, "cluster of {seeds:?}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> LockClientBuilder {
        LockClientBuilder::new("redis://127.0.0.1:1/")
    }

    #[test]
    fn defaults_are_valid() {
        builder().validate().unwrap();
    }

    #[test]
    fn nonsense_is_rejected_with_the_option_named() {
        let cases: Vec<(LockClientBuilder, &str)> = vec![
            (builder().ttl(Duration::ZERO), "ttl"),
            (builder().ttl(Duration::from_micros(999)), "ttl"),
            (builder().ttl(Duration::MAX), "ttl"),
            (builder().pool_size(0), "pool_size"),
            (builder().connect_timeout(Duration::ZERO), "connect_timeout"),
            (builder().read_timeout(Duration::ZERO), "read_timeout"),
            (builder().write_timeout(Duration::ZERO), "write_timeout"),
            (
                builder().backoff(Duration::from_secs(2), Duration::from_secs(1)),
                "backoff",
            ),
            (builder().backoff(Duration::ZERO, Duration::ZERO), "backoff"),
            (builder().renew_interval(DEFAULT_TTL), "renew_interval"),
            (builder().max_hold(Duration::ZERO), "max_hold"),
            (builder().replicas(1, Duration::ZERO), "replicas"),
        ];
        for (b, name) in cases {
            match b.validate() {
                Err(Error::Config { option, .. }) => assert_eq!(option, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn debug_never_prints_the_password() {
        let b = LockClientBuilder::new("redis://user:hunter2@127.0.0.1:6379/3");
        let text = format!("{b:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:6379"), "{text}");
    }
}
