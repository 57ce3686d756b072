//! [`Observer`]: the leaders of an election as they change, read by a thread
//! of its own, woken by the client's waiter thread.
//!
//! An observer opens no connection: it watches the name's release and elected
//! channels through the client's one pub/sub connection (one per master on a
//! sharded Redis 7 cluster), as [`LockClient::wait_free`] does, so a client
//! observing a hundred elections still holds one subscriber connection.

use std::fmt;
use std::sync::Weak;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvError, RecvTimeoutError, Sender, TryRecvError, select};

use super::{Election, Leader};
use crate::client::{Inner, LockClient};
use crate::error::{Error, Result};
use crate::scheme::{companion, elected_channel};
use crate::threads::wait::{Subscription, Wake};

/// The longest an [`Observer`] goes without reading the leader again, when no
/// message woke it; also how late it may notice that it should stop.
pub const OBSERVE_POLL: Duration = Duration::from_millis(500);

/// The leaders of an election, from [`Election::observe`]: the current one
/// first, then each change (`None`: nobody leads).
///
/// Holds one value at most, always the latest: reading late skips leaders,
/// never returns one older than a leader already read. The channel
/// disconnects when the client is closed or dropped (within
/// [`OBSERVE_POLL`]). Dropping the observer stops its thread within
/// [`OBSERVE_POLL`].
pub struct Observer {
    rx: Receiver<Option<Leader>>,
    /// Dropped with the observer: its thread sees the channel disconnected.
    _stop: Sender<()>,
}

impl Observer {
    pub(crate) fn spawn(election: &Election) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let client = &election.handle.client;
        let key = election.key();
        // Watched before the first read, so no change after it is missed (a
        // change before the subscription is confirmed: the confirmation wakes
        // the thread, which reads again).
        let wakes = client.subscribe(&[companion(key, "released"), elected_channel(key)]);
        let watch = Watch {
            client: std::sync::Arc::downgrade(&client.inner),
            name: election.name().to_owned(),
            wakes,
            tx,
            drain: rx.clone(),
            stopped,
        };
        thread::Builder::new()
            .name("redlease-watch".into())
            .spawn(move || watch.run())
            .map_err(Error::Spawn)?;
        Ok(Self { rx, _stop: stop })
    }

    /// The receiving end, for `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &Receiver<Option<Leader>> {
        &self.rx
    }

    /// Waits for the next value: the current leader first, then each change.
    ///
    /// # Errors
    /// [`RecvError`] once the client is closed or dropped.
    pub fn recv(&self) -> Result<Option<Leader>, RecvError> {
        self.rx.recv()
    }

    /// Waits at most `timeout` for the next value.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`] when no change came in time,
    /// [`RecvTimeoutError::Disconnected`] once the client is closed or dropped.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Leader>, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("pending", &self.rx.len())
            .finish_non_exhaustive()
    }
}

/// The observer thread's state. It holds the client weakly: it never keeps
/// the client's threads alive.
struct Watch {
    client: Weak<Inner>,
    name: String,
    /// The name's release and elected channels, watched through the client's
    /// waiter threads, and their wake-ups; `None`: poll only (a client without
    /// pub/sub).
    wakes: Option<(Subscription, Receiver<Wake>)>,
    tx: Sender<Option<Leader>>,
    /// A receiver of our own, to replace a value nobody read yet.
    drain: Receiver<Option<Leader>>,
    stopped: Receiver<()>,
}

impl Watch {
    fn run(self) {
        // The term last sent (0: nobody led); `None` before the first send.
        let mut last: Option<u64> = None;
        loop {
            if !self.step(&mut last) {
                return;
            }
            // Woken by a message or a change of the subscription, or after one
            // poll interval. A disconnected wake-up channel means the client's
            // waiter threads stopped: the next read finds the client gone.
            let Some((_, wakes)) = &self.wakes else {
                if self.pause() {
                    return;
                }
                continue;
            };
            select! {
                recv(wakes) -> woke => {
                    if woke.is_err() && self.pause() {
                        return;
                    }
                    // One read answers every message that came meanwhile.
                    while wakes.try_recv().is_ok() {}
                }
                recv(self.stopped) -> _ => return,
                default(OBSERVE_POLL) => {}
            }
        }
    }

    /// Reads the leader and sends it when it changed. `false`: stop (the
    /// observer or the client is gone, or the client is closed).
    fn step(&self, last: &mut Option<u64>) -> bool {
        if self.stopped.try_recv() != Err(TryRecvError::Empty) {
            return false;
        }
        match self.read() {
            Some(Ok(leader)) => {
                // Terms are above 0 (at least the server's clock in µs).
                let term = leader.as_ref().map_or(0, Leader::term);
                if *last != Some(term) {
                    // Replace a value nobody read: the channel holds the latest.
                    let _ = self.drain.try_recv();
                    if self.tx.try_send(leader).is_ok() {
                        *last = Some(term);
                    }
                }
                true
            }
            Some(Err(e)) => {
                log::debug!("observing `{}`: {e}", self.name);
                true
            }
            None => false,
        }
    }

    /// Waits one poll interval; `true`: the observer was dropped.
    fn pause(&self) -> bool {
        !matches!(
            self.stopped.recv_timeout(OBSERVE_POLL),
            Err(RecvTimeoutError::Timeout)
        )
    }

    /// The leader now; `None` once the client is closed or dropped.
    fn read(&self) -> Option<Result<Option<Leader>>> {
        let inner = self.client.upgrade()?;
        if inner.hub.shutdown.is_cancelled() {
            return None;
        }
        let client = LockClient { inner };
        Some(client.election(&self.name).and_then(|e| e.leader()))
    }
}
