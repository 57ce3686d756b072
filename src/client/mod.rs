//! The plain keyed lock: [`LockClient`] (the pool, the background threads, and the
//! entry points), how it is built, and what it hands out. The named primitives built on
//! it are in `primitives/`.
//!
//! Layout: this file is [`LockClient`] and its lock calls; `acquire.rs` how a call
//! runs (the attempts and waits, the guard made for the lease taken); `plan.rs` a
//! call's options with the client's defaults filled in; `options.rs` [`LockOptions`]
//! and the client-wide settings; `min_hold.rs` [`LockOptions::min_hold`] and its
//! checks; `guard.rs` [`LockGuard`]; `builder.rs` [`LockClientBuilder`], its setters
//! and checks; `deploy.rs` `build()` and the Redlock, Sentinel and Cluster
//! constructors; `multi.rs` [`LockClient::lock_all`] and its family (several names,
//! all or none); `multi_guard.rs` [`MultiGuard`](crate::MultiGuard); `any.rs`
//! [`LockClient::lock_any`] and its family (one name out of several); `any_guard.rs`
//! [`AnyGuard`](crate::AnyGuard); `inspect/` what
//! `inspect` and `held` return ([`LockInfo::read`](crate::LockInfo::read) over any
//! connection); `owners.rs` `inspect` and `held` themselves; `follow.rs` the cluster
//! redirections that reads sent straight to a node (`inspect`, `wait_free`) follow;
//! `shutdown.rs` [`LockClient::shutdown`], which releases every lease the client's
//! guards hold; `wait_free.rs` [`LockClient::wait_free`], which waits until nobody
//! holds a name; `ticket.rs` [`Ticket`](crate::Ticket), a lease's identity, and
//! [`LockClient::release_ticket`], its release from another process; `adopt.rs`
//! [`LockGuard::into_ticket`] and [`LockClient::adopt`], a lease handed over; `doctor/` [`LockClient::doctor`] and the server check `build()`
//! runs: is the server configured so that locks hold?

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::client::options::{LockOptions, Settings, Wait};
use crate::error::{Error, Result};
use crate::metrics::{Counters, Metrics};
use crate::owner::{ClientId, Liveness, SessionWrite};
use crate::scheme::{self, Backend, Scheme};
use crate::threads::notify::Notifier;
use crate::threads::renewal::Renewer;
use crate::threads::wait::{Hub, Subscription, Waiters, Wake};
use crate::topology::{IoThread, Topology};

mod acquire;
mod adopt;
mod any;
pub(crate) mod any_guard;
pub(crate) mod builder;
mod deploy;
pub(crate) mod doctor;
mod follow;
pub(crate) mod guard;
pub(crate) mod inspect;
mod min_hold;
mod multi;
pub(crate) mod multi_guard;
pub(crate) mod options;
mod owners;
mod plan;
pub(crate) mod shutdown;
pub(crate) mod ticket;
mod wait_free;

/// A client for distributed locks on one Redis server, or on a Redlock quorum of
/// independent masters ([`LockClient::redlock`]).
///
/// Cheap to clone: clones share one connection pool, one renewal thread and one
/// waiter thread. The threads stop, and are joined, when the last clone is dropped
/// (one still in a call to a server that does not answer is left to end when the
/// call does, within the read timeout); guards that outlive it are no longer renewed and stop reporting
/// [`is_held`](LockGuard::is_held) once their validity runs out. That drop waits
/// on no reply from Redis (the session record's delete is sent, not waited for),
/// so it takes local work only, also against a frozen server (except the
/// releases dropped guards queued with
/// [`release_in_background`](crate::LockClientBuilder::release_in_background), waited
/// for up to the read timeout); use
/// [`shutdown`](Self::shutdown) first to release what the guards still hold.
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
    /// The client's liveness session, when it keeps one: every lease is tied to it.
    pub(crate) liveness: Option<Arc<Liveness>>,
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
    /// Set by [`LockClient::shutdown`]: a lease acquired after it is given back.
    pub(crate) stopped: AtomicBool,
    /// The critical findings of the server check `build()` ran.
    pub(crate) build_findings: Vec<crate::finding::Finding>,
}

