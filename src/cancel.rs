//! [`CancelToken`]: stops a blocked wait from another thread.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::wait::Wake;

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

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next: AtomicU64,
    waits: Mutex<Vec<(u64, Sender<Wake>, Wake)>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait that uses this token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
        for (_, tx, wake) in self.inner.waits.lock().drain(..) {
            let _ = tx.send(wake);
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Sends `wake` to `tx` on cancellation until the returned handle is dropped.
    pub(crate) fn watch(&self, tx: &Sender<Wake>, wake: Wake) -> Watch {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.inner.waits.lock().push((id, tx.clone(), wake));
        // Cancelled between the caller's check and the push: wake it ourselves.
        if self.is_cancelled() {
            let _ = tx.send(wake);
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
            .retain(|(id, _, _)| *id != self.id);
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
