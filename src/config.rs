//! Builders and options: [`LockClientBuilder`], [`LockOptions`], [`Scheme`], [`Renewal`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::cancel::CancelToken;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::lease::LeaseLost;
use crate::scheme::LegacyTimestamp;

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
/// The shortest TTL accepted: 1 millisecond (Redis `PX` counts whole milliseconds).
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// The longest TTL accepted: what `SET … PX` takes with room for the server's clock
/// (`PX` fails past `i64::MAX` milliseconds from now). About 146 million years.
pub const MAX_TTL: Duration = Duration::from_millis((i64::MAX as u64) / 2);

/// How a lock is stored in Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `SET key token NX PX ttl`, released and renewed by compare-on-token scripts.
    /// The wire format of redis-py's `Lock`, redsync, node-redlock and redlock-rs.
    #[default]
    Token,
    /// The `SETNX`/`GETSET` timestamp lock of older clients (value: the expiry as a
    /// decimal unix timestamp), for running beside them while migrating to
    /// [`Scheme::Token`]. Opt-in only; see [`LegacyTimestamp`] for its limits.
    LegacyTimestamp(LegacyTimestamp),
}

/// Whether a held lease is renewed in the background.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// Renew while the guard lives (the watchdog), within any `max_hold` /
    /// `max_renewals` bound.
    #[default]
    Auto,
    /// A fixed lease: it ends at its TTL unless extended by hand.
    None,
}

/// Options for one lock call, overriding the client's defaults.
///
/// Every option left unset takes the client's value (see [`LockClientBuilder`]).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use redlease::{LockOptions, Renewal};
/// let opts = LockOptions::new()
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_millis(500))
///     .renewal(Renewal::Auto)
///     .max_hold(Duration::from_secs(60))
///     .fencing(true);
/// assert_eq!(opts.get_ttl(), Some(Duration::from_secs(5)));
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct LockOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) renewal: Option<Renewal>,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) max_renewals: Option<u32>,
    pub(crate) fencing: Option<bool>,
    pub(crate) scheme: Option<Scheme>,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) on_lost: Option<LostCallback>,
}

/// A callback run on the renewal thread when a lease is lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LeaseLost) + Send + Sync>;

impl LockOptions {
    /// Options that all take the client's defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Lease time to live. Defaults to the client's `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Wait at most this long for a busy lock (`Duration::ZERO`: one attempt).
    /// Defaults to waiting until acquired.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
    /// Wait until this instant at most for a busy lock. Defaults to no deadline.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }
    /// Background renewal policy. Defaults to the client's `renewal`.
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.renewal = Some(renewal);
        self
    }
    /// Time between renewals. Defaults to the client's value (TTL / 3).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }
    /// Stop renewing this long after acquiring; the lease then runs out.
    /// Defaults to the client's `max_hold` (none).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
    /// Stop renewing after this many renewals. Defaults to no bound.
    pub fn max_renewals(mut self, count: u32) -> Self {
        self.max_renewals = Some(count);
        self
    }
    /// Take a fencing token with the lock. Defaults to the client's `fencing`.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = Some(on);
        self
    }
    /// Storage scheme. Defaults to the client's `scheme`.
    pub fn scheme(mut self, scheme: Scheme) -> Self {
        self.scheme = Some(scheme);
        self
    }
    /// A token that cancels the wait from another thread. Defaults to none.
    pub fn cancel(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }
    /// Run `f` on the renewal thread when the lease is lost. It must be quick:
    /// it delays every other lease's renewal while it runs. Defaults to none.
    pub fn on_lost(mut self, f: impl Fn(&LeaseLost) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }
    /// The TTL set here, if any.
    pub fn get_ttl(&self) -> Option<Duration> {
        self.ttl
    }
    /// The wait set here, if any.
    pub fn get_wait(&self) -> Option<Duration> {
        self.wait
    }
    /// The renewal policy set here, if any.
    pub fn get_renewal(&self) -> Option<Renewal> {
        self.renewal
    }
}

