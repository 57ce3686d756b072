//! The renewal thread's bookkeeping: each lease's renewal policy and schedule, and
//! the queue that keeps the leases in due order.
//!
//! A lease falls due on a grid of its interval (multiples of it since the lease
//! clock's epoch), so after their first renewal all leases with one interval are
//! renewed in the same tick, however their acquisitions were spread. The epoch is
//! the process's, so where a lock falls between two ticks depends on what the
//! process did before: a lease is due on the first tick at least half an interval
//! after its acquisition (or renewal), never on one that follows it closely.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lease::{LeaseState, LossReason};
use crate::time::{from_nanos, to_nanos};

/// Leases due within this share of their interval are renewed with the ones due now.
pub(super) const EARLY_SHARE: u32 = 4;
/// The queue is swept of released leases once it holds this many, and after that
/// each time it has doubled since the last sweep.
const MIN_SWEEP: usize = 1024;

/// A lease as the renewal thread keeps it.
pub(crate) struct Lease {
    pub(super) state: Arc<LeaseState>,
    /// Still renewed? False for `Renewal::None` and once a bound was reached: the
    /// thread then only reports the end of the validity.
    pub(super) renew: bool,
    pub(super) interval: Duration,
    pub(super) hold_until: Option<Instant>,
    pub(super) renewals_left: Option<u32>,
    /// Why the lease will end if nothing renews it any more.
    pub(super) ends_by: LossReason,
    pub(super) due: Instant,
}

impl Lease {
    pub(crate) fn new(
        state: Arc<LeaseState>,
        renew: bool,
        interval: Duration,
        hold_until: Option<Instant>,
        renewals_left: Option<u32>,
        acquired: Instant,
    ) -> Self {
        let ends_by = if renew {
            LossReason::Unreachable
        } else {
            LossReason::TtlElapsed
        };
        let mut lease = Self {
            state,
            renew,
            interval,
            hold_until,
            renewals_left,
            ends_by,
            due: acquired,
        };
        lease.due = lease.schedule(acquired);
        lease
    }

    /// The TTL for the next renewal (clipped to the hold bound, and at least what
    /// is left of the minimum hold), or `None` when the
    /// lease must not be renewed any more.
    pub(super) fn next_ttl(&self, now: Instant) -> Option<Duration> {
        if !self.renew || self.renewals_left == Some(0) {
            return None;
        }
        let ttl = self.state.ttl();
        let ttl = match self.hold_until {
            Some(end) => ttl.min(end.saturating_duration_since(now)),
            None => ttl,
        };
        // Never shorter than the minimum hold's rest: a holder that dies inside
        // it leaves the key until the hold's end (`min_hold` ≤ `max_hold`).
        let ttl = ttl.max(self.state.min_hold_left(now).unwrap_or_default());
        (ttl >= Duration::from_millis(1)).then_some(ttl)
    }

    /// When to look at the lease next, after a renewal (or acquire) sent at `sent`: on
    /// the interval's grid ([`grid_due`]), but never past 3/4 of the way to the end of
    /// the validity, so an interval close to the TTL, or an `extend` to a shorter TTL,
    /// still renews in time. A lease no longer renewed is looked at when its validity ends.
    pub(super) fn schedule(&self, sent: Instant) -> Instant {
        let end = self.state.valid_until_nanos();
        if !self.renew {
            return from_nanos(end);
        }
        // The same in lease-clock nanoseconds, a few integer operations (this runs
        // on every acquire); an instant at or before the clock's epoch, which
        // `to_nanos` cannot tell apart, takes the general path.
        let at = to_nanos(sent);
        if let Ok(step) = u64::try_from(self.interval.as_nanos())
            && at > 0
            && step > 0
            && let Some(due) = at
                .checked_add(step.div_ceil(2))
                .and_then(|half| half.div_ceil(step).checked_mul(step))
        {
            let latest = at + end.saturating_sub(at) / 4 * 3;
            return from_nanos(due.min(latest));
        }
        let end = from_nanos(end);
        let latest = sent + end.saturating_duration_since(sent) / 4 * 3;
        grid_due(sent, self.interval).min(latest)
    }

