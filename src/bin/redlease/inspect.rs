//! `redlease inspect KEY [--json]`: which format holds a lock key, the time left on
//! it, its fence counter, and who holds it (`owners`). Also the one-line summary the status line and
//! `release --force` print.

use std::fmt::Write as _;

use redlease::ClientTag;
use serde_json::{Value, json};

use crate::args::{InspectArgs, server_name};
use crate::exit::Failure;
use crate::owners::{self, Owned};
use crate::probe::{self, Holder, Snapshot};

/// Runs `inspect`: prints what holds the key. Exit code 0 when the key could be
/// read, whatever holds it (also when nothing does).
pub(crate) fn inspect(args: &InspectArgs) -> Result<u8, Failure> {
    let url = args.server.one_server("inspect")?;
    let server = server_name(&url);
    let key = args.server.full_key(&args.key);
    let fence = probe::fence_key(&args.server.prefix);
    let (snapshot, owned) = probe::connect(&url)
        .and_then(|mut con| {
            let snapshot = probe::read(&mut con, &key, &fence)?;
            let owned = owners::owners(&mut con, None, &args.server.prefix, &snapshot.holder)?;
            Ok((snapshot, owned))
        })
        .map_err(|e| Failure::redis(&e, &server))?;
    if args.json {
        println!("{}", to_json(&key, &fence, &snapshot, &owned));
    } else {
        print!("{}", to_text(&key, &fence, &snapshot, &owned));
    }
    Ok(0)
}

/// A short description of the holder and its time left, for one line.
pub(crate) fn summary(snapshot: &Snapshot) -> String {
    let left = snapshot.ttl.map_or_else(String::new, |t| {
        format!(", {} left", seconds(t.as_secs_f64()))
    });
    match &snapshot.holder {
        Holder::Absent => "free".to_owned(),
        Holder::Token(_) => format!("held by a token lock{left}"),
        Holder::LegacyMillis(_) | Holder::LegacySeconds(_) => {
            let unit = if matches!(snapshot.holder, Holder::LegacyMillis(_)) {
                "ms"
            } else {
                "s"
            };
            let expiry = legacy_left(&snapshot.holder).map_or_else(String::new, expires);
            format!("held by a legacy timestamp lock ({unit}){expiry}{left}")
        }
        Holder::Reentrant(owners) => {
            format!(
                "held by a reentrant lock of {} owner(s){left}",
                owners.len()
            )
        }
        Holder::Semaphore { free, held, .. } => {
            format!("a semaphore: {held} permit(s) held, {free} free")
        }
        Holder::ReadWrite {
            mode,
            readers,
            writers,
        } => format!(
            "a read-write lock in {mode} mode: {} reader(s), {} writer(s){left}",
            readers.len(),
            writers.len()
        ),
        Holder::Other { kind, .. } => format!("holding a {kind} (no lock format){left}"),
    }
}

/// The text `inspect` prints: one `name: value` line per fact.
fn to_text(key: &str, fence_key: &str, s: &Snapshot, owned: &[Owned]) -> String {
    let mut out = format!("key:     {key}\n");
    let holder = match &s.holder {
        Holder::Absent => "none: the key does not exist".to_owned(),
        Holder::Token(value) if ClientTag::of_token(value).is_some() && value.ends_with('+') => {
            format!("token lock, value {value} (redlease; callers wait for its release)")
        }
        Holder::Token(value) => format!("token lock, value {value}"),
        Holder::LegacyMillis(at) => format!("legacy timestamp lock (ms), expiry {at}"),
        Holder::LegacySeconds(at) => format!("legacy timestamp lock (s), expiry {at}"),
        Holder::Reentrant(owners) => {
            let mut text = "reentrant hash (Redisson layout)".to_owned();
            for (owner, count) in owners {
                let _ = write!(text, "\n  owner {owner}, held {count} time(s)");
            }
            text
        }
        Holder::Semaphore {
            free,
            held,
            expired,
            ids,
        } => {
            let mut text = format!(
                "semaphore (Redisson's permit-expirable layout): {held} permit(s) held \
                 ({expired} past their lease), {free} free, {} in all",
                free.saturating_add_unsigned(*held)
            );
            for id in ids {
                let _ = write!(text, "\n  permit {id}");
            }
            text
        }
        Holder::ReadWrite {
            mode,
            readers,
            writers,
        } => {
            let mut text =
                format!("read-write lock (Redisson's RReadWriteLock layout), mode {mode}");
            for (field, count) in writers {
                let _ = write!(text, "\n  writer {field}, held {count} time(s)");
            }
            for (field, count) in readers {
                let _ = write!(text, "\n  reader {field}, held {count} time(s)");
            }
            text
        }
        Holder::Other { kind, value: None } => format!("unknown: a {kind}"),
        Holder::Other {
            kind,
            value: Some(v),
        } => format!("unknown: a {kind}, value {v}"),
    };
    let _ = writeln!(out, "format:  {holder}");
    out.push_str(&owners::to_text(owned));
    if s.queued > 0 {
        let _ = writeln!(
            out,
            "queue:   {} waiting (a fair lock, Redisson's RFairLock layout)",
            s.queued
        );
    }
    if let Some(left) = legacy_left(&s.holder) {
        let _ = writeln!(
            out,
            "expiry:  {} by this machine's clock",
            &expires(left)[2..]
        );
    }
    let ttl = match (&s.holder, s.ttl) {
        (Holder::Absent, _) => "-".to_owned(),
        (_, None) => "none (the key never expires by itself)".to_owned(),
        (_, Some(t)) => format!("{} left", seconds(t.as_secs_f64())),
    };
    let _ = writeln!(out, "ttl:     {ttl}");
    let fence = s.fence.as_deref().unwrap_or("absent");
    let _ = writeln!(out, "fence:   {fence} ({fence_key})");
    out
}