impl fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockOptions")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("deadline", &self.deadline)
            .field("renewal", &self.renewal)
            .field("renew_interval", &self.renew_interval)
            .field("max_hold", &self.max_hold)
            .field("max_renewals", &self.max_renewals)
            .field("fencing", &self.fencing)
            .field("scheme", &self.scheme)
            .field("cancel", &self.cancel)
            .field("on_lost", &self.on_lost.as_ref().map(|_| "Fn"))
            .finish()
    }
}

/// Builds a [`LockClient`]; made by [`LockClient::builder`].
///
/// Setters never fail; [`build`](Self::build) checks every value and returns
/// [`Error::Config`] for one out of range.
#[must_use]
pub struct LockClientBuilder {
    pub(crate) url: Result<ConnectionInfo, redis::RedisError>,
    pub(crate) key_prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) pool_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) renewal: Renewal,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) pubsub: bool,
    pub(crate) scheme: Scheme,
}

impl LockClientBuilder {
    pub(crate) fn new(url: impl IntoConnectionInfo) -> Self {
        Self {
            url: url.into_connection_info(),
            key_prefix: String::new(),
            ttl: DEFAULT_TTL,
            pool_size: DEFAULT_POOL_SIZE,
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
            scheme: Scheme::Token,
        }
    }
    /// Prepended to every lock key. Defaults to `""`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
    /// Lease time to live, between [`MIN_TTL`] and [`MAX_TTL`]. Defaults to 30 seconds.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Largest number of pooled connections. Defaults to 16.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }
    /// Time allowed to open a connection or take one from the pool. Defaults to 2 seconds.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// Time allowed for a reply. Defaults to 2 seconds.
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
    /// Default storage scheme. Defaults to [`Scheme::Token`].
    pub fn scheme(mut self, scheme: Scheme) -> Self {
        self.scheme = scheme;
        self
    }
    /// Checks the settings, connects (one `PING`), and starts the background threads.
    ///
    /// Waits at most the connect timeout plus the read timeout.
    ///
    /// # Errors
    /// [`Error::Config`] for a value out of range or a bad URL, [`Error::Redis`] when
    /// the server cannot be reached, [`Error::Spawn`] when a thread cannot start.
    pub fn build(self) -> Result<LockClient> {
        LockClient::from_builder(self)
    }

    pub(crate) fn validate(&self) -> Result<()> {
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
        Ok(())
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("server", &crate::pool::Redacted(self.url.as_ref().ok()))
            .field("key_prefix", &self.key_prefix)
            .field("ttl", &self.ttl)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("backoff", &(self.backoff_min, self.backoff_max))
            .field("renewal", &self.renewal)
            .field("renew_interval", &self.renew_interval)
            .field("max_hold", &self.max_hold)
            .field("fencing", &self.fencing)
            .field("pubsub", &self.pubsub)
            .field("scheme", &self.scheme)
            .finish()
    }
}

/// Checks a TTL against what Redis `PX` accepts.
pub(crate) fn check_ttl(option: &'static str, ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::config(option, "must be at least 1 ms"));
    }
    if ttl > MAX_TTL {
        return Err(Error::config(option, "exceeds what redis `PX` accepts"));
    }
    Ok(())
}

/// A renewal interval must be shorter than the TTL it renews, or the lease lapses.
pub(crate) fn check_interval(every: Duration, ttl: Duration) -> Result<()> {
    if every.is_zero() {
        return Err(Error::config("renew_interval", "must be above zero"));
    }
    if every >= ttl {
        return Err(Error::config(
            "renew_interval",
            "must be shorter than the ttl",
        ));
    }
    Ok(())
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
        ];
        for (b, name) in cases {
            match b.validate() {
                Err(Error::Config { option, .. }) => assert_eq!(option, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn ttl_bounds_are_inclusive() {
        check_ttl("ttl", MIN_TTL).unwrap();
        check_ttl("ttl", MAX_TTL).unwrap();
        assert!(check_ttl("ttl", MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn debug_never_prints_the_password() {
        let b = LockClientBuilder::new("redis://user:hunter2@127.0.0.1:6379/3");
        let text = format!("{b:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:6379"), "{text}");
    }
}
