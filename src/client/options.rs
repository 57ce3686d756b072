//! Per-call options ([`LockOptions`], [`Renewal`]) and the client-wide defaults
//! they fall back to ([`Settings`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lease::{LeaseLost, LostCallback};
use crate::scheme::{Backend, Replicas, Scheme};
use crate::threads::cancel::CancelToken;
use crate::time::{MAX_TTL, MIN_TTL};

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
/// Every option left unset takes the client's value (see [`LockClientBuilder`](crate::LockClientBuilder)).
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
    pub(crate) replicas: Option<(u32, Duration)>,
    /// See [`LockOptions::min_hold`] (in `min_hold.rs`).
    pub(crate) min_hold: Option<Duration>,
    pub(crate) background: Option<bool>,
    /// Set by a named primitive (a fair lock, read-write lock or semaphore, through
    /// its handle): its format.
    pub(crate) backend: Option<Arc<dyn Backend>>,
}

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
    /// Run `f` when the lease is lost, on the client's notifier thread: never on
    /// the renewal thread, so a slow or panicking callback delays only the
    /// callbacks behind it, never a renewal or a loss report. (Once the client is
    /// dropped, on the thread that finds the loss.) Defaults to none.
    pub fn on_lost(mut self, f: impl Fn(&LeaseLost) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }
    /// Confirm the acquisition on `count` replicas within `timeout`: `WAIT count
    /// timeout` is sent behind the acquire in the same round trip, and a lock fewer
    /// replicas acknowledged is given back and reported as
    /// [`Error::NotReplicated`](crate::Error::NotReplicated). `count` 0 turns the
    /// client's confirmation off for this call.
    ///
    /// This lowers the risk of losing a lock on failover; it does not remove it.
    /// Replication stays asynchronous: a replica acknowledges what it received, not
    /// what it persisted; a failover may promote a replica that had not
    /// acknowledged; renewals are not confirmed. Each attempt, also one that finds
    /// the lock busy, may wait up to `timeout` while replicas lag, and a waiting
    /// caller is not handed locks by releasing guards of its client. For one master
    /// and its replicas: Redlock refuses it. Defaults to the client's
    /// [`replicas`](crate::LockClientBuilder::replicas).
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some((count, timeout));
        self
    }
    /// Whether dropping the guard queues its release for the I/O thread instead
    /// of waiting for it; see
    /// [`LockClientBuilder::release_in_background`](crate::LockClientBuilder::release_in_background)
    /// for what it promises (and that a process exiting without dropping its
    /// client leaves queued releases to the TTL). Defaults to the client's.
    pub fn release_in_background(mut self, on: bool) -> Self {
        self.background = Some(on);
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

    /// The deadline of a call made at `now` with these options: its
    /// [`wait`](Self::wait) from `now` or its [`deadline`](Self::deadline),
    /// whichever comes first; `None` (no bound) when neither is set.
    pub(crate) fn deadline_from(&self, now: Instant) -> Option<Instant> {
        let by_wait = self.wait.and_then(|w| now.checked_add(w));
        match (by_wait, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How long one acquire call may wait for a busy lock, and how it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One attempt; never waits (`try_lock`, `try_read`, `try_acquire`).
    Once,
    /// Waits until the deadline (`None`: as long as it takes), in this client's
    /// line of callers for the key: a caller that arrives while others of this
    /// client wait for it queues behind them instead of racing them (plain locks).
    InLine(Option<Instant>),
    /// Waits until the deadline (`None`: as long as it takes) without joining
    /// this client's line: a shared hold (a read, a permit) has no turn to wait
    /// for, and a fair lock keeps its order in Redis.
    Until(Option<Instant>),
}

impl Wait {
    /// The call's deadline (`Once`: now), and whether it lines up behind this
    /// client's callers.
    pub(crate) fn bounds(self) -> (Option<Instant>, bool) {
        match self {
            Wait::Once => (Some(Instant::now()), false),
            Wait::InLine(deadline) => (deadline, true),
            Wait::Until(deadline) => (deadline, false),
        }
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
            .field("replicas", &self.replicas)
            .field("min_hold", &self.min_hold)
            .field("release_in_background", &self.background)
            .field("backend", &self.backend)
            .finish()
    }
}

/// The client-wide defaults a lock call's options fall back to.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) key_prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) renewal: Renewal,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) pubsub: bool,
    pub(crate) scheme: Scheme,
    pub(crate) replicas: Option<Replicas>,
    /// Whether a dropped guard's release is queued for the I/O thread.
    pub(crate) background: bool,
    /// The client's liveness, when it keeps one.
    pub(crate) liveness: Option<Duration>,
}

/// Checks a TTL against what Redis `PX` accepts, and against the drift allowance:
/// a TTL below [`MIN_TTL`] leaves no validity, so no grant of it could be handed over.
pub(crate) fn check_ttl(option: &'static str, ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::config(
            option,
            "must be at least 3 ms (a shorter lease has no validity past the drift allowance)",
        ));
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
    use crate::time::{MAX_TTL, MIN_TTL};

    #[test]
    fn ttl_bounds_are_inclusive() {
        check_ttl("ttl", MIN_TTL).unwrap();
        check_ttl("ttl", MAX_TTL).unwrap();
        assert!(check_ttl("ttl", MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn the_deadline_is_the_earlier_of_wait_and_deadline() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(LockOptions::new().deadline_from(now), None);
        let opts = LockOptions::new().wait(second);
        assert_eq!(opts.deadline_from(now), Some(now + second));
        let opts = opts.deadline(now + second / 2);
        assert_eq!(opts.deadline_from(now), Some(now + second / 2));
        let opts = LockOptions::new().deadline(now + second).wait(second * 2);
        assert_eq!(opts.deadline_from(now), Some(now + second));
        assert_eq!(Wait::Until(None).bounds(), (None, false));
        assert_eq!(Wait::InLine(Some(now)).bounds(), (Some(now), true));
        assert!(Wait::Once.bounds().0.is_some());
    }
}
