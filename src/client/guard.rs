//! [`LockGuard`]: a held lease, released when dropped.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::options::check_ttl;
use crate::error::{Error, Operation, Result};
use crate::lease::{LeaseLost, LeaseState, LossReason};
use crate::metrics::bump;
use crate::metrics::export::Hold;
use crate::scheme::{Extend, Release};
use crate::threads::wait::{Hub, release, release_queued};

/// A held lock. Releases it when dropped (also while unwinding from a panic):
/// on the dropping thread, or, with
/// [`release_in_background`](crate::LockClientBuilder::release_in_background), on
/// the node's I/O thread while the drop returns at once.
///
/// Made by [`LockClient::lock`](crate::LockClient::lock),
/// [`try_lock`](crate::LockClient::try_lock),
/// [`try_lock_for`](crate::LockClient::try_lock_for),
/// [`try_lock_until`](crate::LockClient::try_lock_until) and
/// [`lock_with`](crate::LockClient::lock_with).
///
/// The guard guards a key in Redis, not local data, so it has no `Deref`. A lease
/// can end while the guard lives (expiry, a paused process, someone deleting the
/// key); [`is_held`](Self::is_held), [`check`](Self::check) and [`lost`](Self::lost)
/// say so, and [`fence`](Self::fence) lets downstream systems reject late writers.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    state: Arc<LeaseState>,
    /// Taken by the first release, so releasing twice is a no-op.
    hub: Option<Arc<Hub>>,
    fence: Option<u64>,
    lost: OnceLock<Receiver<LeaseLost>>,
    hold: Hold,
    /// Whether a drop queues the release for the I/O thread.
    background: bool,
}

impl LockGuard {
    pub(crate) fn new(hub: Arc<Hub>, state: Arc<LeaseState>, fence: Option<u64>) -> Self {
        Self {
            hold: Hold::start(state.backend.label()),
            state,
            background: hub.background,
            hub: Some(hub),
            fence,
            lost: OnceLock::new(),
        }
    }

    /// The same guard, whose drop queues its release for the I/O thread when `on`.
    pub(crate) fn release_in_background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// The value stored for this lease (a token, a permit id).
    pub(crate) fn value(&self) -> String {
        self.state.held.lock().value.clone()
    }

    /// The lease this guard holds.
    pub(crate) fn lease(&self) -> &LeaseState {
        &self.state
    }

    /// The lease this guard holds, shared (for a view that outlives a borrow).
    pub(crate) fn lease_shared(&self) -> Arc<LeaseState> {
        Arc::clone(&self.state)
    }

    /// Hands this guard's release to the caller (a guard of several names that
    /// releases them together): dropping it sends nothing afterwards. `None` when
    /// it was released already.
    pub(crate) fn take_release(&mut self) -> Option<(Arc<Hub>, Arc<LeaseState>)> {
        let hub = self.hub.take()?;
        self.hold.end();
        Some((hub, Arc::clone(&self.state)))
    }

