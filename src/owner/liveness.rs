//! A client's liveness session, as its leases see it: how long the session is
//! known to live ([`Liveness::valid_until`]), and which session a lease was taken
//! under (its epoch).
//!
//! The session record in Redis (`owner::SessionWrite`) is written once with the
//! liveness as its TTL and from then on only extended (`PEXPIRE`, which never
//! creates a key). An extend answered 1, sent at `sent`, proves the record lives
//! until at least `sent + liveness` by the server's clock; less the drift
//! allowance, that is how long every lease of the session may count on it. An
//! extend answered 0 means the record is gone: the session ended, every lease
//! taken under it is lost, and a new record starts the next epoch.
//!
//! Only the I/O thread that sends the session's writes moves the validity, and
//! only the renewal thread ends an epoch; guards read three atomics.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use crate::time::{from_nanos, to_nanos, validity_end};

/// The reschedule id that tells the renewal thread to look at the session.
pub(crate) const SESSION_WAKE: u64 = u64::MAX;

/// The liveness session of one client.
#[derive(Debug)]
pub(crate) struct Liveness {
    ttl: Duration,
    /// The session's number within the client: 1 for the first record, one more
    /// each time a record is found gone and written again.
    epoch: AtomicU64,
    /// When the current epoch's record was first confirmed (lease-clock nanos):
    /// a lease whose acquire left before it may have been stored while no record
    /// was there. `u64::MAX` until then.
    ready_at: AtomicU64,
    /// The end of the session's validity (lease-clock nanos): the send time of
    /// the last confirmed write plus the liveness, less the drift allowance.
    valid_until: AtomicU64,
    /// Set when an extend found the record gone; the renewal thread takes it.
    gone: AtomicBool,
    /// The renewal thread's reschedule channel, woken with [`SESSION_WAKE`].
    wake: OnceLock<Sender<u64>>,
    /// Where lock calls wait for a new epoch's record (see [`Self::wait_ready`]).
    ready_lock: Mutex<()>,
    ready_cv: Condvar,
}

/// The session a lease was taken under.
#[derive(Debug, Clone)]
pub(crate) struct SessionHold {
    pub(crate) live: std::sync::Arc<Liveness>,
    epoch: u64,
    /// When the lease's acquire left (lease-clock nanos).
    sent: u64,
}

