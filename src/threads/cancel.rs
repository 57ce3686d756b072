//! [`CancelToken`]: stops a blocked wait from another thread.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

/// Cancels waits for a lock from another thread.
///
/// Pass a clone in [`LockOptions::cancel`](crate::LockOptions::cancel); calling
/// [`cancel`](Self::cancel) makes every wait using it return
/// [`Error::Cancelled`](crate::Error::Cancelled) at once, and every later wait
/// return it before its first attempt. A cancelled token stays cancelled.
///
/// # Examples
/// ```no_run
/// # fn main() -> redlease::Result<()> {
/// use redlease::{CancelToken, LockClient, LockOptions};
/// let client = LockClient::builder("redis://127.0.0.1/").build()?;
/// let cancel = CancelToken::new();
/// let stopper = cancel.clone();
/// std::thread::spawn(move || stopper.cancel());
/// match client.lock_with("report", &LockOptions::new().cancel(cancel)) {
///     Err(e) if matches!(e, redlease::Error::Cancelled { .. }) => println!("gave up"),
///     other => drop(other?),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

/// Wakes one registered wait.
type Wakeup = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next: AtomicU64,
    waits: Mutex<Vec<(u64, Wakeup)>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait that uses this token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
        for (_, wake) in self.inner.waits.lock().drain(..) {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Sends `msg` to `tx` on cancellation until the returned handle is dropped.
    pub(crate) fn watch<T: Clone + Send + Sync + 'static>(&self, tx: &Sender<T>, msg: T) -> Watch {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let tx = tx.clone();
        let wake: Wakeup = Arc::new(move || {
            let _ = tx.send(msg.clone());
        });
        self.inner.waits.lock().push((id, Arc::clone(&wake)));
        // Cancelled between the caller's check and the push: wake it ourselves.
        if self.is_cancelled() {
            wake();
        }
        Watch {
            token: self.clone(),
            id,
        }
    }
}

/// Stops a wait's registration with a [`CancelToken`] when dropped.
pub(crate) struct Watch {
    token: CancelToken,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.token
            .inner
            .waits
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Msg {
        Cancelled,
        Shutdown,
    }

    #[test]
    fn cancel_wakes_registered_waits_once_and_later_waits_at_once() {
        let token = CancelToken::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        let watch = token.watch(&tx, Msg::Cancelled);
        assert!(rx.try_recv().is_err());
        token.clone().cancel();
        assert!(token.is_cancelled());
        assert_eq!(rx.try_recv(), Ok(Msg::Cancelled));
        assert!(rx.try_recv().is_err());
        drop(watch);
        // A wait that starts after the cancel is woken as it registers.
        let _late = token.watch(&tx, Msg::Shutdown);
        assert_eq!(rx.try_recv(), Ok(Msg::Shutdown));
    }

    #[test]
    fn a_dropped_watch_is_forgotten_and_not_woken() {
        let token = CancelToken::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        let kept = token.watch(&tx, Msg::Shutdown);
        drop(token.watch(&tx, Msg::Cancelled));
        assert_eq!(token.inner.waits.lock().len(), 1);
        token.cancel();
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [Msg::Shutdown]);
        drop(kept);
        assert!(token.inner.waits.lock().is_empty());
    }
}
