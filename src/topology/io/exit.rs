//! The releases still queued when the process ends: a client kept in a `static`
//! is never dropped, nor is one whose `main` calls `std::process::exit`, so its
//! drop never sends what dropped guards queued
//! (`LockClientBuilder::release_in_background`). One exit hook per process sends
//! it: it waits for every live client's queue to empty, each for at most the
//! client's read timeout, as the client's drop would.
//!
//! The hook is registered at load time (the `dtor` crate: a `__cxa_atexit`
//! entry, so it runs among the `atexit` handlers, in `exit`, while the I/O
//! threads still run) and armed by the first release a client queues ([`watch`]):
//! until then, and once every queue it knows is gone, it returns after one atomic
//! load. The registry holds `Weak` references, so it keeps no client alive.
//!
//! What it does at exit is small on purpose: no user code (no logging: the
//! logger is the user's; no callback; no drop of a client's state: the queues it
//! upgraded are leaked, the process is ending), no I/O of its own (the I/O
//! threads send and read), no lock taken without a bound, no panic. So an `exit`
//! called from a lock callback, or while the I/O threads are in the middle of a
//! round trip, returns within the longest read timeout.
//!
//! It cannot run when the process does not go through `exit`: `SIGKILL`,
//! `abort`, a panic with `panic = "abort"`, a signal whose default action ends
//! the process, `_exit`. Those locks expire with their TTL.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Queued;

/// How long the hook waits for the registry's lock. It is held only to add a
/// queue (no user code, no I/O), so this is never reached unless the process
/// exits in the middle of that.
const REGISTRY_WAIT: Duration = Duration::from_millis(100);

/// Every client queue the hook looks at, with its bound (the client's read
/// timeout).
static WATCHED: Mutex<Vec<(Weak<Queued>, Duration)>> = Mutex::new(Vec::new());
/// Set by the first [`watch`]: before it the hook does nothing.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Makes the exit hook send what `queued` holds when the process exits, waiting
/// at most `bound` for it. Once per queue; the first call arms the hook.
pub(crate) fn watch(queued: &Arc<Queued>, bound: Duration) {
    if queued.watched.load(Ordering::Relaxed) || queued.watched.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut watched = WATCHED.lock();
    // The queues of dropped clients go, so a program that builds many clients
    // keeps a registry as long as its live ones.
    watched.retain(|(q, _)| q.strong_count() > 0);
    watched.push((Arc::downgrade(queued), bound));
    ARMED.store(true, Ordering::Release);
}

/// Waits until every watched queue is sent and answered, each until its bound
/// counted from now; returns at once when nothing is queued.
fn flush() {
    if !ARMED.load(Ordering::Acquire) {
        return;
    }
    let began = Instant::now();
    let Some(watched) = WATCHED.try_lock_for(REGISTRY_WAIT) else {
        return;
    };
    let live: Vec<(Arc<Queued>, Duration)> = watched
        .iter()
        .filter_map(|(q, bound)| Some((q.upgrade()?, *bound)))
        .collect();
    drop(watched);
    // The I/O threads send every queue at once: waiting for them in turn, each
    // until its own bound from the start, takes the longest bound at most.
    for (queued, bound) in &live {
        queued.drain(began + *bound);
    }
    // A client dropped meanwhile would be dropped here, on the exiting thread,
    // with whatever its leases hold (a user's callback): the process is ending,
    // so these references are leaked instead.
    std::mem::forget(live);
}

dtor::declarative::dtor! {
    // The exit hook. `unsafe` is the `dtor` crate's acknowledgement that this runs
    // after `main`: it takes only `parking_lot` locks and waits (whose thread data
    // falls back to the stack once the exiting thread's thread-locals are gone),
    // reads the clock, and cannot panic (no indexing, no `unwrap`, no I/O).
    #[dtor(unsafe)]
    fn flush_at_exit() {
        flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_watched_once_and_not_kept_alive() {
        let queued = Arc::new(Queued::default());
        watch(&queued, Duration::from_secs(1));
        watch(&queued, Duration::from_secs(1));
        let mine = |w: &Vec<(Weak<Queued>, Duration)>| {
            w.iter()
                .filter(|(q, _)| std::ptr::eq(q.as_ptr(), Arc::as_ptr(&queued)))
                .count()
        };
        assert_eq!(mine(&WATCHED.lock()), 1);
        assert!(ARMED.load(Ordering::Acquire));
        let weak = Arc::downgrade(&queued);
        drop(queued);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn the_hook_returns_at_once_when_nothing_is_queued() {
        let queued = Arc::new(Queued::default());
        watch(&queued, Duration::from_secs(5));
        let began = Instant::now();
        flush();
        assert!(began.elapsed() < Duration::from_secs(1));
    }
}