    /// Past its `max_hold` / `max_renewals`: left to expire, reported at its end.
    pub(super) fn stop_renewing(&mut self) {
        if self.renew {
            self.renew = false;
            self.ends_by = LossReason::MaxHold;
        }
        self.due = self.state.valid_until();
    }

    /// How soon to try again after a failed renewal or a busy mutex.
    pub(super) fn retry(&self) -> Duration {
        (self.interval / EARLY_SHARE).max(Duration::from_millis(1))
    }

    /// Released by its guard (a lease whose mutex is busy counts as not released).
    pub(super) fn released(&self) -> bool {
        self.state.held.try_lock().is_some_and(|h| h.released)
    }

    /// Not released and not lost: still worth keeping in the queue.
    fn live(&self) -> bool {
        !self.state.is_lost() && self.state.held.try_lock().is_none_or(|h| !h.released)
    }
}

/// The first multiple of `interval` (counted from the lease clock's epoch) at least
/// half an interval after `after`: between half an interval and one and a half
/// after it, and the same instant for every lease with this interval renewed within
/// half a grid step of a tick, so they stay together. Never the tick right after
/// `after`: a lease taken just before a tick would be renewed at once, its validity
/// moved before anything could need it (a loss told later than the validity its
/// lock gave, by an amount that depends on the process's past).
pub(super) fn grid_due(after: Instant, interval: Duration) -> Instant {
    let step = interval.as_nanos();
    if step == 0 {
        return after;
    }
    // In u128: no interval overflows it, and `schedule` keeps a u64 path of its
    // own for the instants of every acquire.
    let half = u128::from(to_nanos(after)) + step.div_ceil(2);
    let due = half.div_ceil(step) * step;
    let due = u64::try_from(due).map_or_else(|_| from_nanos(u64::MAX), from_nanos);
    // Only differs for an `after` before the epoch, which `to_nanos` reads as 0.
    after
        .checked_add(interval + interval / 2)
        .map_or(due, |limit| due.min(limit))
}

/// Orders the heap by due time, earliest first.
pub(super) struct Due(pub(super) Lease);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.0.due == other.0.due
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.0.due.cmp(&self.0.due)
    }
}

/// The thread's leases in due order.
pub(super) struct Queue {
    pub(super) heap: BinaryHeap<Due>,
    sweep_at: usize,
}

