//! What the doctor reads from one server, and nothing else: `HELLO`, `INFO`,
//! `CONFIG GET` of a few parameters, a scripting probe, a pub/sub probe and
//! `TIME`. Every read that the server refuses (an ACL, a renamed command) is kept
//! as the reason it failed, so the checks can say `unknown` instead of `fine`.
//! Nothing here writes: the probes run `return 1` and subscribe to a channel
//! nobody publishes on.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisError, RedisResult, Value};

use crate::net::caps::hello_fields;

/// A read, or why it could not be made (a refusal, as the server worded it).
pub(crate) type Read<T> = Result<T, String>;

/// The `CONFIG GET` parameters the checks use.
pub(crate) const CONFIG: &[&str] = &[
    "maxmemory",
    "maxmemory-policy",
    "appendonly",
    "appendfsync",
    "replica-read-only",
    "min-replicas-to-write",
    "stop-writes-on-bgsave-error",
    "save",
    "busy-reply-threshold",
];

/// `EVAL` of this script is the scripting probe; it touches nothing.
const PROBE_SCRIPT: &str = "return 1";

/// Everything read from one server.
#[derive(Debug, Clone)]
pub(crate) struct Readings {
    /// `HELLO`'s fields (`server`, `version`, `mode`, `role`), when it answered.
    pub(crate) hello: HashMap<String, String>,
    /// `INFO` (its default sections), field by field.
    pub(crate) info: Read<HashMap<String, String>>,
    /// `CONFIG GET` of each parameter the checks use.
    pub(crate) config: HashMap<&'static str, Read<String>>,
    /// Whether `EVAL` (or, failing that, `EVALSHA`) is allowed: `Ok(Err(why))`
    /// when the server refused both.
    pub(crate) scripting: Read<Result<(), String>>,
    /// Whether `SUBSCRIBE` on a channel under the key prefix is allowed, as for
    /// scripting.
    pub(crate) pubsub: Read<Result<(), String>>,
    /// The server's clock minus this machine's, and half the round trip that
    /// measured it (the uncertainty).
    pub(crate) clock: Read<(f64, Duration)>,
}

impl Default for Readings {
    fn default() -> Self {
        Self {
            hello: HashMap::new(),
            info: never(),
            config: HashMap::new(),
            scripting: never(),
            pubsub: never(),
            clock: never(),
        }
    }
}

/// A read not made.
fn never<T>() -> Read<T> {
    Err("not read".to_owned())
}

/// What to read beyond `HELLO` and `INFO`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Depth {
    /// `CONFIG GET`, the probes and `TIME` (the full doctor), or only `INFO` and
    /// what its findings need (the check at `build()`).
    pub(crate) full: bool,
}

impl Readings {
    /// Reads `conn`'s server; `subscriber`, when given, takes the pub/sub probe
    /// (a connection of its own), else `conn` subscribes and unsubscribes.
    ///
    /// # Errors
    /// The first failure that is not a refusal (the server did not answer).
    pub(crate) fn read(
        conn: &mut dyn ConnectionLike,
        channel: &str,
        subscriber: Option<&mut dyn ConnectionLike>,
        depth: Depth,
    ) -> RedisResult<Self> {
        // The cheap check reads the role from `INFO`: one round trip.
        let mut r = Readings {
            hello: if depth.full {
                hello(conn)?
            } else {
                HashMap::new()
            },
            info: refused(redis::cmd("INFO").query::<String>(conn))?.map(|t| parse_info(&t)),
            ..Self::default()
        };
        if !depth.full {
            // The cheap check: `INFO` alone, and whether a failed save stops
            // writes when one failed. An `INFO` refused is not followed by a
            // `CONFIG GET` (as refused for such a user: one more `ACL LOG` entry).
            if r.info_str("rdb_last_bgsave_status") == Some("err") {
                for name in ["stop-writes-on-bgsave-error", "save"] {
                    r.config.insert(name, config_get(conn, name)?);
                }
            }
            return Ok(r);
        }
        for name in CONFIG {
            r.config.insert(name, config_get(conn, name)?);
        }
        r.scripting = scripting(conn)?;
        r.pubsub = match subscriber {
            Some(sub) => subscribe(sub, channel),
            None => subscribe(conn, channel),
        }?;
        r.clock = clock(conn)?;
        Ok(r)
    }

