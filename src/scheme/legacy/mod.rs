//! The legacy timestamp scheme: the value is the lease's expiry as a decimal unix
//! timestamp, taken with `SETNX` and, once expired, taken over atomically.
//!
//! It shares keys with the `SETNX`/`GET`/`GETSET` clients already deployed (the
//! common Jedis-style code); see [`LegacyTimestamp`] for what it can and cannot
//! promise.
//!
//! Layout: this file is the backend; `options.rs` [`LegacyTimestamp`] and its parts;
//! `scripts.rs` its acquire and extend scripts (its release is the token's
//! compare-and-delete).

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use redis::{ErrorKind, RedisResult, Script};

use super::{Acquire, Backend, Keys, Request, acquired, send_acquire};
use crate::net::connection::Conn;
use crate::net::resp::Arg;
use crate::scheme::token::scripts::{TOKEN_RELEASE, TOKEN_RELEASE_SHARDED};
use crate::time::{MAX_TTL, ttl_millis};

mod options;
mod scripts;

pub use options::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, TimestampUnit};
use scripts::{LEGACY_ACQUIRE, LEGACY_EXTEND};

/// How many distinct keys get a "not a timestamp" warning; keys past that get none.
const WARN_KEYS: usize = 1024;

/// The legacy scheme's commands.
#[derive(Debug)]
pub(crate) struct LegacyBackend {
    opts: LegacyTimestamp,
    /// The last Redis `TIME` reading ([`Clock::Redis`] only).
    anchor: Mutex<Option<Anchor>>,
}

/// A Redis `TIME` reading and the local instant it corresponds to.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    redis_micros: u64,
    at: Instant,
}

static SCRIPTS: [&LazyLock<Script>; 4] = [
    &LEGACY_ACQUIRE,
    &TOKEN_RELEASE,
    &TOKEN_RELEASE_SHARDED,
    &LEGACY_EXTEND,
];

/// Keys already warned about, shared by every backend so per-call schemes warn once too.
static WARNED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

impl LegacyBackend {
    pub(crate) fn new(opts: LegacyTimestamp) -> Self {
        Self {
            opts,
            anchor: Mutex::new(None),
        }
    }

    /// Now in unix milliseconds from the configured clock, without a round trip.
    fn now_ms(&self) -> u64 {
        match (self.opts.get_clock(), *self.anchor.lock()) {
            (Clock::Redis, Some(a)) => {
                let elapsed = u64::try_from(a.at.elapsed().as_micros()).unwrap_or(u64::MAX);
                a.redis_micros.saturating_add(elapsed) / 1000
            }
            _ => wall_ms(),
        }
    }

    /// The server-side TTL for a value expiring at `expiry` (units), written at `now`.
    fn server_ttl(&self, expiry: u64, now: u64) -> u64 {
        self.opts
            .get_grace()
            .map_or(0, |g| server_ttl_ms(expiry, now, self.opts.get_unit(), g))
    }
}

impl Backend for LegacyBackend {
    fn new_value(&self, conn: &mut Conn, ttl: Duration) -> RedisResult<String> {
        if self.opts.get_clock() == Clock::Redis {
            let start = Instant::now();
            let (secs, micros): (u64, u64) = conn.run(|c| redis::cmd("TIME").query(c))?;
            let at = start + start.elapsed() / 2;
            let redis_micros = secs.saturating_mul(1_000_000).saturating_add(micros);
            *self.anchor.lock() = Some(Anchor { redis_micros, at });
        }
        Ok(expiry(self.now_ms(), ttl, self.opts.get_unit()).to_string())
    }

    fn acquire(
        &self,
        conn: &mut Conn,
        keys: &Keys,
        value: &str,
        req: Request,
    ) -> RedisResult<Acquire> {
        let unit = self.opts.get_unit();
        let Ok(ours) = value.parse::<u64>() else {
            return Err((ErrorKind::Client, "legacy lease value is not a timestamp").into());
        };
        // `now` is the clock reading `new_value` made the value from.
        let now = ours.saturating_sub(ttl_units(req.ttl, unit) + 1);
        let fence = keys.fence();
        let args = [
            Arg::from("EVALSHA"),
            LEGACY_ACQUIRE.get_hash().into(),
            2.into(),
            keys.lock.as_str().into(),
            fence.as_str().into(),
            value.into(),
            now.into(),
            self.server_ttl(ours, now).into(),
            (if req.fence { "1" } else { "0" }).into(),
        ];
        let (reply, acked) = send_acquire(conn, &SCRIPTS, &args, req.replicas)?;
        let n = match acquired(reply, req.fence, acked)? {
            Ok(won) => return Ok(won),
            Err(n) => n,
        };
        let Ok(left) = u64::try_from(n) else {
            if first_sighting(&keys.lock) {
                log::warn!(
                    "lock `{}` holds a value that is not a timestamp (another scheme's \
                     lock?); the legacy scheme waits for it to disappear",
                    keys.lock
                );
            }
            return Ok(Acquire::Busy {
                remaining: None,
                announces: false,
            });
        };
        let remaining = Duration::from_millis(left.saturating_mul(unit_ms(unit)));
        Ok(Acquire::Busy {
            remaining: Some(remaining),
            announces: false,
        })
    }