/// The JSON `inspect --json` prints, and `list --json` one per line.
pub(crate) fn to_json(key: &str, fence_key: &str, s: &Snapshot, owned: &[Owned]) -> Value {
    let (format, kind) = match &s.holder {
        Holder::Absent => ("absent", "none"),
        Holder::Token(_) => ("token", "string"),
        Holder::LegacyMillis(_) => ("legacy-ms", "string"),
        Holder::LegacySeconds(_) => ("legacy-s", "string"),
        Holder::Reentrant(_) => ("reentrant", "hash"),
        Holder::Semaphore { .. } => ("semaphore", "string"),
        Holder::ReadWrite { .. } => ("read-write", "hash"),
        Holder::Other { kind, .. } => ("other", kind.as_str()),
    };
    let mut out = json!({
        "key": key,
        "format": format,
        "type": kind,
        "pttl_ms": s.ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        "fence_key": fence_key,
        "queued": s.queued,
        "fence": s.fence.as_deref().map(|f| f.parse::<u64>().map_or_else(|_| json!(f), |n| json!(n))),
        "holders": owners::to_json(owned),
    });
    match &s.holder {
        Holder::Token(value)
        | Holder::Other {
            value: Some(value), ..
        } => out["value"] = json!(value),
        Holder::LegacyMillis(at) | Holder::LegacySeconds(at) => {
            out["expiry"] = json!(at);
            out["expires_in_ms"] = json!(legacy_left(&s.holder));
        }
        Holder::Reentrant(owners) => {
            let owners: Vec<Value> = owners
                .iter()
                .map(|(owner, count)| json!({ "owner": owner, "count": count }))
                .collect();
            out["owners"] = json!(owners);
        }
        Holder::Semaphore {
            free,
            held,
            expired,
            ids,
        } => {
            out["permits"] = json!(ids);
            out["free"] = json!(free);
            out["held"] = json!(held);
            out["expired"] = json!(expired);
        }
        Holder::ReadWrite {
            mode,
            readers,
            writers,
        } => {
            let list = |holds: &[(String, i64)]| -> Vec<Value> {
                holds
                    .iter()
                    .map(|(field, count)| json!({ "field": field, "count": count }))
                    .collect()
            };
            out["mode"] = json!(mode);
            out["readers"] = json!(list(readers));
            out["writers"] = json!(list(writers));
        }
        Holder::Absent | Holder::Other { value: None, .. } => {}
    }
    out
}

/// Milliseconds from now to a legacy lock's expiry (negative: expired), by this
/// machine's clock.
fn legacy_left(holder: &Holder) -> Option<i64> {
    let (expiry_ms, now_ms) = match *holder {
        Holder::LegacyMillis(at) => (i128::from(at), i128::from(probe::now_in(1))),
        Holder::LegacySeconds(at) => (i128::from(at) * 1000, i128::from(probe::now_in(1))),
        _ => return None,
    };
    i64::try_from(expiry_ms - now_ms).ok()
}

/// `, expires in 3.2s` or `, expired 3.2s ago`.
fn expires(left_ms: i64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "shown to 0.1 s")]
    let secs = left_ms.unsigned_abs() as f64 / 1000.0;
    if left_ms >= 0 {
        format!(", expires in {}", seconds(secs))
    } else {
        format!(", expired {} ago", seconds(secs))
    }
}

/// Seconds to one decimal: `12.3s`.
fn seconds(secs: f64) -> String {
    format!("{secs:.1}s")
}