    /// The lock key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The fencing token taken with the lock, when fencing was asked for.
    ///
    /// Strictly increasing per key across all clients: pass it with every write to
    /// a downstream system and have that system reject a token lower than the
    /// highest it has seen. This is what keeps a holder that was paused past its
    /// lease from overwriting the work of the next holder.
    ///
    /// Not consecutive: a fence is at least the Redis server's clock in
    /// microseconds since the Unix epoch, so that a failover which lost the last
    /// increments of the counter still gives higher fences (see the crate docs).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The instant (local monotonic clock) until which the lease is surely valid:
    /// when the last confirmed acquire or renewal was sent, plus the TTL, minus a
    /// clock-drift allowance (2 ms + 1 % of the TTL).
    pub fn valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// Whether the lease is still ours: not known lost, and within
    /// [`valid_until`](Self::valid_until). A local check; never blocks. False once
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) has ended the lease.
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// Like [`is_held`](Self::is_held), as a `Result` for use with `?` right before a
    /// side effect that needs the lock.
    ///
    /// # Errors
    /// [`Error::LockLost`] once the lease is lost or past its validity.
    pub fn check(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::LockLost {
                key: self.state.key.as_str().into(),
            })
        }
    }

    /// A channel that receives one [`LeaseLost`] message if the lease is lost.
    ///
    /// The message comes from the renewal thread when a renewal finds the key gone
    /// or taken, when renewals fail until the validity ends, when a fixed lease runs
    /// out, or when the client is dropped (reason [`LossReason::Shutdown`]: nothing
    /// renews the lease any more), or when [`LockClient::shutdown`](crate::LockClient::shutdown)
    /// ended the lease while the guard lived (reason [`LossReason::Released`], or
    /// [`Expired`](LossReason::Expired) / [`Taken`](LossReason::Taken) when its
    /// release found it gone). After a normal release no message is sent; the
    /// channel disconnects once the renewal thread has dropped the lease. Use it in
    /// `crossbeam_channel::select!` to abort work.
    pub fn lost(&self) -> &Receiver<LeaseLost> {
        self.lost.get_or_init(|| self.state.lost_receiver())
    }

    /// Sets the lease's remaining time to `ttl` from now, if it is still ours.
    ///
    /// Background renewals then use `ttl` too. One round trip, bounded by the
    /// client's timeouts.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the key is gone or someone else's (the lease is then
    /// marked lost), [`Error::Config`] for a TTL out of range, [`Error::Redis`]
    /// when Redis fails or does not answer in time; validity is then unchanged.
    /// [`Error::Shutdown`] once [`LockClient::shutdown`](crate::LockClient::shutdown)
    /// ended the lease (nothing is sent).
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        check_ttl("ttl", ttl)?;
        let hub = self.hub.as_ref().ok_or(Error::Shutdown)?;
        let mut held = self.state.held.lock();
        // Only a shutdown releases a lease whose guard lives.
        if held.released {
            return Err(Error::Shutdown);
        }
        // Never shorter than what is left of a minimum hold (the lease's validity
        // still counts `ttl`).
        let stored = ttl.max(self.state.min_hold_left(Instant::now()).unwrap_or_default());
        let (new_value, sent, outcome) = hub.topology.extend(
            &*self.state.backend,
            &self.state.key,
            &held.value,
            &held.maybe,
            stored,
        );
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                if e.is_timeout() || e.is_connection_error() {
                    // No reply: the extend may have landed and rewritten the value.
                    held.unconfirmed(new_value);
                }
                return Err(self.context(e, Operation::Extend, hub));
            }
        };
        match outcome {
            Extend::Extended => {
                held.confirmed(new_value);
                self.state.confirm(sent, ttl);
                Ok(())
            }
            outcome => {
                drop(held);
                let reason = if outcome == Extend::Taken {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                };
                self.state.notify_lost(reason, &hub.counters);
                Err(Error::LockLost {
                    key: self.state.key.as_str().into(),
                })
            }
        }
    }

    /// Releases the lock and says what Redis found.
    ///
    /// [`Release::Expired`] and [`Release::Taken`] mean the lease ended before the
    /// release: work done under it may have overlapped another holder's. One round
    /// trip, bounded by the client's timeouts. Inside a
    /// [`min_hold`](crate::LockOptions::min_hold) the key is kept until the hold
    /// ends rather than deleted, and a lock still ours says [`Release::Released`].
    ///
    /// # Errors
    /// [`Error::Redis`] when the release could not be sent or got no answer in
    /// time; the lock then runs out with its TTL. [`Error::Shutdown`] when
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) ended the lease first
    /// (released it, found it gone, or left it to expire: its report says which);
    /// nothing is sent then. Not `Ok(Release::Released)`: the work done under the
    /// guard did not run under the lock to its end.
    pub fn unlock(mut self) -> Result<Release> {
        self.release(false).unwrap_or(Ok(Release::Released))
    }

    /// Releases the lock after a closure under it returned `out` (the `with_*`
    /// calls): `out` when the lease was still ours, else [`Error::LockLost`].
    pub(crate) fn finish<R>(self, out: R) -> Result<R> {
        let key = self.key().into();
        match self.unlock() {
            Ok(outcome) if outcome.was_held() => Ok(out),
            // A shutdown ended the lease while the closure ran.
            Ok(_) | Err(Error::Shutdown) => Err(Error::LockLost { key }),
            Err(e) => Err(e),
        }
    }

    /// Shared by `unlock` and `Drop`: runs once, `None` on later calls (and for a
    /// drop whose release was queued for the I/O thread, which counts it).
    fn release(&mut self, dropped: bool) -> Option<Result<Release>> {
        let hub = self.hub.take()?;
        self.hold.end();
        // A caller of this client waiting for the key takes the lease, or the lock,
        // over directly; otherwise compare-and-delete, now or in the background.
        let outcome = if dropped && self.background {
            release_queued(&hub, &self.state)?
        } else {
            release(&hub, &self.state)
        };
        match &outcome {
            Ok(Release::Released) => bump(&hub.counters.released, 1),
            // The client's shutdown released it (and counted it): nothing sent.
            Ok(_) | Err(Error::Shutdown) => {}
            Err(_) => bump(&hub.counters.release_errors, 1),
        }
        Some(outcome.map_err(|e| self.context(e, Operation::Release, &hub)))
    }

    /// Names the call, the key and the limit that ran out in a Redis failure.
    fn context(&self, e: Error, op: Operation, hub: &Hub) -> Error {
        e.during(op, &self.state.key, hub.topology.subscriber(0).limits())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        match self.release(true) {
            // The client's shutdown ended the lease and reported it.
            Some(Err(Error::Shutdown)) => {}
            // The error names the call and the key.
            Some(Err(e)) => log::warn!("dropped guard: {e}"),
            Some(Ok(outcome)) if !outcome.was_held() => {
                log::warn!(
                    "lock `{}` had ended before release: {outcome:?}",
                    self.state.key
                );
            }
            _ => {}
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.state.key)
            .field("fence", &self.fence)
            .field("held", &self.is_held())
            .field("valid_until", &self.valid_until())
            .finish_non_exhaustive()
    }
}
