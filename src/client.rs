//! [`LockClient`]: the pool, the background threads, and the entry points.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::error::{Error, Operation, Result};
use crate::guard::LockGuard;
use crate::lease::LeaseState;
use crate::metrics::export::{self, Timer};
use crate::metrics::{Counters, Metrics, bump};
use crate::notify::Notifier;
use crate::options::{LockOptions, Renewal, Settings, check_interval, check_ttl};
use crate::owner::{ClientId, SessionWrite};
use crate::renewal::{Lease, Renewer};
use crate::scheme::{self, Backend, Keys, Replicas, Request, Scheme, Waiting};
use crate::time::in_time;
use crate::topology::{Attempt, IoThread, Topology};
use crate::wait::{Hub, Next, WaitSlot, Waiters, Want, release_later};

mod owners;
mod plan;

use plan::Plan;

/// A client for distributed locks on one Redis server, or on a Redlock quorum of
/// independent masters ([`LockClient::redlock`]).
///
/// Cheap to clone: clones share one connection pool, one renewal thread and one
/// waiter thread. The threads stop, and are joined, when the last clone is dropped;
/// guards that outlive it are no longer renewed and stop reporting
/// [`is_held`](LockGuard::is_held) once their validity runs out.
///
/// # Examples
/// ```no_run
/// # fn main() -> redlease::Result<()> {
/// use std::time::Duration;
/// let client = redlease::LockClient::builder("redis://127.0.0.1/")
///     .key_prefix("lock:")
///     .ttl(Duration::from_secs(10))
///     .build()?;
/// let guard = client.lock("invoice:42")?;
/// // ... work while the lease is renewed in the background ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

/// What the client's clones share; dropping it stops and joins the threads (the
/// renewal thread first: its last reports may queue callbacks for the notifier).
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    /// The client's UUID and tag, which its values carry.
    pub(crate) id: ClientId,
    default_backend: Arc<dyn Backend>,
    /// The reentrant scheme's backend: one client id in its owner fields, and one
    /// memory of outermost fences, for every call of this client.
    pub(crate) reentrant: Arc<dyn Backend>,
    /// What guards and waiting callers share with the waiter thread. It holds no
    /// thread handle, so a guard holding it never keeps a thread alive.
    pub(crate) hub: Arc<Hub>,
    renewer: Renewer,
    /// The topology's I/O threads, one per node: stopped after the renewal thread.
    _io: Vec<IoThread>,
    notifier: Notifier,
    waiters: Option<Waiters>,
}

impl LockClient {
    /// Starts the client's threads over `topology`.
    pub(crate) fn start(
        settings: Settings,
        topology: Arc<dyn Topology>,
        io: Vec<IoThread>,
        counters: Arc<Counters>,
        backoff: (Duration, Duration),
        id: ClientId,
    ) -> Result<Self> {
        let hub = Arc::new(Hub::new(
            Arc::clone(&topology),
            Arc::clone(&counters),
            backoff,
            id.tag(),
        ));
        let notifier = Notifier::spawn()?;
        let session = SessionWrite::new(&settings.key_prefix, &id);
        let renewer = Renewer::spawn(topology, counters, session)?;
        let waiters = if settings.pubsub {
            Some(Waiters::spawn(&hub)?)
        } else {
            None
        };
        let reentrant = scheme::backend(&Scheme::Reentrant, &id);
        Ok(Self {
            inner: Arc::new(Inner {
                default_backend: if settings.scheme == Scheme::Reentrant {
                    Arc::clone(&reentrant)
                } else {
                    scheme::backend(&settings.scheme, &id)
                },
                id,
                reentrant,
                settings,
                hub,
                renewer,
                _io: io,
                notifier,
                waiters,
            }),
        })
    }

    /// Acquires the lock on `key`, waiting as long as it takes.
    ///
    /// Waits for a release message (or the holder's TTL, whichever comes first) and
    /// retries; never returns while someone else holds the lock. The lease is renewed
    /// in the background per the client's [`Renewal`] policy.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for an empty key, [`Error::Redis`] when Redis fails or
    /// does not answer within the configured timeouts (the lock may then have been
    /// taken: redlease removes it in the background),
    /// [`Error::Shutdown`] when the client is [closed](Self::close),
    /// [`Error::NotReplicated`] when [replica confirmation](crate::LockClientBuilder::replicas)
    /// is on and too few replicas acknowledged the lock (it was given back).
    pub fn lock(&self, key: &str) -> Result<LockGuard> {
        let acquired = self.acquire(key, &LockOptions::default(), None, true)?;
        // Without a deadline the wait ends only in a guard or an error.
        acquired.ok_or(Error::Shutdown)
    }

