//! The checks: each a small function from what was read of one server
//! ([`Readings`]) to its findings. A check whose input could not be read says
//! [`Severity::Unknown`], never nothing; a check that finds nothing wrong says
//! nothing. A new risk is one function here, listed in [`FULL`] (and in [`CHEAP`]
//! when `INFO` alone decides it), and one test on a server set up to trip it.

use std::time::Duration;

use super::commands::{has_delifeq, offered};
use super::read::{Read, Readings};
use super::{Finding, Severity};
use crate::time::drift;

/// What a check knows besides the readings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    /// The longest lease TTL in use.
    pub(crate) ttl: Duration,
    /// Whether acquisitions wait for replicas (`LockClientBuilder::replicas`).
    pub(crate) waits_for_replicas: bool,
    /// Whether the server was asked as a lock server (a replica then is a
    /// mistake), or reached as a replica its master named.
    pub(crate) direct: bool,
}

/// A check: the readings and the context to findings.
pub(crate) type Check = fn(&Readings, &Context) -> Vec<Finding>;

/// Every check, in the order a report lists them.
pub(crate) const FULL: &[Check] = &[
    eviction,
    replica,
    writable_replica,
    scripting,
    misconf,
    persistence,
    uptime,
    async_replication,
    pubsub,
    clock_skew,
    evicted_keys,
    error_stats,
    busy_threshold,
    conditional_commands,
];

/// The checks `INFO` alone decides: those `build()` runs.
pub(crate) const CHEAP: &[Check] = &[eviction, replica, writable_replica, misconf];

const ACL_FIX: &str = "let the doctor's user run INFO and CONFIG GET (+info +config|get), \
                       or run the doctor as one who may";

/// The finding of a check that could not read what it needs.
fn unknown(check: &'static str, what: &str, reason: &str, why: &'static str) -> Vec<Finding> {
    let detail = format!("could not read {what}: {reason}");
    vec![Finding::new(check, Severity::Unknown, detail, why, ACL_FIX)]
}

fn eviction(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "when memory runs short the server deletes keys to make room, and a \
                       lease is a key with a TTL: a held lock can vanish and be granted again";
    let (max, policy) = match (
        r.setting("maxmemory", "maxmemory"),
        r.setting("maxmemory-policy", "maxmemory_policy"),
    ) {
        (Ok(max), Ok(policy)) => (max, policy),
        (Err(why), _) | (_, Err(why)) => {
            return unknown("eviction", "maxmemory and its policy", &why, WHY);
        }
    };
    if max.trim() == "0" || policy == "noeviction" {
        return Vec::new();
    }
    let detail = format!("maxmemory {max} bytes with maxmemory-policy {policy}");
    let fix = "set maxmemory-policy noeviction (CONFIG SET and redis.conf), or keep locks on a \
               server of their own that never evicts";
    vec![Finding::new(
        "eviction",
        Severity::Critical,
        detail,
        WHY,
        fix,
    )]
}

fn replica(r: &Readings, cx: &Context) -> Vec<Finding> {
    const WHY: &str = "a replica is not where locks are granted: what it accepts is never \
                       replicated, and it reloads its master's data at any resync";
    if !cx.direct {
        return Vec::new();
    }
    match r.role() {
        Some("replica" | "slave") => {
            let master = match (r.info_str("master_host"), r.info_str("master_port")) {
                (Some(h), Some(p)) => format!(" of {h}:{p}"),
                _ => String::new(),
            };
            let detail = format!("the server asked is a replica{master}");
            let fix = "point the client at the master (or at Sentinel or the cluster, which \
                       find it)";
            vec![Finding::new(
                "replica",
                Severity::Critical,
                detail,
                WHY,
                fix,
            )]
        }
        Some(_) => Vec::new(),
        None => unknown("replica", "the server's role", &r.info_reason(), WHY),
    }
}

fn writable_replica(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "a replica that accepts writes can grant a lease its master never sees, \
                       and forgets it at its next resync";
    match r.role() {
        Some("replica" | "slave") => {}
        Some(_) => return Vec::new(),
        None => {
            return unknown(
                "writable-replica",
                "the server's role",
                &r.info_reason(),
                WHY,
            );
        }
    }
    let read_only = match r.info_str("slave_read_only") {
        Some(v) => Ok(v != "0"),
        None => r.config("replica-read-only").map(|v| v != "no"),
    };
    match read_only {
        Ok(true) => Vec::new(),
        Ok(false) => {
            let detail = "replica-read-only no".to_owned();
            let fix = "set replica-read-only yes";
            vec![Finding::new(
                "writable-replica",
                Severity::Critical,
                detail,
                WHY,
                fix,
            )]
        }
        Err(why) => unknown("writable-replica", "replica-read-only", &why, WHY),
    }
}