    /// An `INFO` field.
    pub(crate) fn info_str(&self, field: &str) -> Option<&str> {
        self.info.as_ref().ok()?.get(field).map(String::as_str)
    }

    /// A `CONFIG GET` value, or the same from `INFO` under another name.
    pub(crate) fn setting(&self, config: &str, info: &str) -> Read<String> {
        match self.info_str(info) {
            Some(v) => Ok(v.to_owned()),
            None => self.config(config).map(str::to_owned),
        }
    }

    /// Why `INFO` could not be read.
    pub(crate) fn info_reason(&self) -> String {
        self.info.as_ref().err().cloned().unwrap_or_default()
    }

    /// An `INFO` field as a number.
    pub(crate) fn info_num(&self, field: &str) -> Option<u64> {
        self.info_str(field)?.trim().parse().ok()
    }

    /// A `CONFIG GET` parameter, or why it could not be read.
    pub(crate) fn config(&self, name: &str) -> Read<&str> {
        match self.config.get(name) {
            Some(Ok(v)) => Ok(v.as_str()),
            Some(Err(why)) => Err(why.clone()),
            None => Err("not read".to_owned()),
        }
    }

    /// `server` (`redis`, `valkey`) and `version`, from `HELLO` or `INFO`.
    pub(crate) fn server(&self) -> (Option<&str>, Option<&str>) {
        let name = self.hello.get("server").map(String::as_str);
        let name = name.or_else(|| self.info_str("server_name"));
        let name = name.or(self.info_str("redis_version").map(|_| "redis"));
        let version = match name {
            Some("valkey") => self.info_str("valkey_version"),
            _ => None,
        };
        let version = self.hello.get("version").map(String::as_str).or(version);
        (name, version.or_else(|| self.info_str("redis_version")))
    }

    /// `master` or `replica`, from `HELLO` or `INFO replication`.
    pub(crate) fn role(&self) -> Option<&str> {
        match self.hello.get("role").map(String::as_str) {
            Some(role) => Some(role),
            None => match self.info_str("role")? {
                "slave" => Some("replica"),
                other => Some(other),
            },
        }
    }

    /// The replicas a master lists in `INFO replication` (`slaveN:ip=…,port=…`).
    pub(crate) fn replicas(&self) -> Vec<(String, u16)> {
        let Ok(info) = &self.info else {
            return Vec::new();
        };
        let mut found: Vec<(usize, (String, u16))> = info
            .iter()
            .filter_map(|(k, v)| {
                let n = k.strip_prefix("slave")?.parse::<usize>().ok()?;
                let field = |name: &str| {
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                };
                Some((n, (field("ip")?.to_owned(), field("port")?.parse().ok()?)))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, addr)| addr).collect()
    }
}

/// `HELLO` without a protocol version: the server's name, version, mode and role,
/// on the connection's protocol as it is. An error reply (a server before 6, or
/// one that renamed it) leaves it empty; `INFO` says as much.
fn hello(conn: &mut dyn ConnectionLike) -> RedisResult<HashMap<String, String>> {
    let reply = match conn.req_command(&redis::cmd("HELLO")) {
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => return Err(e),
        Ok(Value::ServerError(_)) | Err(_) => return Ok(HashMap::new()),
        Ok(v) => v,
    };
    Ok(hello_fields(reply))
}

