//! `redlease inspect KEY [--json]`: which format holds a lock key, the time left on
//! it, its fence counter, and who holds it (`owners`), as the library's
//! `LockInfo::read` finds them. Also the one-line summary the status line and
//! `release --force` print.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use redlease::{LockFormat, LockInfo, TimestampUnit};
use serde_json::{Value, json};

use crate::args::InspectArgs;
use crate::exit::Failure;
use crate::owners::{self, is_writer};
use crate::probe;
use crate::server::server_name;

/// Runs `inspect`: prints what holds the key. Exit code 0 when the key could be
/// read, whatever holds it (also when nothing does).
pub(crate) fn inspect(args: &InspectArgs) -> Result<u8, Failure> {
    let url = args.server.one_server("inspect")?;
    let server = server_name(&url);
    let mut con = probe::connect(&url).map_err(|e| Failure::redis(&e, &server))?;
    let info = LockInfo::read(&mut con, &args.server.prefix, &args.key)
        .map_err(|e| Failure::from_lib(&e, &server))?;
    if args.json {
        println!("{}", to_json(&info));
    } else {
        print!("{}", to_text(&info));
    }
    Ok(0)
}

/// A short description of the holder and its time left, for one line.
pub(crate) fn summary(info: &LockInfo) -> String {
    let left = info.ttl().map_or_else(String::new, |t| {
        format!(", {} left", seconds(t.as_secs_f64()))
    });
    let holders = info.holders();
    match info.format() {
        LockFormat::Free => "free".to_owned(),
        LockFormat::Token if info.kept() => {
            format!("kept for its minimum hold (its holder released it){left}")
        }
        LockFormat::Token => format!("held by a token lock{left}"),
        LockFormat::LegacyTimestamp => {
            let expiry = legacy_left(info).map_or_else(String::new, expires);
            format!(
                "held by a legacy timestamp lock ({}){expiry}{left}",
                unit(info)
            )
        }
        LockFormat::Reentrant => {
            format!(
                "held by a reentrant lock of {} owner(s){left}",
                holders.len()
            )
        }
        LockFormat::Semaphore => format!(
            "a semaphore: {} permit(s) held, {} free",
            info.permits_held(),
            info.free_permits().unwrap_or(0)
        ),
        LockFormat::ReadWrite => {
            let writers = holders.iter().filter(|h| is_writer(h.value())).count();
            format!(
                "a read-write lock in {} mode: {} reader(s), {writers} writer(s){left}",
                info.mode().unwrap_or_default(),
                holders.len() - writers,
            )
        }
        _ => format!("holding a {} (no lock format){left}", info.redis_type()),
    }
}

/// The text `inspect` prints: one `name: value` line per fact.
fn to_text(info: &LockInfo) -> String {
    let mut out = format!("key:     {}\n", info.key());
    let holders = info.holders();
    let value = info.value().unwrap_or_default();
    let holder = match info.format() {
        LockFormat::Free => "none: the key does not exist".to_owned(),
        LockFormat::Token if info.kept() => format!(
            "token lock, value {value} (redlease; released, kept for its minimum hold \
             until the key expires)"
        ),
        LockFormat::Token if info.waited() => {
            format!("token lock, value {value} (redlease; callers wait for its release)")
        }
        LockFormat::Token => format!("token lock, value {value}"),
        LockFormat::LegacyTimestamp => {
            format!("legacy timestamp lock ({}), expiry {value}", unit(info))
        }
        LockFormat::Reentrant => {
            let mut text = "reentrant hash (Redisson layout)".to_owned();
            for h in holders {
                let _ = write!(text, "\n  owner {}, held {} time(s)", h.value(), h.holds());
            }
            text
        }
        LockFormat::Semaphore => {
            let (free, held) = (info.free_permits().unwrap_or(0), info.permits_held());
            let mut text = format!(
                "semaphore (Redisson's permit-expirable layout): {held} permit(s) held \
                 ({} past their lease), {free} free, {} in all",
                info.permits_expired(),
                free.saturating_add_unsigned(held)
            );
            for h in holders {
                let _ = write!(text, "\n  permit {}", h.value());
            }
            text
        }
        LockFormat::ReadWrite => {
            let mut text = format!(
                "read-write lock (Redisson's RReadWriteLock layout), mode {}",
                info.mode().unwrap_or_default()
            );
            for h in holders.iter().filter(|h| is_writer(h.value())) {
                let _ = write!(text, "\n  writer {}, held {} time(s)", h.value(), h.holds());
            }
            for h in holders.iter().filter(|h| !is_writer(h.value())) {
                let _ = write!(text, "\n  reader {}, held {} time(s)", h.value(), h.holds());
            }
            text
        }
        _ => match info.value() {
            None => format!("unknown: a {}", info.redis_type()),
            Some(v) => format!("unknown: a {}, value {v}", info.redis_type()),
        },
    };
    let _ = writeln!(out, "format:  {holder}");
    out.push_str(&owners::to_text(&owners::owned(info)));
    if info.queued() > 0 {
        let _ = writeln!(
            out,
            "queue:   {} waiting (a fair lock, Redisson's RFairLock layout)",
            info.queued()
        );
    }
    if let Some(left) = legacy_left(info) {
        let _ = writeln!(
            out,
            "expiry:  {} by this machine's clock",
            &expires(left)[2..]
        );
    }
    let ttl = match (info.format(), info.ttl()) {
        (LockFormat::Free, _) => "-".to_owned(),
        (_, None) => "none (the key never expires by itself)".to_owned(),
        (_, Some(t)) => format!("{} left", seconds(t.as_secs_f64())),
    };
    let _ = writeln!(out, "ttl:     {ttl}");
    let fence = info
        .fence()
        .map_or_else(|| "absent".to_owned(), |f| f.to_string());
    let _ = writeln!(out, "fence:   {fence} ({})", info.fence_key());
    out
}

