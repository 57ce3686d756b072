//! The lease clock: deadlines as nanoseconds since one process-wide origin, and the
//! validity arithmetic every lease shares.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// The shortest TTL accepted: 3 milliseconds, the shortest whole-millisecond TTL
/// (Redis `PX` counts whole milliseconds) that leaves any validity past the drift
/// allowance (2 ms + 1 %). A shorter one could never be handed over: a grant is
/// refused once its validity has ended.
pub const MIN_TTL: Duration = Duration::from_millis(3);
/// The longest TTL accepted: what `SET … PX` takes with room for the server's clock
/// (`PX` fails past `i64::MAX` milliseconds from now). About 146 million years.
pub const MAX_TTL: Duration = Duration::from_millis((i64::MAX as u64) / 2);

/// The origin of all lease clocks: deadlines are stored as nanoseconds since it.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds from [`EPOCH`] to `t` (0 for instants before it).
pub(crate) fn to_nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// The instant `nanos` after [`EPOCH`], saturating far in the future.
pub(crate) fn from_nanos(nanos: u64) -> Instant {
    let far = Duration::from_secs(u64::from(u32::MAX));
    EPOCH
        .checked_add(Duration::from_nanos(nanos))
        .unwrap_or_else(|| *EPOCH + far)
}

/// The clock-drift allowance for a TTL: 2 ms plus 1 % (the Redlock paper's factor).
pub(crate) fn drift(ttl: Duration) -> Duration {
    Duration::from_millis(2) + ttl / 100
}

/// How long a lease is valid after `sent`: `sent + ttl - drift`, where `sent` is the
/// instant before the command that set the TTL left this process.
pub(crate) fn validity_end(sent: Instant, ttl: Duration) -> Instant {
    let valid = ttl.saturating_sub(drift(ttl));
    sent.checked_add(valid)
        .unwrap_or_else(|| from_nanos(u64::MAX))
}

/// Whether a grant whose command left at `sent` with `ttl` may still be handed to
/// its caller now: its validity ([`validity_end`]) has not ended. This is the
/// Redlock paper's rule (`ttl - elapsed - drift` must be positive), applied to
/// every topology, to a lock handed over by a releasing guard, and to every
/// primitive. The drift allowance is the margin: a reply that comes within it of
/// the TTL's end is refused too, since the server may already be expiring the key.
pub(crate) fn in_time(sent: Instant, ttl: Duration) -> bool {
    Instant::now() < validity_end(sent, ttl)
}

/// Whole milliseconds of a TTL, as `PX` takes them.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validity_is_ttl_minus_drift() {
        let now = Instant::now();
        let end = validity_end(now, Duration::from_secs(10));
        assert_eq!(end - now, Duration::from_millis(10_000 - 100 - 2));
    }

    #[test]
    fn a_ttl_below_the_drift_is_never_valid() {
        let now = Instant::now();
        assert_eq!(validity_end(now, Duration::from_millis(1)), now);
    }

    #[test]
    fn the_shortest_ttl_leaves_some_validity() {
        let now = Instant::now();
        assert!(validity_end(now, MIN_TTL) > now);
        assert_eq!(
            validity_end(now, MIN_TTL.saturating_sub(Duration::from_millis(1))),
            now
        );
    }

    #[test]
    fn a_grant_is_in_time_only_before_its_validity_ends() {
        let ttl = Duration::from_secs(1);
        assert!(in_time(Instant::now(), ttl));
        let long_ago = Instant::now().checked_sub(ttl.saturating_sub(drift(ttl)));
        assert!(long_ago.is_none_or(|sent| !in_time(sent, ttl)));
    }

    proptest! {
        #[test]
        fn validity_never_exceeds_ttl(ms in 1u64..(i64::MAX as u64 / 2)) {
            let now = Instant::now();
            let ttl = Duration::from_millis(ms);
            let end = validity_end(now, ttl);
            prop_assert!(end >= now);
            prop_assert!(end.saturating_duration_since(now) < ttl);
        }

        #[test]
        fn nanos_round_trip(ns in 0u64..(1u64 << 62)) {
            prop_assert_eq!(to_nanos(from_nanos(ns)), ns);
        }
    }
}