impl Drop for Inner {
    /// The waiter threads are told to stop first, and end while the renewal and
    /// I/O threads are stopped and joined (in field order: the renewal thread's
    /// last act, the session record's delete, goes to the I/O threads before they
    /// stop); none of it waits on a reply from Redis, except the releases dropped
    /// guards queued (`release_in_background`), waited for up to the read timeout.
    fn drop(&mut self) {
        let by = Instant::now() + self.hub.topology.read_timeout();
        if self.hub.queued.drain(by) > 0 {
            log::warn!("dropped client: queued releases left to their i/o threads");
        }
        if let Some(waiters) = &mut self.waiters {
            waiters.signal();
        }
    }
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
        build_findings: Vec<crate::finding::Finding>,
    ) -> Result<Self> {
        let hub = Arc::new(Hub::new(
            Arc::clone(&topology),
            Arc::clone(&counters),
            backoff,
            id.tag(),
            settings.background,
        ));
        let notifier = Notifier::spawn()?;
        let liveness = settings.liveness.map(|l| Arc::new(Liveness::new(l)));
        let session = SessionWrite::new(&settings.key_prefix, &id, liveness.clone())
            .replicated(settings.replicas.map(|r| (r.count, r.timeout)));
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
                liveness,
                reentrant,
                settings,
                hub,
                renewer,
                _io: io,
                notifier,
                waiters,
                stopped: AtomicBool::new(false),
                build_findings,
            }),
        })
    }

    /// Acquires the lock on `key`, waiting as long as it takes.
    ///
    /// Waits for a release message (or the holder's TTL, whichever comes first) and
    /// retries; never returns while someone else holds the lock. The lease is renewed
    /// in the background per the client's [`Renewal`](crate::Renewal) policy.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty key, [`Error::Redis`] when Redis fails or
    /// does not answer within the configured timeouts (the lock may then have been
    /// taken: redlease removes it in the background),
    /// [`Error::Shutdown`] when the client is [closed](Self::close),
    /// [`Error::NotReplicated`] when [replica confirmation](crate::LockClientBuilder::replicas)
    /// is on and too few replicas acknowledged the lock (it was given back).
    pub fn lock(&self, key: &str) -> Result<LockGuard> {
        let acquired = self.acquire(key, &LockOptions::default(), Wait::InLine(None))?;
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
        self.acquire(key, &LockOptions::default(), Wait::Once)
    }

    /// Acquires the lock on `key`, waiting at most `wait`.
    ///
    /// Returns `Ok(None)` when the wait ran out with someone else still holding it.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, key: &str, wait: Duration) -> Result<Option<LockGuard>> {
        let deadline = Instant::now().checked_add(wait);
        self.acquire(key, &LockOptions::default(), Wait::InLine(deadline))
    }

    /// Acquires the lock on `key`, waiting until `deadline` at most.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, key: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        self.acquire(key, &LockOptions::default(), Wait::InLine(Some(deadline)))
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
        let deadline = opts.deadline_from(Instant::now());
        self.acquire(key, opts, Wait::InLine(deadline))
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
        guard.finish(out)
    }

    /// A snapshot of this client's counters.
    pub fn metrics(&self) -> Metrics {
        let mut m = self.inner.hub.counters.snapshot();
        m.dead_holders_broken = self.inner.id.broken().load(Ordering::Relaxed);
        m
    }

    /// Stops new lock calls and wakes every waiting call with [`Error::Shutdown`].
    ///
    /// Held guards keep being renewed until released or until the last clone of
    /// the client is dropped; [`shutdown`](Self::shutdown) releases them too.
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

    /// Watches release channels through this client's waiter threads for as long
    /// as the returned subscription lives (an election's observer); `None` when
    /// the client has no pub/sub.
    pub(crate) fn subscribe(&self, channels: &[String]) -> Option<(Subscription, Receiver<Wake>)> {
        let waiters = self.inner.waiters.as_ref()?;
        Subscription::new(&self.inner.hub, waiters, channels)
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
        send::<crate::MultiGuard>();
        send_sync::<Error>();
    }
}