    /// Makes one attempt to acquire the lock on `key`; never waits.
    ///
    /// Returns `Ok(None)` when someone else holds it. One round trip at most.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.acquire(key, &LockOptions::default(), Some(Instant::now()), false)
    }

    /// Acquires the lock on `key`, waiting at most `wait`.
    ///
    /// Returns `Ok(None)` when the wait ran out with someone else still holding it.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, key: &str, wait: Duration) -> Result<Option<LockGuard>> {
        let deadline = Instant::now().checked_add(wait);
        self.acquire(key, &LockOptions::default(), deadline, true)
    }

    /// Acquires the lock on `key`, waiting until `deadline` at most.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, key: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        self.acquire(key, &LockOptions::default(), Some(deadline), true)
    }

    /// Acquires the lock on `key` with per-call options.
    ///
    /// Waits per [`LockOptions::wait`] / [`LockOptions::deadline`] (no bound when
    /// neither is set, and then never returns `Ok(None)`), and can be cancelled through
    /// [`LockOptions::cancel`].
    ///
    /// # Errors
    /// As [`lock`](Self::lock); [`Error::Config`] for an out-of-range option;
    /// [`Error::Cancelled`] when the wait was cancelled.
    pub fn lock_with(&self, key: &str, opts: &LockOptions) -> Result<Option<LockGuard>> {
        let now = Instant::now();
        let by_wait = opts.wait.and_then(|w| now.checked_add(w));
        let deadline = match (by_wait, opts.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.acquire(key, opts, deadline, true)
    }

    /// Runs `f` while holding the lock on `key`, then releases it.
    ///
    /// Waits like [`lock`](Self::lock).
    ///
    /// # Errors
    /// As [`lock`](Self::lock), and [`Error::LockLost`] when the lease had expired or
    /// been taken by the time `f` returned: `f` then ran at least partly without the
    /// lock, and its result is dropped.
    pub fn with_lock<R>(&self, key: &str, f: impl FnOnce() -> R) -> Result<R> {
        let guard = self.lock(key)?;
        let out = f();
        let key = guard.key().to_owned();
        if guard.unlock()?.was_held() {
            Ok(out)
        } else {
            Err(Error::LockLost { key })
        }
    }

    /// A snapshot of this client's counters.
    pub fn metrics(&self) -> Metrics {
        self.inner.hub.counters.snapshot()
    }

    /// Stops new lock calls and wakes every waiting call with [`Error::Shutdown`].
    ///
    /// Held guards keep being renewed until released or until the last clone of
    /// the client is dropped.
    pub fn close(&self) {
        self.inner.hub.shutdown.cancel();
    }

    /// Waits until the renewal thread has taken in every lease acquired so far
    /// through this client. Returns at once if the thread has stopped.
    ///
    /// Useful before reading [`metrics`](Self::metrics) in tests and benchmarks.
    pub fn flush(&self) {
        self.inner.renewer.sync();
    }

    /// Acquires `key`; a Redis failure names the call, the key and the limit.
    pub(crate) fn acquire(
        &self,
        key: &str,
        opts: &LockOptions,
        deadline: Option<Instant>,
        fair: bool,
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
            .and_then(|plan| self.acquire_loop(key, &plan, opts, deadline, fair))
            .map_err(|e| {
                let key = format!("{}{key}", self.inner.settings.key_prefix);
                let limits = self.inner.hub.topology.subscriber(0).limits();
                e.during(Operation::Acquire, &key, limits)
            });
        export::acquisition(&out, label, began);
        out
    }

    fn acquire_loop(
        &self,
        key: &str,
        plan: &Plan,
        opts: &LockOptions,
        deadline: Option<Instant>,
        fair: bool,
    ) -> Result<Option<LockGuard>> {
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
            ttl: plan.ttl,
            fence: plan.fence,
            terms: plan.terms,
        });
        let cancel = opts.cancel.as_ref();
        // When the call must return by, if it has a deadline: the deadline, or one
        // read timeout after the call began if that is later.
        let return_by = deadline.map(|d| d.max(Instant::now() + hub.topology.read_timeout()));
        // Counted in until this call returns: callers of this client that arrive
        // while it acquires or waits join the key's line instead of racing it.
        let arrival = hub.lines.arrive(&keys.channel);
        let mut slot: Option<WaitSlot<'_>> = None;
        let mut next = Next::Attempt;
        // A reentrant owner may hold the lock already: it tries before queueing, or
        // it would wait behind callers that wait for it.
        let queue_first = fair && arrival.crowded() && !plan.backend.reentrant();
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
                        return Ok(Some(self.adopt(plan, keys, h.value, h.sent, h.fence)));
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
                    key: keys.lock.clone(),
                });
            }
            let will_wait = deadline.is_none_or(|d| d > Instant::now());
            let req = Request {
                ttl: plan.ttl,
                fence: plan.fence,
                // The holder's remaining TTL bounds a wait; once known, polls skip it.
                wait: Waiting::of(
                    will_wait,
                    slot.as_ref().map(|s| !s.needs_remaining()),
                    || !arrival.crowded() && waiters.is_none_or(Waiters::quiet),
                ),
                replicas: plan.replicas,
                return_by,
            };
            let remaining = match hub.topology.acquire(&plan.backend, &keys, req)? {
                // Granted after its validity ended: not ours to hand over. Who
                // holds the key now is unknown, so the wait polls.
                Attempt::Acquired { value, sent, .. } if self.late(plan, &keys, &value, sent) => {
                    None
                }
                Attempt::Acquired { value, sent, fence } => {
                    // A shared hold passes its wake-up on to the next waiter.
                    if let Some(s) = slot.as_mut().filter(|_| !plan.backend.shares()) {
                        s.acquired();
                    }
                    return Ok(Some(self.adopt(plan, keys, value, sent, fence)));
                }
                Attempt::Busy { remaining } => remaining,
            };
            if !will_wait || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            next = slot
                .get_or_insert_with(|| WaitSlot::new(hub, waiter(), &keys, cancel, want))
                .pause(remaining, deadline)?;
        }
    }

    /// Makes the guard for a lease a releasing guard of this client passed over as
    /// it is: already stored, renewed and counted by the renewal thread. `None`
    /// when its validity ended before this caller woke: it is then released off
    /// the caller's time, as a late grant is.
    fn take_over(&self, state: Arc<LeaseState>) -> Option<LockGuard> {
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
    fn late(&self, plan: &Plan, keys: &Keys, value: &str, sent: Instant) -> bool {
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
            let until = Instant::now() + plan.ttl;
            let (backend, value) = (Arc::clone(&plan.backend), value.to_owned());
            hub.topology
                .release_later(backend, keys.clone(), value, until);
        }
        true
    }

    /// Makes the guard for a lock now stored under `keys` with `value`, whose TTL
    /// was set by a command sent at `sent`, and hands its lease to the renewal thread.
    fn adopt(
        &self,
        plan: &Plan,
        keys: Keys,
        value: String,
        sent: Instant,
        fence: Option<u64>,
    ) -> LockGuard {
        let hub = &self.inner.hub;
        bump(&hub.counters.acquired, 1);
        let on_lost = plan
            .on_lost
            .clone()
            .map(|f| (f, self.inner.notifier.sender()));
        let state = Arc::new(
            LeaseState::new(
                keys,
                Arc::clone(&plan.backend),
                value,
                sent,
                plan.ttl,
                on_lost,
            )
            .with_terms(plan.terms.filter(|_| fence.is_none())),
        );
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

    fn plan(&self, opts: &LockOptions) -> Result<Plan> {
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
            terms: None,
        }
        .with_terms())
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.inner.settings;
        f.debug_struct("LockClient")
            .field("topology", &self.inner.hub.topology)
            .field("key_prefix", &s.key_prefix)
            .field("ttl", &s.ttl)
            .field("scheme", &s.scheme)
            .field("pubsub", &s.pubsub)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<LockClient>();
        send::<LockGuard>();
        send_sync::<Error>();
    }
}