fn scripting(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "release, renewal and fencing are Lua scripts: without them a lock \
                       cannot be released or renewed safely";
    match &r.scripting {
        Ok(Ok(())) => Vec::new(),
        Ok(Err(refusal)) if has_delifeq(r) => {
            const WHY: &str = "this server's conditional commands release and renew an unfenced \
                               token lock without Lua; everything else is a script";
            let detail = format!(
                "scripts refused: {refusal}; this user can take, wait for, renew and release \
                 unfenced token locks (`lock`, `run`, `wait`), not fenced ones, reentrant, fair, \
                 read-write, semaphore, election, all-or-none (`--and`) or legacy locks, which \
                 fail with a permission error naming scripting"
            );
            let fix = "grant the user +@scripting (at least +evalsha +script|load) for the \
                       features that need it, or keep to unfenced token locks";
            vec![Finding::new(
                "scripting",
                Severity::Warning,
                detail,
                WHY,
                fix,
            )]
        }
        Ok(Err(refusal)) => {
            let detail = format!("scripts refused: {refusal}");
            let fix = "grant the user +@scripting (at least +evalsha +script|load), restore a \
                       renamed EVAL/EVALSHA, or use a server that runs Lua";
            vec![Finding::new(
                "scripting",
                Severity::Critical,
                detail,
                WHY,
                fix,
            )]
        }
        Err(why) => unknown("scripting", "the scripting probe", why, WHY),
    }
}

