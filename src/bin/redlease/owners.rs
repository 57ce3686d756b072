//! The owners of a lock's holders, for `inspect` and `list`: a holder's value
//! names its client (a redlease token or permit id its tag, a Redisson field of
//! a reentrant or read-write lock its UUID), and
//! that client's session record, `<prefix>redlease:session:<tag>`, says who it is.
//! The lookup and the record's reading are the library's ([`ClientTag`],
//! [`Owner::lookup`]); this module shows them.

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisResult};
use redlease::{ClientTag, LockFormat, LockInfo, Owner};
use serde_json::{Value, json};

use crate::probe;

/// One holder's value and its owner.
#[derive(Debug)]
pub(crate) struct Owned {
    pub(crate) value: String,
    pub(crate) owner: Owner,
}

/// The holders of `info` that may name an owner, as shown: a token's, each
/// owner field (a read-write lock's writers first), each permit id.
pub(crate) fn owned(info: &LockInfo) -> Vec<Owned> {
    let mut holders: Vec<_> = match info.format() {
        LockFormat::Token | LockFormat::Reentrant | LockFormat::Semaphore => {
            info.holders().iter().collect()
        }
        LockFormat::ReadWrite => {
            let (mut writers, readers): (Vec<_>, Vec<_>) =
                info.holders().iter().partition(|h| is_writer(h.value()));
            writers.extend(readers);
            writers
        }
        _ => Vec::new(),
    };
    holders
        .drain(..)
        .map(|h| Owned {
            value: h.value().to_owned(),
            owner: h.owner().clone(),
        })
        .collect()
}

/// Whether a read-write lock's field is its writer's.
pub(crate) fn is_writer(field: &str) -> bool {
    field.ends_with(":write")
}

/// The owner of `tag`, looked up under `prefix` on `con`; in a cluster
/// (`cluster` names how the seed was reached), a record on another master is
/// read there.
pub(crate) fn lookup(
    con: &mut dyn ConnectionLike,
    cluster: Option<&ConnectionInfo>,
    prefix: &str,
    tag: ClientTag,
) -> RedisResult<Owner> {
    match Owner::lookup(con, prefix, tag) {
        Err(e) => match (cluster, e.redirect_node()) {
            (Some(info), Some((addr, _))) => {
                let mut there = probe::connect_info(at(info, addr)?)?;
                Owner::lookup(&mut there, prefix, tag)
            }
            _ => Err(e),
        },
        found => found,
    }
}

/// `info` (its credentials, TLS settings) for the node at `addr` (`host:port`).
pub(crate) fn at(info: &ConnectionInfo, addr: &str) -> RedisResult<ConnectionInfo> {
    let bad = || redis::RedisError::from((redis::ErrorKind::Client, "bad node address"));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Ok(info.clone().set_addr(addr))
}

/// `"holders"` of `inspect --json`: one object per holder whose value names a
/// redlease client; empty when none does (a redis-py token, a timestamp).
pub(crate) fn to_json(owned: &[Owned]) -> Value {
    let holders: Vec<Value> = owned
        .iter()
        .filter_map(|o| {
            let tag = o.owner.tag()?;
            let s = o.owner.session();
            let (state, id) = match &o.owner {
                Owner::Alive(s) => ("alive", s.client_id().to_owned()),
                Owner::Unknown(_) => ("unknown", tag.to_string()),
                _ => ("gone", tag.to_string()),
            };
            Some(json!({
                "value": o.value,
                "host": s.map(redlease::Session::host),
                "pid": s.map(redlease::Session::pid),
                "program": s.map(redlease::Session::program),
                "client_id": id,
                "since": s.map(|s| since(s.started())),
                "alive": o.owner.is_alive(),
                "owner": state,
                // The liveness its client declared (ms); a gone owner that
                // declared one is breakable by the next waiter.
                "liveness_ms": s.and_then(redlease::Session::liveness)
                    .map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
                "breakable": !o.owner.is_alive()
                    && tag.declares_liveness()
                    && redlease::ClientTag::of_token(&o.value).is_some(),
            }))
        })
        .collect();
    Value::Array(holders)
}

/// One line per owner: `owner:   pid 42 on host (program), since …, alive`.
pub(crate) fn to_text(owned: &[Owned]) -> String {
    let mut out = String::new();
    for o in owned {
        let line = match &o.owner {
            Owner::Alive(s) => format!(
                "pid {} on {} ({}), up since {}, alive{}",
                s.pid(),
                s.host(),
                s.program(),
                since(s.started()),
                s.liveness().map_or_else(String::new, |l| format!(
                    ", liveness {}",
                    humantime::format_duration(l)
                ))
            ),
            Owner::Gone(tag) if tag.declares_liveness() => format!(
                "client {tag}, gone: its liveness session ended (the next redlease waiter \
                 takes the lock at once)"
            ),
            Owner::Gone(tag) => format!(
                "client {tag}, gone: no session record (the process ended or lost redis; \
                 the lock stays until its ttl)"
            ),
            Owner::Unknown(tag) => format!(
                "client {tag}, unknown owner: its session record is of another version or garbled"
            ),
            _ => {
                "none named: not a redlease value (another client's token, a timestamp)".to_owned()
            }
        };
        let _ = writeln!(out, "owner:   {line}");
    }
    out
}

/// One short phrase for a list line: `pid 42 on host (program)` or `GONE`.
pub(crate) fn short(owned: &[Owned]) -> String {
    let parts: Vec<String> = owned
        .iter()
        .filter(|o| o.owner.tag().is_some())
        .map(|o| match &o.owner {
            Owner::Alive(s) => format!("pid {} on {} ({})", s.pid(), s.host(), s.program()),
            Owner::Unknown(tag) => format!("unknown owner {tag}"),
            Owner::Gone(tag) if tag.declares_liveness() => {
                format!("owner {tag} GONE (session ended: breakable)")
            }
            o => format!(
                "owner {} GONE",
                o.tag().map(|t| t.to_string()).unwrap_or_default()
            ),
        })
        .collect();
    parts.join("; ")
}

/// A start time as RFC 3339 to the second, UTC.
fn since(at: std::time::SystemTime) -> String {
    if at < UNIX_EPOCH {
        return "?".to_owned();
    }
    humantime::format_rfc3339_seconds(at).to_string()
}