impl Liveness {
    /// A session that keeps `ttl` of liveness; not valid until its record is
    /// confirmed.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            epoch: AtomicU64::new(1),
            ready_at: AtomicU64::new(u64::MAX),
            valid_until: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            wake: OnceLock::new(),
            ready_lock: Mutex::new(()),
            ready_cv: Condvar::new(),
        }
    }

    /// The liveness: the record's TTL.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the record is extended: three tries per liveness.
    pub(crate) fn refresh_every(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(1))
    }

    /// The current epoch.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Sets the channel that wakes the renewal thread when the record is gone.
    pub(crate) fn wake_with(&self, tx: Sender<u64>) {
        let _ = self.wake.set(tx);
    }

    /// A write of epoch `epoch`'s record, sent at `sent`, was confirmed.
    pub(crate) fn confirmed(&self, epoch: u64, sent: Instant) {
        if epoch != self.epoch() {
            return;
        }
        let end = to_nanos(validity_end(sent, self.ttl));
        let _ready = self.ready_lock.lock();
        self.valid_until.fetch_max(end, Ordering::SeqCst);
        if self.ready_at.load(Ordering::SeqCst) == u64::MAX {
            self.ready_at
                .store(to_nanos(Instant::now()), Ordering::SeqCst);
        }
        self.ready_cv.notify_all();
    }

    /// Waits, at most until `by`, until the session vouches for a lock taken
    /// now: its epoch's record confirmed, and its validity not over. A lock
    /// taken before a new epoch's record is there could be stored while no
    /// record vouched for it, and one taken while the session is past its
    /// validity (a pause, a cut) would be lost when the record is found gone:
    /// neither would ever count as held. Two atomic loads and a clock read when
    /// the session vouches (always, but after a pause or a lost record).
    pub(crate) fn wait_ready(&self, by: Instant) {
        let vouches = || self.ready() && Instant::now() < self.valid_until();
        if vouches() {
            return;
        }
        let mut ready = self.ready_lock.lock();
        while !vouches() && !self.ready_cv.wait_until(&mut ready, by).timed_out() {}
    }

    /// An extend of epoch `epoch`'s record found it gone: the renewal thread is
    /// woken to end the epoch.
    pub(crate) fn found_gone(&self, epoch: u64) {
        if epoch != self.epoch() {
            return;
        }
        self.gone.store(true, Ordering::SeqCst);
        if let Some(tx) = self.wake.get() {
            let _ = tx.send(SESSION_WAKE);
        }
    }

    /// Whether a record was found gone since the last call (renewal thread).
    pub(crate) fn take_gone(&self) -> bool {
        self.gone.swap(false, Ordering::SeqCst)
    }

    /// Ends the current epoch and starts the next, not valid until its record is
    /// confirmed (renewal thread, or the client's shutdown).
    pub(crate) fn next_epoch(&self) -> u64 {
        self.ready_at.store(u64::MAX, Ordering::SeqCst);
        self.valid_until.store(0, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The end of the current epoch's validity.
    pub(crate) fn valid_until(&self) -> Instant {
        from_nanos(self.valid_until.load(Ordering::SeqCst))
    }

    /// Whether the current epoch's record has been confirmed once.
    pub(crate) fn ready(&self) -> bool {
        self.ready_at.load(Ordering::SeqCst) != u64::MAX
    }

    /// The hold of a lease whose acquire left at `sent`, under the current epoch.
    pub(crate) fn hold(self: &std::sync::Arc<Self>, sent: Instant) -> SessionHold {
        SessionHold {
            live: std::sync::Arc::clone(self),
            epoch: self.epoch(),
            sent: to_nanos(sent),
        }
    }
}

impl SessionHold {
    /// How long the session vouches for the lease (lease-clock nanos): 0 once its
    /// epoch ended, or when its acquire left before the epoch's record was there.
    pub(crate) fn valid_until_nanos(&self) -> u64 {
        let live = &*self.live;
        let ready = live.ready_at.load(Ordering::SeqCst);
        let until = live.valid_until.load(Ordering::SeqCst);
        if live.epoch() != self.epoch || self.sent < ready {
            return 0;
        }
        until
    }

    /// Whether the lease's epoch has ended.
    pub(crate) fn ended(&self) -> bool {
        self.live.epoch() != self.epoch
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_lease_is_vouched_for_only_within_its_epoch_and_after_its_record() {
        let live = Arc::new(Liveness::new(Duration::from_secs(2)));
        let early = live.hold(Instant::now());
        assert_eq!(early.valid_until_nanos(), 0, "no record confirmed yet");
        let sent = Instant::now();
        live.confirmed(1, sent);
        // An acquire that left before the record was confirmed may have been
        // stored while none was there.
        assert_eq!(early.valid_until_nanos(), 0);
        let hold = live.hold(Instant::now());
        assert_eq!(
            hold.valid_until_nanos(),
            to_nanos(validity_end(sent, Duration::from_secs(2)))
        );
        // A confirmation never moves the validity back.
        live.confirmed(1, sent.checked_sub(Duration::from_millis(500)).unwrap());
        assert!(hold.valid_until_nanos() >= to_nanos(validity_end(sent, live.ttl())));
        live.found_gone(1);
        assert!(live.take_gone());
        assert!(!live.take_gone());
        assert_eq!(live.next_epoch(), 2);
        assert!(hold.ended());
        assert_eq!(hold.valid_until_nanos(), 0);
        // A late answer of the ended epoch moves nothing.
        live.confirmed(1, Instant::now());
        assert!(!live.ready());
        live.confirmed(2, Instant::now());
        assert!(live.ready());
        assert_eq!(hold.valid_until_nanos(), 0, "an ended epoch stays ended");
        assert!(live.hold(Instant::now()).valid_until_nanos() > 0);
    }
}