    // Release is the trait's compare-and-delete, shared with the token scheme: it
    // compares strings, whatever they hold, and its publish wakes token-scheme
    // waiters while a migration is under way.

    fn extend_cmd(
        &self,
        key: &str,
        value: &str,
        maybe: &[String],
        ttl: Duration,
    ) -> (redis::Cmd, String) {
        let now_ms = self.now_ms();
        let next = expiry(now_ms, ttl, self.opts.get_unit());
        let now = now_ms / unit_ms(self.opts.get_unit());
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(LEGACY_EXTEND.get_hash())
            .arg(1)
            .arg(key)
            .arg(value)
            .arg(next)
            .arg(self.server_ttl(next, now))
            .arg(maybe);
        (cmd, next.to_string())
    }

    fn publishes(&self) -> bool {
        // Deployed clients release with a bare `DEL` and never publish: a waiter
        // sleeping until a message would sleep until their expiry. Poll instead.
        false
    }

    fn scripts(&self) -> &'static [&'static LazyLock<Script>] {
        &SCRIPTS
    }
    fn refuses_min_hold(&self) -> Option<&'static str> {
        Some("the legacy timestamp scheme (its value is a wall-clock expiry)")
    }

    fn label(&self) -> &'static str {
        "legacy"
    }
}

/// This machine's wall clock in unix milliseconds (0 before 1970).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn unit_ms(unit: TimestampUnit) -> u64 {
    match unit {
        TimestampUnit::Millis => 1,
        TimestampUnit::Seconds => 1000,
    }
}

/// A TTL in whole units, rounded up.
fn ttl_units(ttl: Duration, unit: TimestampUnit) -> u64 {
    ttl_millis(ttl).div_ceil(unit_ms(unit))
}

/// The value a lease taken at `now_ms` with `ttl` stores: `now + ttl + 1` in `unit`,
/// the deployed clients' formula.
fn expiry(now_ms: u64, ttl: Duration, unit: TimestampUnit) -> u64 {
    (now_ms / unit_ms(unit))
        .saturating_add(ttl_units(ttl, unit))
        .saturating_add(1)
}

/// Milliseconds from `now` (units) until every client sees `expiry` as passed
/// (`expiry < now`, so one unit after it), plus `grace`; capped at [`MAX_TTL`].
fn server_ttl_ms(expiry: u64, now: u64, unit: TimestampUnit, grace: Duration) -> u64 {
    let left = expiry.saturating_sub(now).saturating_add(1);
    left.saturating_mul(unit_ms(unit))
        .saturating_add(ttl_millis(grace))
        .min(ttl_millis(MAX_TTL))
}

/// Whether `key` is seen holding a non-timestamp for the first time (and is
/// remembered, up to [`WARN_KEYS`] keys).
fn first_sighting(key: &str) -> bool {
    let mut warned = WARNED.lock();
    warned.len() < WARN_KEYS && warned.insert(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_follow_the_deployed_formula() {
        let ttl = Duration::from_secs(10);
        assert_eq!(
            expiry(1_700_000_000_123, ttl, TimestampUnit::Millis),
            1_700_000_010_124
        );
        assert_eq!(
            expiry(1_700_000_000_123, ttl, TimestampUnit::Seconds),
            1_700_000_011
        );
        // Part of a second rounds up: the lease never gets less than asked.
        let short = Duration::from_millis(1500);
        assert_eq!(expiry(5_999, short, TimestampUnit::Seconds), 5 + 2 + 1);
    }

    #[test]
    fn server_ttl_outlives_the_expiry_by_the_grace() {
        let g = Duration::from_secs(30);
        assert_eq!(
            server_ttl_ms(1_010, 1_000, TimestampUnit::Millis, g),
            11 + 30_000
        );
        assert_eq!(
            server_ttl_ms(12, 10, TimestampUnit::Seconds, g),
            3_000 + 30_000
        );
        let huge = server_ttl_ms(u64::MAX, 0, TimestampUnit::Seconds, Duration::MAX);
        assert_eq!(huge, ttl_millis(MAX_TTL));
    }

    #[test]
    fn each_key_is_warned_about_once() {
        let key = format!("legacy-warn-{}", uuid::Uuid::new_v4());
        assert!(first_sighting(&key));
        assert!(!first_sighting(&key));
    }

    proptest! {
        #[test]
        fn acquire_recovers_the_clock_reading(
            now_ms in 0u64..(1 << 50),
            ttl_ms in 1u64..(1 << 40),
            seconds in any::<bool>(),
        ) {
            let unit = if seconds { TimestampUnit::Seconds } else { TimestampUnit::Millis };
            let ttl = Duration::from_millis(ttl_ms);
            let value = expiry(now_ms, ttl, unit);
            let now = value - ttl_units(ttl, unit) - 1;
            prop_assert_eq!(now, now_ms / unit_ms(unit));
            // Deployed clients see it expired (`value < their now`) no earlier than
            // `ttl` after it was written.
            let first_expired_ms = (value + 1) * unit_ms(unit);
            prop_assert!(first_expired_ms >= now_ms + ttl_ms);
            // The server-side TTL never ends it before then.
            let server = server_ttl_ms(value, now, unit, Duration::ZERO);
            prop_assert!(now_ms + server >= first_expired_ms);
        }
    }
}
