//! The options of the legacy timestamp scheme: [`LegacyTimestamp`] and its parts.

use std::time::Duration;

/// Default [`LegacyTimestamp::grace`]: 30 seconds.
pub const DEFAULT_LEGACY_GRACE: Duration = Duration::from_secs(30);

/// Options of [`Scheme::LegacyTimestamp`](crate::Scheme::LegacyTimestamp): the
/// `SETNX`/`GETSET` timestamp lock that older clients (the common Jedis-style code)
/// still use, for running redlease beside them on the same keys while migrating.
///
/// The value under the key is the lease's expiry as a decimal unix timestamp in the
/// configured [`unit`](Self::unit): `now + ttl + 1`, exactly what those clients write
/// and parse. redlease takes a free key with `SETNX`; a value whose expiry has passed
/// (`stored < now`) is taken over in one Lua script that does what their `GET` +
/// `GETSET` does in one atomic step, so a deployed client racing for the same expired
/// value can never also win. Unlike the deployed clients, release is a
/// compare-and-delete and renewal a compare-and-set on the exact value redlease
/// wrote, so redlease never deletes or extends a lock a deployed client took over.
/// With a [`grace`](Self::grace) (the default) every value redlease writes also gets a
/// server-side TTL that far past its expiry, so an abandoned key does not live
/// forever; a deployed client's `GETSET` drops it again, which is fine.
///
/// A value that is not an integer timestamp (a token from the token scheme, a
/// hash, …) is treated as held: never overwritten, waited for until it disappears or
/// the caller's wait runs out, and logged once per key with `log::warn!`.
///
/// Waiters poll with the client's jittered backoff, bounded by the holder's stored
/// expiry: deployed clients never publish a release, so a pub/sub wait could sleep
/// until the holder's expiry. Release still publishes on the key's channel, which
/// wakes token-scheme waiters during a migration. Fencing tokens work, but only
/// redlease clients take them; deployed clients do not increment the counter.
///
/// # What this scheme cannot guarantee
///
/// Prefer [`Scheme::Token`](crate::Scheme::Token) for any key all of whose clients run
/// redlease: there the server's own TTL ends a lease and no client clock is involved,
/// each value is a random UUID, and releases wake waiters. Here:
///
/// - **All clocks must agree.** Expiry is decided by comparing the stored timestamp
///   with the reader's clock. A client whose clock runs ahead by *s* takes an unexpired
///   lock over *s* early; a holder whose clock runs behind is overtaken *s* early. No
///   compare-and-delete can fix that. [`Clock::Redis`] makes redlease clients agree
///   with each other, not with deployed clients on their local clocks.
/// - **A paused holder is overtaken.** A holder stopped (GC pause, `SIGSTOP`, a slow
///   disk) past its expiry loses the lock to the next client; it notices at its next
///   renewal or release ([`Release::Taken`]), and [`LockGuard::is_held`] turns false
///   when its local validity ends. Fencing tokens protect downstream writes only
///   among redlease clients.
/// - **Equal values are indistinguishable.** redlease recognises its lease by the
///   timestamp it wrote, and two writers whose `now + ttl` agree write the same string.
///   A takeover always writes a later value than the expired one, so a clash needs the
///   key deleted under a live lease (a deployed client's unconditional `DEL`) and
///   re-taken with the very same expiry, or an acquire whose reply was lost (redlease
///   then deletes its value if present) racing a writer of the same expiry: same
///   millisecond, much likelier with [`TimestampUnit::Seconds`]. A late release or
///   renewal would then act on the other client's lock. Tokens are 122 random bits.
/// - **A losing `GETSET` clobbers.** In the deployed clients' protocol a client that
///   loses a takeover race has still written its own value with `GETSET`. If redlease
///   won that race, its next renewal or release finds a foreign value and reports the
///   lease lost ([`Release::Taken`]) though nobody else holds it; the key then lives
///   until the clobbering timestamp passes.
/// - [`Clock::Redis`] costs one `TIME` round trip per acquire attempt.
///
/// # Examples
/// ```no_run
/// # fn main() -> redlease::Result<()> {
/// use std::time::Duration;
/// use redlease::{Clock, LegacyTimestamp, LockClient, Scheme, TimestampUnit};
/// let legacy = LegacyTimestamp::new()
///     .unit(TimestampUnit::Millis)
///     .clock(Clock::Local)
///     .grace(Some(Duration::from_secs(30)));
/// let client = LockClient::builder("redis://127.0.0.1/")
///     .scheme(Scheme::LegacyTimestamp(legacy))
///     .build()?;
/// let guard = client.lock("invoice:42")?; // SETNX invoice:42 <now ms + ttl + 1>
/// guard.unlock()?;
/// # Ok(()) }
/// ```
///
/// [`LockGuard::is_held`]: crate::LockGuard::is_held
/// [`Release::Taken`]: crate::Release::Taken
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct LegacyTimestamp {
    unit: TimestampUnit,
    clock: Clock,
    grace: Option<Duration>,
}