impl Queue {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            sweep_at: MIN_SWEEP,
        }
    }

    /// Queues a lease. Released leases stay queued until they come due; so that lock
    /// churn cannot grow the queue without bound, it is swept of them whenever it has
    /// doubled since the last sweep (amortized O(1) per push).
    pub(super) fn push(&mut self, lease: Lease) {
        self.heap.push(Due(lease));
        if self.heap.len() >= self.sweep_at {
            self.heap.retain(|d| d.0.live());
            self.sweep_at = (self.heap.len() * 2).max(MIN_SWEEP);
        }
    }

    /// Moves a lease's due time earlier if its validity now ends sooner. O(n), and
    /// only after an `extend` that shortened a lease.
    pub(super) fn reschedule(&mut self, id: u64) {
        let now = Instant::now();
        let mut leases = std::mem::take(&mut self.heap).into_vec();
        for Due(lease) in &mut leases {
            if lease.state.id == id {
                lease.due = lease.due.min(lease.schedule(now));
            }
        }
        self.heap = BinaryHeap::from(leases);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{Keys, Scheme, backend};
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn state(sent: Instant, ttl: Duration) -> Arc<LeaseState> {
        let backend = backend(&Scheme::Token, &crate::owner::ClientId::new());
        let keys = Keys::new("", "k", &*backend).unwrap();
        Arc::new(LeaseState::new(keys, backend, "v".into(), sent, ttl, None))
    }

    /// A renewed lease acquired at `sent` with a TTL of 300 ms.
    fn lease(sent: Instant, interval: Duration, hold: Option<Duration>, n: Option<u32>) -> Lease {
        let hold_until = hold.map(|d| sent + d);
        Lease::new(state(sent, ms(300)), true, interval, hold_until, n, sent)
    }

    #[test]
    fn the_queue_hands_out_the_earliest_due_first() {
        let now = Instant::now();
        let mut queue = Queue::new();
        for offset in [50, 10, 40, 20, 30] {
            let mut l = lease(now, ms(100), None, None);
            l.due = now + ms(offset);
            queue.push(l);
        }
        let order: Vec<Duration> = std::iter::from_fn(|| queue.heap.pop())
            .map(|Due(l)| l.due - now)
            .collect();
        assert_eq!(order, [10, 20, 30, 40, 50].map(ms));
    }

    #[test]
    fn released_leases_are_swept_out_once_the_queue_doubles() {
        let now = Instant::now();
        let mut queue = Queue::new();
        for _ in 0..MIN_SWEEP - 1 {
            let l = lease(now, ms(100), None, None);
            l.state.held.lock().released = true;
            queue.push(l);
        }
        assert_eq!(queue.heap.len(), MIN_SWEEP - 1);
        queue.push(lease(now, ms(100), None, None));
        assert_eq!(queue.heap.len(), 1);
    }

    #[test]
    fn a_shortened_lease_is_rescheduled_earlier() {
        let now = Instant::now();
        let mut queue = Queue::new();
        let long = Lease::new(state(now, ms(30_000)), true, ms(10_000), None, None, now);
        let id = long.state.id;
        queue.push(long);
        let other = Lease::new(state(now, ms(30_000)), true, ms(5_000), None, None, now);
        queue.push(other);
        let state = Arc::clone(
            &queue
                .heap
                .iter()
                .find(|d| d.0.state.id == id)
                .unwrap()
                .0
                .state,
        );
        state.renewed(Instant::now(), ms(300));
        queue.reschedule(id);
        let Due(first) = queue.heap.pop().unwrap();
        assert_eq!(first.state.id, id);
        assert!(first.due <= now + ms(300), "{:?}", first.due - now);
    }

    #[test]
    fn next_ttl_is_clipped_to_the_max_hold() {
        let now = Instant::now();
        let l = lease(now, ms(100), Some(ms(1000)), None);
        assert_eq!(l.next_ttl(now + ms(100)), Some(ms(300)));
        assert_eq!(l.next_ttl(now + ms(900)), Some(ms(100)));
        assert_eq!(l.next_ttl(now + ms(950)), Some(ms(50)));
        assert_eq!(l.next_ttl(now + Duration::from_micros(999_500)), None);
        assert_eq!(l.next_ttl(now + ms(1200)), None);
    }

    #[test]
    fn next_ttl_is_none_once_the_renewals_are_used_up() {
        let now = Instant::now();
        assert_eq!(
            lease(now, ms(100), None, Some(1)).next_ttl(now),
            Some(ms(300))
        );
        assert_eq!(lease(now, ms(100), None, Some(0)).next_ttl(now), None);
    }

    #[test]
    fn a_fixed_lease_is_looked_at_when_its_validity_ends() {
        let now = Instant::now();
        let l = Lease::new(state(now, ms(300)), false, ms(100), None, None, now);
        assert_eq!(l.due, l.state.valid_until());
        assert_eq!(l.next_ttl(now), None);
        assert_eq!(l.ends_by, LossReason::TtlElapsed);
    }

    #[test]
    fn a_lease_past_its_bound_ends_by_max_hold_at_its_validity_end() {
        let now = Instant::now();
        let mut l = lease(now, ms(100), Some(ms(1000)), None);
        assert_eq!(l.ends_by, LossReason::Unreachable);
        l.stop_renewing();
        assert!(!l.renew);
        assert_eq!(l.ends_by, LossReason::MaxHold);
        assert_eq!(l.due, l.state.valid_until());
    }

    #[test]
    fn the_first_renewal_is_due_half_an_interval_to_one_and_a_half_after_the_lock() {
        let now = Instant::now();
        let l = lease(now, ms(100), None, None);
        assert!(l.due >= now + ms(50) && l.due < now + ms(150));
    }

    #[test]
    fn a_lease_taken_just_before_a_tick_is_renewed_on_the_next_one() {
        let step = ms(400);
        // A tick, and instants `d` milliseconds after it (negative: before).
        let at = |d: i64| from_nanos((400_000 + d).unsigned_abs() * 1_000_000);
        let l = Lease::new(state(at(-70), ms(1200)), true, step, None, None, at(-70));
        assert_eq!(l.due, at(400));
        assert_eq!(grid_due(at(-70), step), at(400));
        // Taken up to half an interval early with the tick's leases, or late by as
        // much: the next renewal is the next tick's.
        assert_eq!(grid_due(at(-199), step), at(400));
        assert_eq!(grid_due(at(199), step), at(400));
    }

    #[test]
    fn an_interval_close_to_the_ttl_still_renews_before_the_validity_ends() {
        let now = Instant::now();
        let l = lease(now, ms(290), None, None);
        let valid = l.state.valid_until() - now;
        assert!(l.due <= now + valid / 4 * 3, "{:?}", l.due - now);
    }

    proptest! {
        #[test]
        fn grid_due_is_half_an_interval_to_one_and_a_half_after(
            after in 0u64..1_000_000_000_000_000,
            interval in 1u64..100_000_000_000,
        ) {
            let (after, interval) = (from_nanos(after), Duration::from_nanos(interval));
            let due = grid_due(after, interval);
            prop_assert!(due >= after + interval / 2);
            prop_assert!(due <= after + interval + interval / 2);
        }

        #[test]
        fn leases_renewed_in_one_tick_stay_on_one_grid(
            after in 0u64..1_000_000_000_000_000,
            interval in 1u64..100_000_000_000,
            late in 0u64..100_000_000_000,
        ) {
            let step = Duration::from_nanos(interval);
            let due = grid_due(from_nanos(after), step);
            // A tick that runs late, or takes a lease early, by up to half an
            // interval keeps the grid.
            let late = Duration::from_nanos(late % interval.div_ceil(2));
            prop_assert_eq!(grid_due(due + late, step), due + step);
            let early = from_nanos(to_nanos(due) - u64::try_from(late.as_nanos()).unwrap());
            prop_assert_eq!(grid_due(early, step), due + step);
        }

        #[test]
        fn the_schedule_in_nanoseconds_matches_the_general_one(
            interval in 1u64..100_000_000_000,
            ttl in 1u64..400_000_000_000,
            after in 0u64..1_000_000_000_000,
        ) {
            let now = Instant::now();
            let l = lease(now, Duration::from_nanos(interval), None, None);
            l.state.confirm(now, Duration::from_millis(1 + ttl / 1_000_000));
            let sent = now + Duration::from_nanos(after);
            let end = l.state.valid_until();
            let latest = sent + end.saturating_duration_since(sent) / 4 * 3;
            let general = grid_due(sent, l.interval).min(latest);
            prop_assert_eq!(l.schedule(sent), general);
        }

        #[test]
        fn next_ttl_never_exceeds_the_ttl_nor_the_hold(
            hold in 1u64..5_000,
            at in 0u64..6_000,
        ) {
            let now = Instant::now();
            let l = lease(now, ms(100), Some(ms(hold)), None);
            let at = now + ms(at);
            if let Some(ttl) = l.next_ttl(at) {
                prop_assert!(ttl <= ms(300));
                prop_assert!(at + ttl <= now + ms(hold));
            }
        }
    }
}
