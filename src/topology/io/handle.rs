//! [`IoThread`]: the client's handle of a node's I/O thread, which stops the
//! thread and joins it (within a bound) when dropped.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Receiver;

/// A node thread, kept by the client: dropping it stops the thread (an I/O thread
/// first makes one last attempt at every release still pending) and joins it.
pub(crate) struct IoThread {
    stop: Box<dyn Fn() + Send + Sync>,
    handle: Option<JoinHandle<()>>,
    /// Disconnected when the thread ends; with it, a drop waits [`JOIN_WAIT`]
    /// at most, and leaves a thread still in a network call to end by itself.
    ended: Option<Receiver<()>>,
}

/// How long dropping a node thread waits for it to end: local work (its last
/// releases get 50 ms) fits; a call to a frozen server, bounded by the
/// read timeout, is not waited for: the thread ends when it returns.
const JOIN_WAIT: Duration = Duration::from_millis(60);

impl IoThread {
    /// The handle of the thread `handle`, which `stop` tells to end.
    pub(crate) fn new(handle: JoinHandle<()>, stop: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            stop: Box::new(stop),
            handle: Some(handle),
            ended: None,
        }
    }

    /// The same, waiting on its drop until `ended` disconnects, [`JOIN_WAIT`] at
    /// most.
    pub(super) fn ending(mut self, ended: Receiver<()>) -> Self {
        self.ended = Some(ended);
        self
    }
}

#[cfg(feature = "cluster")]
impl IoThread {
    /// A handle with no thread of its own whose drop runs `stop` (which drops
    /// the handles of a group of threads).
    pub(crate) fn group(stop: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            stop: Box::new(stop),
            handle: None,
            ended: None,
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        (self.stop)();
        let Some(handle) = self.handle.take() else {
            return;
        };
        if let Some(ended) = &self.ended
            && ended.recv_timeout(JOIN_WAIT).is_err_and(|e| e.is_timeout())
        {
            // In a call to a server that does not answer: it ends when the call
            // does (its timeouts bound it), without the client waiting.
            log::debug!("an i/o thread is left to finish its call");
            return;
        }
        let _ = handle.join();
    }
}

impl std::fmt::Debug for IoThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoThread").finish_non_exhaustive()
    }
}
