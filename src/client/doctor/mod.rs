//! Is this Redis safe for locks? The doctor reads what the client's user may
//! read of each server — `HELLO`, `INFO`, `CONFIG GET` where the ACL allows, a
//! scripting probe, a pub/sub probe, `TIME` — and turns it into [`Finding`]s, each
//! with a stable check name, a [`Severity`], what was read, why it matters and
//! what to change. It never writes, and a read the server refuses makes its
//! checks [`Severity::Unknown`], never an error and never "fine".
//!
//! Layout: this file is the report's types, [`ServerReport::read`] over any
//! connection and [`LockClient::doctor`]; `read.rs` what is read; `checks.rs` the
//! checks, one function each (`commands.rs` the conditional commands' own); `reach.rs` which servers a deployment has (every
//! master, the replicas they list, Sentinel's view) and the check `build()` runs.

mod checks;
mod commands;
mod reach;
mod read;

use std::time::Duration;

use redis::{ConnectionLike, IntoConnectionInfo};

use crate::client::LockClient;
use crate::client::builder::DEFAULT_TTL;
use crate::error::Result;
use crate::finding::{Finding, Severity};
use checks::Context;
use read::{Depth, Readings};

pub(crate) use reach::at_build;

/// What the doctor found on one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    server: String,
    software: Option<String>,
    version: Option<String>,
    role: Option<String>,
    replicas: Vec<(String, u16)>,
    findings: Vec<Finding>,
}

impl ServerReport {
    /// Reads the server of `conn` (any connection: a plain `redis::Connection`, a
    /// pooled one) and runs every check on it, as a server locks are taken on:
    /// what [`LockClient::doctor`] does on each master, without a client.
    ///
    /// The pub/sub probe sends `SUBSCRIBE` then `UNSUBSCRIBE` on `conn`, which must
    /// therefore speak RESP2 (a `redis://` URL's default). About a dozen round
    /// trips, each bounded by `conn`'s read timeout.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) only when the server did not answer;
    /// a refused read is a [`Severity::Unknown`] finding.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use redlease::{Checkup, ServerReport, Severity};
    /// let mut conn = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
    /// let report = ServerReport::read(&mut conn, &Checkup::new().key_prefix("lock:"))?;
    /// for finding in report.findings() {
    ///     if finding.severity() == Severity::Critical {
    ///         eprintln!("{finding}");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn read(conn: &mut dyn ConnectionLike, checkup: &Checkup) -> Result<Self> {
        let address = local_address(conn);
        Self::read_as(conn, None, checkup, address, true)
    }

    /// Reads a server and runs every check: `direct` when it was asked as a lock
    /// server, not reached as a replica.
    pub(crate) fn read_as(
        conn: &mut dyn ConnectionLike,
        subscriber: Option<&mut dyn ConnectionLike>,
        checkup: &Checkup,
        server: String,
        direct: bool,
    ) -> Result<Self> {
        let channel = format!("{{{}redlease:doctor}}:released", checkup.key_prefix);
        let readings = Readings::read(conn, &channel, subscriber, Depth { full: true })?;
        Ok(Self::of(&readings, checks::FULL, checkup, server, direct))
    }

    /// The findings of `checks` on what was read.
    fn of(
        r: &Readings,
        checks: &[checks::Check],
        checkup: &Checkup,
        server: String,
        direct: bool,
    ) -> Self {
        let cx = Context {
            ttl: checkup.ttl,
            waits_for_replicas: checkup.replicas,
            direct,
        };
        let mut findings: Vec<Finding> = checks.iter().flat_map(|c| c(r, &cx)).collect();
        for f in &mut findings {
            f.server.clone_from(&server);
        }
        findings.sort_by_key(|f| f.severity);
        let (software, version) = r.server();
        Self {
            software: software.map(str::to_owned),
            version: version.map(str::to_owned),
            role: r.role().map(str::to_owned),
            replicas: r.replicas(),
            server,
            findings,
        }
    }

    /// A server that could not be asked at all: one `reachable` finding.
    pub(crate) fn unreachable(server: String, why: &str) -> Self {
        let mut finding = Finding::new(
            "reachable",
            Severity::Unknown,
            format!("no answer: {why}"),
            "nothing can be checked on a server that does not answer",
            "check the address, the network and the credentials",
        );
        finding.server.clone_from(&server);
        Self {
            server,
            software: None,
            version: None,
            role: None,
            replicas: Vec::new(),
            findings: vec![finding],
        }
    }

    /// The server (`redis://host:port/db`, never a password).
    pub fn server(&self) -> &str {
        &self.server
    }
    /// `redis` or `valkey`, as `HELLO` or `INFO` says; `None` when neither was read.
    pub fn software(&self) -> Option<&str> {
        self.software.as_deref()
    }
    /// Its version (`7.0.15`, `9.1.2`).
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
    /// `master`, `replica` or `sentinel`.
    pub fn role(&self) -> Option<&str> {
        self.role.as_deref()
    }
    /// The replicas it lists in `INFO replication` (host, port).
    pub fn replicas(&self) -> &[(String, u16)] {
        &self.replicas
    }
    /// Its findings, most severe first; empty when every check passed.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }
}