/// The unit of a [`LegacyTimestamp`] value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampUnit {
    /// Unix milliseconds, as Jedis-style clients write (`System.currentTimeMillis()`).
    #[default]
    Millis,
    /// Unix seconds, as the `SETNX` pattern in the Redis docs and many PHP or shell
    /// clients write. TTLs are rounded up to whole seconds.
    Seconds,
}

/// Which clock a [`LegacyTimestamp`] lease reads "now" from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Clock {
    /// This machine's wall clock, as deployed clients do.
    #[default]
    Local,
    /// The Redis server's `TIME`, read once per acquire attempt on the same
    /// connection. Renewals cannot afford a round trip: they use the last `TIME`
    /// reading plus the local monotonic time elapsed since the middle of its round
    /// trip (error: half a round trip, within the lease's drift allowance).
    Redis,
}

impl LegacyTimestamp {
    /// Milliseconds, the local clock, and a 30-second grace.
    pub fn new() -> Self {
        Self::default()
    }
    /// The unit of the stored timestamp; must match the deployed clients'.
    /// Defaults to [`TimestampUnit::Millis`].
    pub fn unit(mut self, unit: TimestampUnit) -> Self {
        self.unit = unit;
        self
    }
    /// Where "now" comes from. Defaults to [`Clock::Local`].
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
    /// Server-side TTL past the expiry, set on every value redlease writes so that an
    /// abandoned key disappears; `None` writes no TTL, like the deployed clients.
    ///
    /// The TTL is counted by the server from the write, so it never ends a lease
    /// early. 30 seconds is 300 times the deployed clients' 100 ms poll, so they
    /// take an expired value over by `GETSET` long before it disappears, and short
    /// enough that a crashed holder's key stops blocking token-scheme clients (which
    /// cannot take over a timestamp) within half a minute of its expiry during a
    /// migration. Defaults to `Some(30 s)` ([`DEFAULT_LEGACY_GRACE`]).
    pub fn grace(mut self, grace: Option<Duration>) -> Self {
        self.grace = grace;
        self
    }
    /// The timestamp unit.
    pub fn get_unit(&self) -> TimestampUnit {
        self.unit
    }
    /// The clock.
    pub fn get_clock(&self) -> Clock {
        self.clock
    }
    /// The grace period.
    pub fn get_grace(&self) -> Option<Duration> {
        self.grace
    }
}

impl Default for LegacyTimestamp {
    fn default() -> Self {
        Self {
            unit: TimestampUnit::Millis,
            clock: Clock::Local,
            grace: Some(DEFAULT_LEGACY_GRACE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_have_documented_defaults() {
        let o = LegacyTimestamp::new();
        assert_eq!(o, LegacyTimestamp::default());
        assert_eq!(o.get_unit(), TimestampUnit::Millis);
        assert_eq!(o.get_clock(), Clock::Local);
        assert_eq!(o.get_grace(), Some(DEFAULT_LEGACY_GRACE));
        let o = o
            .unit(TimestampUnit::Seconds)
            .clock(Clock::Redis)
            .grace(None);
        assert_eq!(
            (o.get_unit(), o.get_clock(), o.get_grace()),
            (TimestampUnit::Seconds, Clock::Redis, None)
        );
    }
}
