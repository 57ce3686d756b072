//! `redlease list --prefix P [--json]`: every lock under a prefix, with its
//! format, time left, fence and owners; a lock whose owner is gone is marked.
//!
//! Keys are found with `SCAN` (`COUNT` [`SCAN_COUNT`] a call, so the server is
//! never blocked for long) on the server, or on every master of a cluster. The
//! prefix is taken literally: its glob characters are escaped in `MATCH`.
//! redlease's own keys under the prefix (`<prefix>redlease:…`: the fence
//! counter, session records) are not locks and are left out.

use redis::{Connection, ConnectionInfo, IntoConnectionInfo, Value};
use redlease::LockInfo;

use crate::args::ListArgs;
use crate::exit::Failure;
use crate::inspect::{summary, to_json};
use crate::owners;
use crate::probe;
use crate::server::Servers;
use crate::server::server_name;

/// Keys a `SCAN` call looks at.
const SCAN_COUNT: usize = 100;
/// `SCAN` calls made on one node at most: 10 million keys at [`SCAN_COUNT`].
const MAX_SCANS: usize = 100_000;

/// Runs `list`: one line (or JSON object) per lock under the prefix, sorted by
/// key. Exit code 0 when every node could be read.
pub(crate) fn list(args: &ListArgs) -> Result<u8, Failure> {
    let prefix = &args.server.prefix;
    let (seed, cluster) = match args.server.servers() {
        Servers::One(url) => (url, false),
        Servers::Cluster(seeds) => (seeds.into_iter().next().unwrap_or_default(), true),
        Servers::Quorum(_) => {
            return Err(Failure::usage(
                "list works on one server or a cluster: give one --url, or --cluster",
            ));
        }
    };
    let server = server_name(&seed);
    let fail = |e: &redis::RedisError| Failure::redis(e, &server);
    let info = seed.as_str().into_connection_info().map_err(|e| fail(&e))?;
    let mut nodes = vec![info.clone()];
    if cluster {
        let mut con = probe::connect_info(info.clone()).map_err(|e| fail(&e))?;
        nodes = masters(&mut con, &info).map_err(|e| fail(&e))?;
    }
    let mut found: Vec<LockInfo> = Vec::new();
    for node in nodes {
        let mut con = probe::connect_info(node).map_err(|e| fail(&e))?;
        let on_cluster = cluster.then_some(&info);
        for key in scan(&mut con, prefix).map_err(|e| fail(&e))? {
            let lookup =
                |c: &mut dyn redis::ConnectionLike, tag| owners::lookup(c, on_cluster, prefix, tag);
            let read = LockInfo::read_with(&mut con, prefix, &key[prefix.len()..], lookup);
            found.push(read.map_err(|e| Failure::from_lib(&e, &server))?);
        }
    }
    found.sort_by(|a, b| a.key().cmp(b.key()));
    for info in &found {
        if args.json {
            println!("{}", to_json(info));
        } else {
            let who = owners::short(&owners::owned(info));
            let sep = if who.is_empty() { "" } else { ", " };
            println!("{}  {}{sep}{who}", info.key(), summary(info));
        }
    }
    Ok(0)
}

/// `prefix` as a `MATCH` pattern that matches itself only, then anything.
pub(crate) fn pattern(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

/// Every key under `prefix` on `con`'s node but redlease's own and the prefix
/// itself (a lock's name is never empty).
fn scan(con: &mut Connection, prefix: &str) -> redis::RedisResult<Vec<String>> {
    let own = format!("{prefix}redlease:");
    let pattern = pattern(prefix);
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..MAX_SCANS {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query(con)?;
        // `MATCH` is checked again here: the prefix is meant literally.
        keys.extend(
            batch.into_iter().filter(|k| {
                k.len() > prefix.len() && k.starts_with(prefix) && !k.starts_with(&own)
            }),
        );
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// The masters of the cluster `con` is a node of (`CLUSTER SLOTS`), reached as
/// `seed` is (its credentials, TLS).
fn masters(con: &mut Connection, seed: &ConnectionInfo) -> redis::RedisResult<Vec<ConnectionInfo>> {
    let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
    let mut addrs: Vec<String> = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else { continue };
        let Some(Value::Array(master)) = items.get(2) else {
            continue;
        };
        let (host, port): (String, u16) = match (master.first(), master.get(1)) {
            (Some(h), Some(p)) => (
                redis::from_redis_value_ref(h)?,
                redis::from_redis_value_ref(p)?,
            ),
            _ => continue,
        };
        let host = if host.is_empty() {
            server_name_host(seed)
        } else {
            host
        };
        addrs.push(format!("{host}:{port}"));
    }
    addrs.sort();
    addrs.dedup();
    addrs.iter().map(|a| owners::at(seed, a)).collect()
}

/// The host `info` connects to (a master that reports no host is the seed's).
fn server_name_host(info: &ConnectionInfo) -> String {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
            host.clone()
        }
        _ => "127.0.0.1".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(pattern("a*b?c[d]e\\f:"), "a\\*b\\?c\\[d\\]e\\\\f:*");
        assert_eq!(pattern(""), "*");
    }
}