/// `INFO`'s text, field by field (section headers and blank lines left out).
pub(crate) fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// `CONFIG GET name`; a parameter the server does not know is read as absent
/// (`Err`), as is a refusal.
fn config_get(conn: &mut dyn ConnectionLike, name: &str) -> RedisResult<Read<String>> {
    let reply = refused(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query::<Vec<String>>(conn),
    )?;
    Ok(reply.and_then(|pairs| match pairs.as_slice() {
        [_, value, ..] => Ok(value.clone()),
        _ => Err(format!("the server has no `{name}` parameter")),
    }))
}

/// `EVAL "return 1" 0`; if refused, `EVALSHA` of the same script (redlease's
/// calls are `EVALSHA` and `SCRIPT LOAD`): a `NOSCRIPT` reply means it is allowed.
fn scripting(conn: &mut dyn ConnectionLike) -> RedisResult<Read<Result<(), String>>> {
    let eval = refused(
        redis::cmd("EVAL")
            .arg(PROBE_SCRIPT)
            .arg(0)
            .query::<i64>(conn),
    )?;
    let Err(eval_refused) = eval else {
        return Ok(Ok(Ok(())));
    };
    let sha = redis::Script::new(PROBE_SCRIPT).get_hash().to_owned();
    match redis::cmd("EVALSHA").arg(sha).arg(0).query::<i64>(conn) {
        Ok(_) => Ok(Ok(Ok(()))),
        Err(e) if e.code() == Some("NOSCRIPT") => Ok(Ok(Ok(()))),
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(e),
        Err(e) => Ok(Ok(Err(format!(
            "EVAL: {eval_refused}; EVALSHA: {}",
            words(&e)
        )))),
    }
}

/// `SUBSCRIBE channel`, then `UNSUBSCRIBE` it, as plain commands (a refusal is
/// an error reply, which `redis::PubSub` would take for a confirmation).
fn subscribe(
    conn: &mut dyn ConnectionLike,
    channel: &str,
) -> RedisResult<Read<Result<(), String>>> {
    match conn.req_command(redis::cmd("SUBSCRIBE").arg(channel)) {
        Ok(Value::ServerError(e)) => Ok(Ok(Err(words(&e.into())))),
        Ok(_) => {
            conn.req_command(redis::cmd("UNSUBSCRIBE").arg(channel))?;
            Ok(Ok(Ok(())))
        }
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(e),
        Err(e) => Ok(Ok(Err(words(&e)))),
    }
}

/// `TIME` against this machine's clock, read on each side of it.
fn clock(conn: &mut dyn ConnectionLike) -> RedisResult<Read<(f64, Duration)>> {
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    };
    let before = now();
    let time = refused(redis::cmd("TIME").query::<(u64, u64)>(conn))?;
    let after = now();
    Ok(time.map(|(s, us)| {
        #[expect(clippy::cast_precision_loss, reason = "microseconds of a clock")]
        let server = s as f64 + us as f64 / 1e6;
        let middle = f64::midpoint(before.as_secs_f64(), after.as_secs_f64());
        (server - middle, after.saturating_sub(before) / 2)
    }))
}

/// Passes a reply on; a refusal or other error reply becomes `Ok(Err(why))`;
/// a failure to get any reply stays an error.
fn refused<T>(reply: RedisResult<T>) -> RedisResult<Read<T>> {
    match reply {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(e),
        Err(e) => Ok(Err(words(&e))),
    }
}

/// An error reply as the server worded it (`NOPERM this user has no …`).
fn words(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_read_field_by_field_and_replicas_in_order() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave1:ip=10.0.0.2,port=6380,state=online,offset=1,lag=0\r\n\
                    slave0:ip=10.0.0.1,port=6379,state=online,offset=1,lag=0\r\n";
        let r = Readings {
            info: Ok(parse_info(text)),
            ..Readings::default()
        };
        assert_eq!(r.info_num("connected_slaves"), Some(2));
        assert_eq!(r.role(), Some("master"));
        assert_eq!(
            r.replicas(),
            [("10.0.0.1".to_owned(), 6379), ("10.0.0.2".to_owned(), 6380)]
        );
    }
}