fn misconf(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "after a failed save the server refuses every write with -MISCONF: no \
                       lock can be taken, renewed or released";
    let failed: Vec<&str> = ["rdb_last_bgsave_status", "aof_last_write_status"]
        .into_iter()
        .filter(|f| r.info_str(f) == Some("err"))
        .collect();
    if r.info.is_err() {
        return unknown("misconf", "INFO persistence", &r.info_reason(), WHY);
    }
    if failed.is_empty() {
        return Vec::new();
    }
    // Writes are refused only when save points are set (`save ""` has none)
    // and `stop-writes-on-bgsave-error` is on; what cannot be read counts as
    // the default: refused.
    let stops = r.config("stop-writes-on-bgsave-error");
    let saves = r.config("save");
    let refuses = stops != Ok("no") && !saves.as_ref().is_ok_and(|v| v.trim().is_empty());
    let severity = if refuses {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let shown = |v: Read<&str>| v.map_or_else(|_| "unreadable".to_owned(), |v| format!("{v:?}"));
    let detail = format!(
        "{} is err, stop-writes-on-bgsave-error {}, save {}",
        failed.join(" and "),
        shown(stops),
        shown(saves)
    );
    let fix = "fix what made the save fail (disk space, permissions: see the server's log), \
               then BGSAVE";
    vec![Finding::new("misconf", severity, detail, WHY, fix)]
}

fn persistence(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "a server that restarts forgets the leases it acknowledged since its \
                       last write to disk, and grants them again while their holders still work";
    let fix = "set appendonly yes and appendfsync always, or delay every restart by the \
               longest TTL";
    let aof = match r.setting("appendonly", "aof_enabled") {
        Ok(v) => v == "1" || v == "yes",
        Err(why) => return unknown("persistence", "appendonly", &why, WHY),
    };
    if !aof {
        let detail = "appendonly no".to_owned();
        return vec![Finding::new(
            "persistence",
            Severity::Warning,
            detail,
            WHY,
            fix,
        )];
    }
    match r.config("appendfsync") {
        Ok("always") => Vec::new(),
        Ok(every) => {
            let detail = format!("appendonly yes with appendfsync {every}");
            vec![Finding::new(
                "persistence",
                Severity::Warning,
                detail,
                WHY,
                fix,
            )]
        }
        Err(why) => unknown("persistence", "appendfsync", &why, WHY),
    }
}

fn uptime(r: &Readings, cx: &Context) -> Vec<Finding> {
    const WHY: &str = "a server restarted inside a lease's TTL may have forgotten leases \
                       whose holders still work";
    let Some(up) = r.info_num("uptime_in_seconds") else {
        return unknown("uptime", "uptime_in_seconds", &r.info_reason(), WHY);
    };
    if Duration::from_secs(up) >= cx.ttl {
        return Vec::new();
    }
    let detail = format!(
        "up {up}s, less than the longest TTL ({}s)",
        cx.ttl.as_secs_f64()
    );
    let fix = "nothing if the restart lost no data; else keep restarts one TTL apart from \
               the last grant, or persist with appendfsync always";
    vec![Finding::new("uptime", Severity::Warning, detail, WHY, fix)]
}

fn async_replication(r: &Readings, cx: &Context) -> Vec<Finding> {
    const WHY: &str = "replication is asynchronous: a failover to a replica that had not yet \
                       received a lease loses it, and another client can take the lock";
    let Some(replicas) = r.info_num("connected_slaves") else {
        return unknown(
            "async-replication",
            "INFO replication",
            &r.info_reason(),
            WHY,
        );
    };
    if replicas == 0 || cx.waits_for_replicas {
        return Vec::new();
    }
    let min = match r.config("min-replicas-to-write") {
        Ok(v) => v.trim().parse::<u64>().unwrap_or(0),
        Err(_) if r.info_str("min_slaves_good_slaves").is_some() => 1,
        Err(why) => return unknown("async-replication", "min-replicas-to-write", &why, WHY),
    };
    if min > 0 {
        return Vec::new();
    }
    let detail = format!("{replicas} replica(s), min-replicas-to-write 0");
    let fix = "have acquisitions wait for a replica (LockClientBuilder::replicas, which sends \
               WAIT), or set min-replicas-to-write 1 with min-replicas-max-lag";
    vec![Finding::new(
        "async-replication",
        Severity::Warning,
        detail,
        WHY,
        fix,
    )]
}

fn pubsub(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "waiting callers are woken by release messages; without them every \
                       wait polls, so hand-overs are slower and cost more commands";
    match &r.pubsub {
        Ok(Ok(())) => Vec::new(),
        Ok(Err(refusal)) => {
            let detail = format!("SUBSCRIBE refused: {refusal}");
            let fix = "allow the lock channels (ACL SETUSER <user> &{<prefix>* \
                       &redlease:waiter:*): Redis 7 users start with resetchannels";
            vec![Finding::new("pubsub", Severity::Warning, detail, WHY, fix)]
        }
        Err(why) => unknown("pubsub", "the pub/sub probe", why, WHY),
    }
}

fn clock_skew(r: &Readings, cx: &Context) -> Vec<Finding> {
    const WHY: &str = "a lease's TTL runs on the server's clock and its validity on the \
                       client's: legacy timestamp locks and fences compare the two";
    let (skew, uncertainty) = match &r.clock {
        Ok(c) => *c,
        Err(why) => return unknown("clock-skew", "TIME", why, WHY),
    };
    let margin = drift(cx.ttl) + uncertainty;
    if skew.abs() <= margin.as_secs_f64() {
        return Vec::new();
    }
    let detail = format!(
        "server clock {skew:+.3}s from this machine's, past the drift margin ({:.3}s)",
        margin.as_secs_f64()
    );
    let fix = "synchronise both clocks (NTP, chrony)";
    vec![Finding::new(
        "clock-skew",
        Severity::Warning,
        detail,
        WHY,
        fix,
    )]
}

fn evicted_keys(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "the server has already deleted keys to free memory; lock keys may \
                       have been among them";
    match r.info_num("evicted_keys") {
        None => unknown("evicted-keys", "evicted_keys", &r.info_reason(), WHY),
        Some(0) => Vec::new(),
        Some(n) => {
            let detail = format!("evicted_keys:{n}");
            let fix = "find what fills memory, and set maxmemory-policy noeviction";
            vec![Finding::new(
                "evicted-keys",
                Severity::Warning,
                detail,
                WHY,
                fix,
            )]
        }
    }
}

fn error_stats(r: &Readings, _: &Context) -> Vec<Finding> {
    const WHY: &str = "the server has refused writes (out of memory, too few replicas, a \
                       failed save): lock calls fail as those did";
    if r.info.is_err() {
        return unknown("error-stats", "INFO errorstats", &r.info_reason(), WHY);
    }
    let seen: Vec<String> = ["OOM", "NOREPLICAS", "MISCONF"]
        .into_iter()
        .filter_map(|code| {
            let field = format!("errorstat_{code}");
            let value = r.info_str(&field)?;
            Some(format!("{field}:{value}"))
        })
        .collect();
    if seen.is_empty() {
        return Vec::new();
    }
    let fix = "find the cause (memory, replica lag, disk); CONFIG RESETSTAT once fixed";
    let detail = seen.join(", ");
    vec![Finding::new(
        "error-stats",
        Severity::Warning,
        detail,
        WHY,
        fix,
    )]
}

fn busy_threshold(r: &Readings, cx: &Context) -> Vec<Finding> {
    const WHY: &str = "a script may block the server this long before it can be killed; \
                       renewals wait meanwhile, and a stall past the renewal slack loses leases";
    let threshold = r
        .config("busy-reply-threshold")
        .map(|v| v.trim().parse::<u64>().unwrap_or(0));
    let ms = match threshold {
        Ok(ms) => ms,
        Err(why) => return unknown("busy-threshold", "busy-reply-threshold", &why, WHY),
    };
    // A lease is renewed a third of its TTL after the last renewal by default:
    // two thirds of it are the slack a stall may eat before the lease is lost.
    let slack = cx.ttl * 2 / 3;
    if ms == 0 || Duration::from_millis(ms) < slack {
        return Vec::new();
    }
    let detail = format!(
        "busy-reply-threshold {ms} ms, not below the renewal slack ({} ms)",
        slack.as_millis()
    );
    let fix = "lower busy-reply-threshold below two thirds of the TTL, or lengthen the TTL";
    vec![Finding::new(
        "busy-threshold",
        Severity::Warning,
        detail,
        WHY,
        fix,
    )]
}

fn conditional_commands(r: &Readings, _: &Context) -> Vec<Finding> {
    offered(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::doctor::read::parse_info;

    fn cx() -> Context {
        Context {
            ttl: Duration::from_secs(30),
            waits_for_replicas: false,
            direct: true,
        }
    }

    fn with_info(text: &str) -> Readings {
        Readings {
            info: Ok(parse_info(text)),
            ..Readings::default()
        }
    }

    #[test]
    fn eviction_is_critical_only_with_a_limit_and_a_policy_that_evicts() {
        let r = with_info("maxmemory:67108864\nmaxmemory_policy:volatile-lru\n");
        assert_eq!(eviction(&r, &cx())[0].severity(), Severity::Critical);
        let r = with_info("maxmemory:0\nmaxmemory_policy:allkeys-lru\n");
        assert!(eviction(&r, &cx()).is_empty());
        let r = with_info("maxmemory:1\nmaxmemory_policy:noeviction\n");
        assert!(eviction(&r, &cx()).is_empty());
        let r = Readings::default();
        assert_eq!(eviction(&r, &cx())[0].severity(), Severity::Unknown);
    }

    #[test]
    fn a_check_that_cannot_read_says_unknown_never_nothing() {
        let r = Readings::default();
        // Every check but `conditional_commands`, the last, which only informs.
        for check in &FULL[..FULL.len() - 1] {
            let found = check(&r, &cx());
            assert!(
                found.iter().any(|f| f.severity() == Severity::Unknown),
                "{found:?}"
            );
        }
    }

    #[test]
    fn the_busy_threshold_warns_from_the_renewal_slack_on() {
        let mut r = Readings::default();
        r.config.insert("busy-reply-threshold", Ok("5000".into()));
        assert!(busy_threshold(&r, &cx()).is_empty());
        let short = Context {
            ttl: Duration::from_secs(6),
            ..cx()
        };
        assert_eq!(busy_threshold(&r, &short).len(), 1);
    }

    #[test]
    fn conditional_commands_are_named_by_server_and_version() {
        let mut r = Readings::default();
        r.hello.insert("server".into(), "valkey".into());
        r.hello.insert("version".into(), "9.1.2".into());
        let found = conditional_commands(&r, &cx());
        assert!(found[0].detail().contains("DELIFEQ"), "{found:?}");
        r.hello.insert("server".into(), "redis".into());
        r.hello.insert("version".into(), "7.0.15".into());
        assert!(conditional_commands(&r, &cx()).is_empty());
    }
}
