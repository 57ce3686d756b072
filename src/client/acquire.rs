//! How a lock call runs: its [`Plan`] (the options with the client's defaults
//! filled in), the attempts and waits until the lock is taken or the deadline
//! passes, and the guard made for the lease taken.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::client::guard::LockGuard;
use crate::client::min_hold::{check_min_hold, hold_end, stored_ttl};
use crate::client::options::{LockOptions, Renewal, Wait, check_interval, check_ttl};
use crate::error::{Error, Operation, Result};
use crate::lease::LeaseState;
use crate::metrics::bump;
use crate::metrics::export::{self, Timer};
use crate::scheme::{self, Keys, Replicas, Request, Scheme, Waiting};
use crate::threads::cancel::CancelToken;
use crate::threads::renewal::Lease;
use crate::threads::wait::{Next, WaitSlot, Waiters, Want, release_later};
use crate::time::in_time;
use crate::topology::Attempt;

use super::LockClient;
use super::plan::Plan;

impl LockClient {
    /// Acquires `key`, waiting as `wait` says; a Redis failure names the call,
    /// the key and the limit.
    pub(crate) fn acquire(
        &self,
        key: &str,
        opts: &LockOptions,
        wait: Wait,
    ) -> Result<Option<LockGuard>> {
        let began = Timer::start();
        let plan = self.plan(opts);
        // Metrics tell the primitives apart by the backend that acquires (a
        // handle's, or the scheme's); an invalid option counts under the scheme.
        let label = match &plan {
            Ok(plan) => plan.backend.label(),
            Err(_) => opts
                .scheme
                .as_ref()
                .unwrap_or(&self.inner.settings.scheme)
                .label(),
        };
        let out = plan
            .and_then(|plan| {
                let guard = self.acquire_loop(key, &plan, opts, wait)?;
                Ok(guard.map(|g| g.release_in_background(plan.background)))
            })
            .and_then(|guard| self.unless_stopped(guard))
            .map_err(|e| {
                let key = format!("{}{key}", self.inner.settings.key_prefix);
                let limits = self.inner.hub.topology.subscriber(0).limits();
                e.during(Operation::Acquire, &key, limits)
            });
        export::acquisition(&out, label, began);
        out
    }

    /// Gives back a lease taken while [`shutdown`](LockClient::shutdown) ran: its
    /// list of leases may have been made before this one was registered. Either
    /// the shutdown releases it or this does, never both (`take_value`).
    pub(super) fn unless_stopped(&self, guard: Option<LockGuard>) -> Result<Option<LockGuard>> {
        // Pairs with the store in `shutdown`: the lease was registered first.
        if guard.is_some() && self.inner.stopped.load(Ordering::SeqCst) {
            drop(guard);
            return Err(Error::Shutdown);
        }
        Ok(guard)
    }