/// The JSON `inspect --json` prints, and `list --json` one per line.
pub(crate) fn to_json(info: &LockInfo) -> Value {
    let (format, kind) = match info.format() {
        LockFormat::Free => ("absent", "none"),
        LockFormat::Token => ("token", "string"),
        LockFormat::LegacyTimestamp if unit(info) == "ms" => ("legacy-ms", "string"),
        LockFormat::LegacyTimestamp => ("legacy-s", "string"),
        LockFormat::Reentrant => ("reentrant", "hash"),
        LockFormat::Semaphore => ("semaphore", "string"),
        LockFormat::ReadWrite => ("read-write", "hash"),
        _ => ("other", info.redis_type()),
    };
    let mut out = json!({
        "key": info.key(),
        "format": format,
        "type": kind,
        "pttl_ms": info.ttl().map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        "fence_key": info.fence_key(),
        "queued": info.queued(),
        "fence": info.fence(),
        "holders": owners::to_json(&owners::owned(info)),
    });
    let holds = |writers: Option<bool>, name: &str| -> Vec<Value> {
        info.holders()
            .iter()
            .filter(|h| writers.is_none_or(|w| is_writer(h.value()) == w))
            .map(|h| json!({ name: h.value(), "count": h.holds() }))
            .collect()
    };
    match info.format() {
        LockFormat::Token => {
            out["value"] = json!(info.value());
            if info.kept() {
                out["kept"] = json!(true);
            }
        }
        LockFormat::LegacyTimestamp => {
            out["expiry"] = json!(info.value().and_then(|v| v.parse::<u64>().ok()));
            out["expires_in_ms"] = json!(legacy_left(info));
        }
        LockFormat::Reentrant => out["owners"] = json!(holds(None, "owner")),
        LockFormat::Semaphore => {
            let ids: Vec<&str> = info.holders().iter().map(redlease::Holder::value).collect();
            out["permits"] = json!(ids);
            out["free"] = json!(info.free_permits());
            out["held"] = json!(info.permits_held());
            out["expired"] = json!(info.permits_expired());
        }
        LockFormat::ReadWrite => {
            out["mode"] = json!(info.mode());
            out["readers"] = json!(holds(Some(false), "field"));
            out["writers"] = json!(holds(Some(true), "field"));
        }
        LockFormat::Free => {}
        _ => {
            if let Some(value) = info.value() {
                out["value"] = json!(value);
            }
        }
    }
    out
}

/// `ms` or `s`: a legacy timestamp's unit.
fn unit(info: &LockInfo) -> &'static str {
    match info.timestamp_unit() {
        Some(TimestampUnit::Seconds) => "s",
        _ => "ms",
    }
}

/// Milliseconds from now to a legacy lock's expiry (negative: expired), by this
/// machine's clock.
fn legacy_left(info: &LockInfo) -> Option<i64> {
    let at = i128::from(info.value()?.parse::<u64>().ok()?);
    let expiry_ms = match info.timestamp_unit()? {
        TimestampUnit::Seconds => at * 1000,
        _ => at,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(expiry_ms - i128::try_from(now.as_millis()).ok()?).ok()
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
