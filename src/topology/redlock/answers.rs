//! Reading an acquire's answers from every node: a majority that came too late,
//! how long a busy lock may stay busy, and the random pause between rounds.

use std::time::Duration;

use super::ballot::{Count, Vote};
use super::quorum::Quorum;
use crate::error::{NodeFailure, Operation, Result};
use crate::scheme::Acquire;
use crate::topology::io::timed_out;

/// The longest random pause before another round, after a failed round or a split
/// vote (several callers holding a minority each).
pub(super) const RETRY_MAX: Duration = Duration::from_millis(50);

/// An acquire whose majority came after its validity ended: no grant counts, each
/// granting node is a failure (too late), beside the nodes that failed.
pub(super) fn late(
    count: Count,
    answers: Vec<Result<Acquire>>,
    quorum: &Quorum,
    key: &str,
    wait: Duration,
) -> (Count, Vec<NodeFailure>) {
    let mut late = Count::new(count.n);
    let mut failures = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        let error = match answer {
            Ok(Acquire::Acquired { .. }) => {
                timed_out("granted after the lease's validity had ended")
            }
            Ok(Acquire::Busy { .. }) => {
                late.add(Vote::No);
                continue;
            }
            Err(e) => e,
        };
        late.add(Vote::Failed);
        failures.push(quorum.failure(i, error, Operation::Acquire, key, wait));
    }
    (late, failures)
}

/// How long a busy lock may stay busy, from `held`, the remaining TTL of each
/// node found held (`None`: unknown) by a call counted in `count` (the nodes not
/// among them counted free). When the held nodes are a majority, someone may hold
/// the lock: it is ours to take at the earliest once enough of them expire to leave
/// a majority free. When they are not (a split vote, each caller holding a
/// minority), a short random pause, as Redlock prescribes.
pub(super) fn remaining(count: &Count, mut held: Vec<Option<Duration>>) -> Option<Duration> {
    let q = count.quorum();
    if held.len() < q {
        return Some(jitter(RETRY_MAX));
    }
    // Free for us now: the nodes that were not held; needed: `q` of all.
    let needed = q - (count.n - held.len());
    held.sort_by_key(|r| r.unwrap_or(Duration::MAX));
    held.get(needed - 1).copied().flatten()
}

/// The remaining TTL of each node an acquire's `answers` found busy.
pub(super) fn busy(answers: &[Result<Acquire>]) -> Vec<Option<Duration>> {
    answers
        .iter()
        .filter_map(|a| match a {
            Ok(Acquire::Busy { remaining, .. }) => Some(*remaining),
            _ => None,
        })
        .collect()
}

/// A pause drawn uniformly from 1 ms to `max`.
pub(super) fn jitter(max: Duration) -> Duration {
    let max = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1000);
    Duration::from_micros(fastrand::u64(1000..=max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(n: usize) -> Count {
        Count::new(n)
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_held_majority_is_free_once_enough_holders_expire_to_free_one() {
        // 2 of 3 held: the first to expire frees a majority with the free node.
        assert_eq!(
            remaining(&count(3), vec![Some(30 * S), Some(10 * S)]),
            Some(10 * S)
        );
        // 3 of 3 held: two must expire.
        let all = vec![Some(5 * S), Some(30 * S), Some(10 * S)];
        assert_eq!(remaining(&count(3), all), Some(10 * S));
        // 4 of 5 held: two must expire, one of them without a TTL.
        let four = vec![None, Some(2 * S), None, None];
        assert_eq!(remaining(&count(5), four), None);
        let four = vec![None, Some(2 * S), Some(7 * S), None];
        assert_eq!(remaining(&count(5), four), Some(7 * S));
    }

    #[test]
    fn a_minority_held_is_a_split_vote_retried_after_a_short_pause() {
        for held in [vec![], vec![Some(30 * S)]] {
            let pause = remaining(&count(3), held).unwrap();
            assert!(pause >= Duration::from_millis(1) && pause <= RETRY_MAX);
        }
    }
}
