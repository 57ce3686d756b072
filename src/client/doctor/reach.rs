//! Which servers a deployment has, for the doctor: the URLs given (one server,
//! Redlock's masters), every master of a cluster, the master Sentinel resolves and
//! the sentinels' view of its quorum; each followed by the replicas it lists. And
//! the cheap check `build()` runs on a topology's masters.

use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

use super::read::{Depth, Readings};
use super::{Checkup, Finding, Report, ServerReport, Severity, checks};
use crate::client::builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, ServerCheck};
use crate::error::{Error, Result};
use crate::net::connection::{Redacted, Target, at};
use crate::topology::Topology;

/// [`Report::read`]: each URL a lock server, with its replicas.
pub(super) fn urls<I>(urls: I, checkup: &Checkup) -> Result<Report>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    let infos = parse(urls)?;
    let mut report = Report::default();
    let mut last = None;
    for info in &infos {
        if let Err(e) = server(info, checkup, true, &mut report) {
            last = Some(e);
        }
    }
    answered(report, last)
}

/// The connection infos of `urls`, or a config error for the first bad one.
fn parse<I>(urls: I) -> Result<Vec<ConnectionInfo>>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    urls.into_iter()
        .map(IntoConnectionInfo::into_connection_info)
        .collect::<RedisResult<Vec<_>>>()
        .map_err(|_| Error::config("url", "not a valid redis url"))
}

/// [`Report::read_cluster`]: every master `CLUSTER NODES` lists, with replicas.
pub(super) fn cluster<I>(seeds: I, checkup: &Checkup) -> Result<Report>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    let seeds = parse(seeds)?;
    let mut last = Error::config("urls", "a cluster needs a seed node");
    for seed in &seeds {
        let nodes =
            open(seed).and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c));
        match nodes {
            Ok(text) => {
                let mut report = Report::default();
                let mut failed = None;
                for (host, port) in masters(&text) {
                    let info = at(seed, &host, port);
                    if let Err(e) = server(&info, checkup, true, &mut report) {
                        failed = Some(e);
                    }
                }
                return answered(report, failed);
            }
            Err(e) => last = e.into(),
        }
    }
    Err(last)
}

/// [`LockClient::doctor`](crate::LockClient::doctor): every master of the
/// topology, its replicas, and on Sentinel the sentinels' view of the quorum.
pub(crate) fn client(topology: &dyn Topology, checkup: &Checkup) -> Report {
    let mut report = Report::default();
    for i in 0..topology.subscribers() {
        let node = topology.subscriber(i);
        let target = node.address();
        let read = node.connect_raw().map_err(Error::from).and_then(|mut con| {
            // A Sentinel-resolved master says where it is itself.
            let shown = match template(target) {
                #[cfg(feature = "sentinel")]
                _ if matches!(target, Target::Sentinel(_)) => super::local_address(&mut con),
                info => Redacted(info.as_ref()).to_string(),
            };
            ServerReport::read_as(&mut con, None, checkup, shown, true)
        });
        match read {
            Ok(found) => {
                let replicas = found.replicas.clone();
                report.servers.push(found);
                if let Some(info) = template(target) {
                    for (host, port) in replicas {
                        replica(&at(&info, &host, port), checkup, &mut report);
                    }
                }
            }
            Err(e) => {
                let shown = target.to_string();
                report
                    .servers
                    .push(ServerReport::unreachable(shown, &e.to_string()));
            }
        }
        #[cfg(feature = "sentinel")]
        if let Target::Sentinel(master) = target {
            sentinels(master, &mut report);
        }
    }
    report
}

/// The check `build()` runs (unless `mode` is off): one `INFO` on each master
/// (and `CONFIG GET` only where `INFO` leaves a critical check undecided); each
/// critical finding of the checks `INFO` decides is logged at `warn`, and the
/// first refused when `mode` says so. A master that does not answer adds nothing
/// here: the build has just reached it.
///
/// # Errors
/// [`Error::UnsafeServer`] under [`ServerCheck::Refuse`].
pub(crate) fn at_build(
    topology: &dyn Topology,
    checkup: &Checkup,
    mode: ServerCheck,
) -> Result<Vec<Finding>> {
    if mode == ServerCheck::Off {
        return Ok(Vec::new());
    }
    let mut critical = Vec::new();
    for i in 0..topology.subscribers() {
        let node = topology.subscriber(i);
        let Ok(mut conn) = node.get() else { continue };
        let read = conn.run(|c| Readings::read(c, "", None, Depth { full: false }));
        let Ok(readings) = read else { continue };
        let shown = node.address().to_string();
        let found = ServerReport::of(&readings, checks::CHEAP, checkup, shown, true);
        critical.extend(
            found
                .findings
                .into_iter()
                .filter(|f| f.severity == Severity::Critical),
        );
    }
    for f in &critical {
        log::warn!(
            "redis server {} is unsafe for locks ({}): {}; fix: {}",
            f.server(),
            f.check(),
            f.detail(),
            f.fix()
        );
    }
    match critical.first() {
        Some(f) if mode == ServerCheck::Refuse => Err(Error::UnsafeServer {
            check: f.check(),
            finding: Box::new(f.clone()),
        }),
        _ => Ok(critical),
    }
}