    fn acquire_loop(
        &self,
        key: &str,
        plan: &Plan,
        opts: &LockOptions,
        how: Wait,
    ) -> Result<Option<LockGuard>> {
        // `in_line`: whether this call queues behind this client's callers of the key.
        let (deadline, in_line) = how.bounds();
        let hub = &*self.inner.hub;
        let keys = Keys::new(&self.inner.settings.key_prefix, key, &*plan.backend)?;
        let waiters = self
            .inner
            .waiters
            .as_ref()
            .filter(|_| plan.backend.publishes());
        // Which waiter thread hears the key's channel is looked up only for a
        // caller that waits.
        let waiter = || waiters.and_then(|w| w.for_channel(&keys.channel));
        // Only token locks can be handed over by a releasing guard.
        let want = waiters.filter(|_| plan.takes_hand_off()).map(|_| Want {
            ttl: stored_ttl(plan.ttl, plan.min_hold),
            fence: plan.fence,
            terms: plan.terms,
        });
        let cancel = opts.cancel.as_ref();
        // When the call must return by, if it has a deadline: the deadline, or one
        // read timeout after the call began if that is later.
        let began = Instant::now();
        let return_by = deadline.map(|d| d.max(began + hub.topology.read_timeout()));
        // Counted in until this call returns: callers of this client that arrive
        // while it acquires or waits join the key's line instead of racing it.
        let arrival = hub.lines.arrive(&keys.channel);
        let mut slot: Option<WaitSlot<'_>> = None;
        let mut next = Next::Attempt;
        // A reentrant owner may hold the lock already: it tries before queueing, or
        // it would wait behind callers that wait for it.
        let queue_first = in_line && arrival.crowded() && !plan.backend.reentrant();
        if queue_first && deadline.is_none_or(|d| d > Instant::now()) {
            next = slot
                .insert(WaitSlot::new(hub, waiter(), &keys, cancel, want))
                .first_turn(deadline)?;
        }
        loop {
            match next {
                Next::Attempt => {}
                // A hand-off whose validity ended while this caller woke is
                // given back, and the caller goes on as after a busy attempt.
                Next::Handed(h) => {
                    if !self.late(plan, &keys, &h.value, h.sent) {
                        return Ok(Some(self.guard_for(plan, keys, h.value, h.sent, h.fence)));
                    }
                }
                Next::Transferred(state) => {
                    if let Some(guard) = self.take_over(state) {
                        return Ok(Some(guard));
                    }
                }
                Next::GaveUp => return Ok(None),
            }
            if hub.shutdown.is_cancelled() {
                return Err(Error::Shutdown);
            }
            if opts.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                return Err(Error::Cancelled {
                    key: keys.lock.as_str().into(),
                });
            }
            let will_wait = deadline.is_none_or(|d| d > Instant::now());
            let req = Request {
                // The key outlives a holder that dies inside its minimum hold.
                ttl: stored_ttl(plan.ttl, plan.min_hold),
                fence: plan.fence,
                // The holder's remaining TTL bounds a wait; once known, polls skip it.
                wait: Waiting::of(
                    will_wait,
                    slot.as_ref().map(|s| !s.needs_remaining()),
                    || !arrival.crowded() && waiters.is_none_or(Waiters::quiet),
                ),
                replicas: plan.replicas,
                return_by,
                began,
            };
            // A lease of the key whose release this client queued and has not
            // sent yet is taken back as it is (no round trip, nothing sent); one
            // sent already lands first (see
            // `LockClientBuilder::release_in_background`): no busy answer for it.
            let parked = plan
                .terms
                .filter(|_| plan.takes_hand_off())
                .and_then(|terms| hub.queued.take_back(&keys.lock, terms));
            if let Some(guard) = parked.and_then(|state| self.take_over(state)) {
                // The dropped guard's hold ended here, as by a hand-off.
                bump(&hub.counters.released, 1);
                bump(&hub.counters.handoffs, 1);
                return Ok(Some(guard));
            }
            hub.queued
                .settle(&keys.lock, Instant::now() + hub.topology.read_timeout());
            if let Some(live) = &self.inner.liveness {
                live.wait_ready(Instant::now() + 2 * hub.topology.read_timeout());
            }
            let (remaining, announces) = match hub.topology.acquire(&plan.backend, &keys, req)? {
                // Granted after its validity ended: not ours to hand over. Who
                // holds the key now is unknown, so the wait polls.
                Attempt::Acquired { value, sent, .. } if self.late(plan, &keys, &value, sent) => {
                    (None, false)
                }
                Attempt::Acquired { value, sent, fence } => {
                    // A shared hold passes its wake-up on to the next waiter.
                    if let Some(s) = slot.as_mut().filter(|_| !plan.backend.shares()) {
                        s.acquired();
                    }
                    return Ok(Some(self.guard_for(plan, keys, value, sent, fence)));
                }
                Attempt::Busy {
                    remaining,
                    announces,
                } => (remaining, announces),
            };
            if !will_wait || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            next = slot
                .get_or_insert_with(|| WaitSlot::new(hub, waiter(), &keys, cancel, want))
                .pause(remaining, announces, deadline)?;
        }
    }

    /// Makes the guard for a lease a releasing guard of this client passed over as
    /// it is: already stored, renewed and counted by the renewal thread. `None`
    /// when its validity ended before this caller woke: it is then released off
    /// the caller's time, as a late grant is.
    pub(super) fn take_over(&self, state: Arc<LeaseState>) -> Option<LockGuard> {
        let hub = &self.inner.hub;
        if !state.is_held() {
            log::debug!("lease of `{}` handed over after its validity", state.key);
            release_later(hub, &state);
            return None;
        }
        bump(&hub.counters.acquired, 1);
        Some(LockGuard::new(Arc::clone(hub), state, None))
    }

    /// Whether a grant of `value` under `keys`, whose command left at `sent`, came
    /// too late to hand over: its validity (`sent + ttl - drift`, the same rule
    /// Redlock counts its votes by, see [`in_time`]) has ended. Every acquisition
    /// passes here: each topology's, a hand-off's, every primitive's. A late grant
    /// is released as an unanswered acquire is: off the caller's time, retried
    /// until the value would expire by itself (a reentrant hold is left to its TTL:
    /// its owner may hold the key again before a background release ran).
    pub(super) fn late(&self, plan: &Plan, keys: &Keys, value: &str, sent: Instant) -> bool {
        if in_time(sent, plan.ttl) {
            return false;
        }
        let hub = &self.inner.hub;
        log::debug!(
            "grant of `{}` came after its validity; given back",
            keys.lock
        );
        if !plan.backend.reentrant() {
            // The value landed before its reply came back: it expires a TTL after.
            let until = Instant::now() + stored_ttl(plan.ttl, plan.min_hold);
            let (backend, value) = (Arc::clone(&plan.backend), value.to_owned());
            hub.topology
                .release_later(backend, keys.clone(), value, until);
        }
        true
    }

    /// Makes the guard for a lock now stored under `keys` with `value`, whose TTL
    /// was set by a command sent at `sent`, and hands its lease to the renewal thread.
    pub(super) fn guard_for(
        &self,
        plan: &Plan,
        keys: Keys,
        value: String,
        sent: Instant,
        fence: Option<u64>,
    ) -> LockGuard {
        self.guard_left(plan, keys, value, (sent, plan.ttl), fence)
    }

    /// [`guard_for`](Self::guard_for) for a lease that has `left` from `sent` on, rather
    /// than the plan's TTL (a ticket's lease: what its `PTTL` said); renewals
    /// use the plan's TTL.
    pub(super) fn guard_left(
        &self,
        plan: &Plan,
        keys: Keys,
        value: String,
        (sent, left): (Instant, Duration),
        fence: Option<u64>,
    ) -> LockGuard {
        let hub = &self.inner.hub;
        bump(&hub.counters.acquired, 1);
        let on_lost = plan
            .on_lost
            .clone()
            .map(|f| (f, self.inner.notifier.sender()));
        let state = LeaseState::new(
            keys,
            Arc::clone(&plan.backend),
            value,
            sent,
            plan.ttl,
            on_lost,
        )
        .with_terms(plan.terms.filter(|_| fence.is_none()))
        .with_min_hold(hold_end(plan.min_hold))
        .with_session(self.inner.liveness.as_ref().map(|l| l.hold(sent)));
        if left != plan.ttl {
            state.renewed(sent, left);
        }
        let state = Arc::new(state);
        let hold_until = plan.max_hold.and_then(|d| sent.checked_add(d));
        self.inner.renewer.register(Lease::new(
            Arc::clone(&state),
            plan.renewal == Renewal::Auto,
            plan.interval,
            hold_until,
            plan.max_renewals,
            sent,
        ));
        LockGuard::new(Arc::clone(hub), state, fence)
    }

    pub(super) fn plan(&self, opts: &LockOptions) -> Result<Plan> {
        let s = &self.inner.settings;
        let ttl = opts.ttl.unwrap_or(s.ttl);
        check_ttl("ttl", ttl)?;
        let interval = match opts.renew_interval.or(s.renew_interval) {
            Some(every) => check_interval(every, ttl).map(|()| every)?,
            None => (ttl / 3).max(Duration::from_millis(1)),
        };
        let max_hold = opts.max_hold.or(s.max_hold);
        if max_hold.is_some_and(|d| d.is_zero()) {
            return Err(Error::config("max_hold", "must be above zero"));
        }
        let backend = match &opts.scheme {
            Some(Scheme::Reentrant) => Arc::clone(&self.inner.reentrant),
            Some(scheme) if *scheme != s.scheme => scheme::backend(scheme, &self.inner.id),
            _ => (opts.backend.clone()).unwrap_or_else(|| Arc::clone(&self.inner.default_backend)),
        };
        let min_hold = check_min_hold(opts.min_hold, max_hold, &*backend)?;
        let fence = opts.fencing.unwrap_or(s.fencing);
        let topology = &self.inner.hub.topology;
        topology.check(opts.scheme.as_ref().unwrap_or(&s.scheme), fence)?;
        Ok(Plan {
            ttl,
            fence,
            renewal: opts.renewal.unwrap_or(s.renewal),
            interval,
            max_hold,
            max_renewals: opts.max_renewals,
            backend,
            on_lost: opts.on_lost.clone(),
            replicas: match opts.replicas {
                Some((count, timeout)) => Replicas::checked(count, timeout)?,
                None => s.replicas,
            },
            min_hold,
            background: opts.background.unwrap_or(s.background),
            terms: None,
        }
        .with_terms())
    }
}