/// What the doctor found on every server of a deployment, from
/// [`LockClient::doctor`], [`Report::read`] or [`Report::read_cluster`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    servers: Vec<ServerReport>,
}

impl Report {
    /// Each server in turn: the lock servers first, each followed by the replicas it
    /// lists.
    pub fn servers(&self) -> &[ServerReport] {
        &self.servers
    }
    /// Every finding of every server.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.servers.iter().flat_map(|s| s.findings.iter())
    }
    /// Whether any finding is [`Severity::Critical`].
    pub fn has_critical(&self) -> bool {
        self.findings().any(|f| f.severity == Severity::Critical)
    }

    /// Reads the servers at `urls` without a client — one URL is one server,
    /// several the masters of a Redlock quorum — and each replica they list,
    /// reached with the same user and password.
    ///
    /// Each server costs a connection and about a dozen round trips, each bounded
    /// by 2 seconds; a server that does not answer is one `reachable` finding.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for a bad URL;
    /// [`Error::Redis`](crate::Error::Redis) when no server answered.
    pub fn read<I>(urls: I, checkup: &Checkup) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        reach::urls(urls, checkup)
    }

    /// Reads every master of the Redis Cluster that `seeds` belong to (as the
    /// first seed that answers lists them in `CLUSTER NODES`), and the replicas
    /// each lists, as [`read`](Self::read) does.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn read_cluster<I>(seeds: I, checkup: &Checkup) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        reach::cluster(seeds, checkup)
    }
}

/// What the doctor checks against: the longest TTL in use, the key prefix (its
/// pub/sub probe subscribes to a channel under it), and whether acquisitions wait
/// for replicas. [`LockClient::doctor`] takes them from the client.
#[derive(Debug, Clone)]
#[must_use]
pub struct Checkup {
    ttl: Duration,
    key_prefix: String,
    replicas: bool,
}

impl Checkup {
    /// The defaults: a 30 second TTL, no prefix, no replica confirmation.
    pub fn new() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            key_prefix: String::new(),
            replicas: false,
        }
    }
    /// The longest lease TTL in use (uptime, clock drift and renewal slack are
    /// measured against it). Defaults to 30 seconds.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The clients' key prefix. Defaults to `""`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
    /// Whether acquisitions wait for replicas
    /// ([`LockClientBuilder::replicas`](crate::LockClientBuilder::replicas)): then
    /// asynchronous replicas are no warning. Defaults to `false`.
    pub fn replicas(mut self, waited: bool) -> Self {
        self.replicas = waited;
        self
    }
}

impl Default for Checkup {
    fn default() -> Self {
        Self::new()
    }
}

impl LockClient {
    /// Checks every server this client's locks live on: the server; each master
    /// of a Redlock quorum; each master of a cluster; the master Sentinel
    /// resolves, and the quorum as the sentinels see it (`SENTINEL CKQUORUM`).
    /// Each is followed by the replicas it lists, when they can be reached with
    /// the same credentials. Checked against this client's TTL, key prefix and
    /// replica confirmation.
    ///
    /// Reads only what the client's Redis user may read; what it may not is a
    /// [`Severity::Unknown`] finding, and so is a server that does not answer.
    /// About a dozen round trips per server, each bounded by the read timeout.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let report = client.doctor();
    /// for finding in report.findings() {
    ///     println!("{}: {finding}", finding.server());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn doctor(&self) -> Report {
        let s = &self.inner.settings;
        let checkup = Checkup::new()
            .ttl(s.ttl)
            .key_prefix(s.key_prefix.clone())
            .replicas(s.replicas.is_some());
        reach::client(&*self.inner.hub.topology, &checkup)
    }

    /// The critical findings of the check [`build`](crate::LockClientBuilder::build)
    /// ran (one `INFO` per master): empty when it found none or was turned off.
    pub fn build_findings(&self) -> &[Finding] {
        &self.inner.build_findings
    }
}

/// The server's own address as `CLIENT INFO` shows it (`laddr`), for a report
/// made over a connection whose URL is not known.
fn local_address(conn: &mut dyn ConnectionLike) -> String {
    let info: Option<String> = redis::cmd("CLIENT").arg("INFO").query(conn).ok();
    info.and_then(|i| {
        i.split_whitespace()
            .find_map(|kv| kv.strip_prefix("laddr=").map(|a| format!("redis://{a}/")))
    })
    .unwrap_or_else(|| "<redis server>".to_owned())
}