/// Reads the server at `info` as a lock server (`direct`), then its replicas;
/// fails only when the server itself did not answer (it is then reported so).
fn server(info: &ConnectionInfo, checkup: &Checkup, direct: bool, out: &mut Report) -> Result<()> {
    let shown = Redacted(Some(info)).to_string();
    let read = open(info)
        .map_err(Error::from)
        .and_then(|mut con| ServerReport::read_as(&mut con, None, checkup, shown.clone(), direct));
    match read {
        Ok(found) => {
            let replicas = found.replicas.clone();
            out.servers.push(found);
            for (host, port) in replicas {
                replica(&at(info, &host, port), checkup, out);
            }
            Ok(())
        }
        Err(e) => {
            out.servers
                .push(ServerReport::unreachable(shown, &e.to_string()));
            Err(e)
        }
    }
}

/// Reads a replica a master listed (its own replicas are not followed).
fn replica(info: &ConnectionInfo, checkup: &Checkup, out: &mut Report) {
    let shown = Redacted(Some(info)).to_string();
    let read = open(info)
        .map_err(Error::from)
        .and_then(|mut con| ServerReport::read_as(&mut con, None, checkup, shown.clone(), false));
    out.servers
        .push(read.unwrap_or_else(|e| ServerReport::unreachable(shown, &e.to_string())));
}

/// What the sentinels say of the master's quorum: `SENTINEL CKQUORUM` on the
/// first that answers; a refusal is a warning (no failover possible).
#[cfg(feature = "sentinel")]
fn sentinels(master: &crate::net::sentinel::Master, out: &mut Report) {
    const WHY: &str = "without a quorum of sentinels no failover happens: a dead master \
                       stops every lock until it is back";
    for info in master.sentinels() {
        let shown = Redacted(Some(info)).to_string();
        let Ok(mut con) = open(info) else { continue };
        let reply = redis::cmd("SENTINEL")
            .arg("CKQUORUM")
            .arg(master.name())
            .query::<String>(&mut con);
        let finding = match reply {
            Ok(_) => None,
            Err(e) if e.is_io_error() || e.is_timeout() => continue,
            Err(e) => {
                let sev = if e.code() == Some("NOQUORUM") {
                    Severity::Warning
                } else {
                    Severity::Unknown
                };
                let detail = format!("SENTINEL CKQUORUM {}: {e}", master.name());
                let fix = "run at least three sentinels that reach each other and the master";
                Some(Finding::new("sentinel-quorum", sev, detail, WHY, fix))
            }
        };
        let mut report = ServerReport::unreachable(shown.clone(), "");
        report.role = Some("sentinel".to_owned());
        report.findings = finding.into_iter().collect();
        for f in &mut report.findings {
            f.server.clone_from(&shown);
        }
        out.servers.push(report);
        return;
    }
    let shown = master
        .sentinels()
        .first()
        .map(|i| Redacted(Some(i)).to_string());
    let why = "no sentinel answered";
    out.servers
        .push(ServerReport::unreachable(shown.unwrap_or_default(), why));
}

/// The report, or the last failure when no server answered.
fn answered(report: Report, failure: Option<Error>) -> Result<Report> {
    let none = report
        .servers
        .iter()
        .all(|s| s.findings.iter().any(|f| f.check == "reachable"));
    match failure {
        Some(e) if none => Err(e),
        _ => Ok(report),
    }
}

/// The masters `CLUSTER NODES` lists (`<id> <host:port@bus> <flags> …`), failed
/// ones left out.
fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let addr = fields.nth(1)?;
            let flags = fields.next()?;
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            let addr = addr.split('@').next()?.split(',').next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// How a node's connections are made, as a template for its replicas (with the
/// same user and password): for a Sentinel-resolved master, the first sentinel's
/// URL, as the master itself is reached.
#[cfg_attr(
    not(feature = "sentinel"),
    expect(clippy::unnecessary_wraps, reason = "a sentinel target may have none")
)]
fn template(target: &Target) -> Option<ConnectionInfo> {
    match target {
        Target::Server(client) => Some(client.get_connection_info().clone()),
        #[cfg(feature = "cluster")]
        Target::Shard(client, _) => Some(client.get_connection_info().clone()),
        #[cfg(feature = "sentinel")]
        Target::Sentinel(master) => master.sentinels().first().cloned(),
    }
}

/// A connection of its own to `info`, every step bounded by the library's
/// default timeouts; like every connection of the library's, it sends no
/// `CLIENT SETINFO` (an ACL refusal on Valkey and Redis 7.2+ for a lock user).
fn open(info: &ConnectionInfo) -> RedisResult<redis::Connection> {
    let client = redis::Client::open(crate::net::tls::quiet(info.clone()))?;
    let con = client.get_connection_with_timeout(DEFAULT_CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(DEFAULT_IO_TIMEOUT))?;
    con.set_write_timeout(Some(DEFAULT_IO_TIMEOUT))?;
    Ok(con)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lists_the_live_masters() {
        let text = "a 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b 10.0.0.2:7001@17001 slave a 0 0 1 connected\n\
                    c 10.0.0.3:7002@17002 master,fail - 0 0 2 connected\n\
                    d 10.0.0.4:7003@17003,host.example master - 0 0 3 connected 5461-16383\n";
        assert_eq!(
            masters(text),
            [("10.0.0.1".to_owned(), 7000), ("10.0.0.4".to_owned(), 7003)]
        );
    }
}
