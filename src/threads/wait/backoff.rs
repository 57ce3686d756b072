//! The polling step of a waiting caller: exponential from the client's minimum to its
//! maximum, with jitter.

use std::time::Duration;

/// The upper end of backoff step `step`: `min` doubled `step` times, at most `max`.
pub(super) fn backoff_cap(min: Duration, max: Duration, step: u32) -> Duration {
    min.saturating_mul(1 << step.min(16)).min(max).max(min)
}

/// A delay drawn uniformly from `lo..=hi` (full jitter); `lo` when `hi < lo`.
pub(super) fn jitter(lo: Duration, hi: Duration) -> Duration {
    let lo = u64::try_from(lo.as_micros()).unwrap_or(u64::MAX);
    let hi = u64::try_from(hi.as_micros()).unwrap_or(u64::MAX).max(lo);
    Duration::from_micros(fastrand::u64(lo..=hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_from_the_minimum_up_to_the_maximum() {
        let caps: Vec<u64> = (0..6)
            .map(|step| u64::try_from(backoff_cap(4 * MS, 50 * MS, step).as_millis()).unwrap())
            .collect();
        assert_eq!(caps, [4, 8, 16, 32, 50, 50]);
    }

    #[test]
    fn backoff_survives_huge_steps_and_durations() {
        assert_eq!(backoff_cap(4 * MS, 200 * MS, u32::MAX), 200 * MS);
        let huge = Duration::from_secs(u64::MAX);
        assert_eq!(backoff_cap(huge, huge, 40), huge);
        assert_eq!(jitter(huge, huge), Duration::from_micros(u64::MAX));
    }

    proptest! {
        #[test]
        fn jittered_delays_stay_within_the_step(
            min_us in 1u64..1_000_000,
            extra_us in 0u64..1_000_000,
            step in 0u32..64,
        ) {
            let min = Duration::from_micros(min_us);
            let max = min + Duration::from_micros(extra_us);
            let cap = backoff_cap(min, max, step);
            prop_assert!(min <= cap && cap <= max);
            let delay = jitter(min, cap);
            prop_assert!(min <= delay && delay <= cap);
        }
    }
}
