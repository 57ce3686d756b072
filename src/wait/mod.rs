//! The waiter thread: one pub/sub connection per client that turns release
//! messages into wake-ups, one local waiter per message, oldest first.
//!
//! Callers never block on the thread. A caller about to wait puts a [`WaitSlot`] in
//! the thread's queue for the key's channel and sleeps on the slot's own channel,
//! for at most the holder's remaining TTL (or a backoff step when pub/sub is down),
//! so a holder that dies without publishing delays waiters by at most its TTL.
//!
//! Data flows one way: callers send [`Command`]s, the thread sends [`Wake`]s back on
//! each slot's own channel. The thread owns the queues; callers only read the
//! [`Shared`] view (is the connection up, which channels are subscribed).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::metrics::Counters;
use crate::topology::Topology;

mod handoff;
mod line;
mod shared;
mod slot;

use shared::Shared;

pub(crate) use handoff::{Offers, Want, release};
use line::Lines;
pub(crate) use slot::{Next, WaitSlot};

/// What a client's waiting callers, its releasing guards and its waiter thread
/// share: where the locks live, the hand-off offers, and the wait settings.
pub(crate) struct Hub {
    pub(crate) topology: Arc<dyn Topology>,
    pub(crate) counters: Arc<Counters>,
    /// Cancelled by `LockClient::close`: wakes every wait with a shutdown.
    pub(crate) shutdown: CancelToken,
    /// Waiting callers' offers to be handed a lock by a releasing guard.
    pub(crate) offers: Offers,
    /// Waiting callers by key, oldest first.
    pub(crate) lines: Lines,
    /// Shortest and longest polling delay.
    pub(crate) backoff: (Duration, Duration),
}

impl Hub {
    pub(crate) fn new(
        topology: Arc<dyn Topology>,
        counters: Arc<Counters>,
        backoff: (Duration, Duration),
    ) -> Self {
        Self {
            topology,
            counters,
            shutdown: CancelToken::new(),
            offers: Offers::default(),
            lines: Lines::default(),
            backoff,
        }
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

/// The start of the name of each waiter thread's own channel (its wake-up kick).
pub(crate) const KICK_PREFIX: &str = "redlease:waiter:";

/// How long the thread blocks on the socket before looking at its commands.
const TICK: Duration = Duration::from_millis(50);
/// How long a channel stays subscribed after its last waiter left, so a busy key
/// does not pay `SUBSCRIBE` + `UNSUBSCRIBE` on every wait.
const LINGER: Duration = Duration::from_secs(2);
/// The longest pause between two reconnection attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Why a waiting caller was woken.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// A release message arrived for the key; the slot left the queue.
    Released,
    /// Try again now (subscription confirmed), or poll from now on (connection
    /// lost); still queued.
    Retry,
    /// The wait's [`CancelToken`](crate::CancelToken) fired.
    Cancelled,
    /// The client was closed.
    Shutdown,
    /// A releasing guard of this client handed its lock to this caller's offer
    /// (see `handoff`): the caller holds the lock, measured from `sent`.
    Handed { sent: Instant, fence: Option<u64> },
    /// A releasing guard of this client passed its lease itself to this caller's
    /// offer, as it is (same token, validity and renewal): no round trip.
    Transferred(Arc<LeaseState>),
    /// A releaser took this caller's offer but could not hand the lock over.
    NotHanded,
    /// This caller now heads its key's line: it probes Redis, at once (`now`) or
    /// from the first polling step.
    Probe { now: bool },
}

enum Command {
    /// Queue a waiter on `channel`; `seq` orders waiters, oldest first.
    Wait {
        channel: String,
        seq: u64,
        tx: Sender<Wake>,
    },
    /// A waiter is done. `pass`: it took a wake-up and left without using it.
    /// `unread`: its channel, to look for a wake-up sent before this command was
    /// read (also not used). Either goes to the next waiter.
    Leave {
        channel: String,
        seq: u64,
        pass: bool,
        unread: Option<Receiver<Wake>>,
    },
    Shutdown,
}

/// The waiter thread's handle; dropping it stops and joins the thread.
pub(crate) struct Waiter {
    tx: Sender<Command>,
    shared: Arc<Shared>,
    kick: String,
    handle: Option<JoinHandle<()>>,
}

impl Waiter {
    pub(crate) fn spawn(hub: Arc<Hub>) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        let kick = format!("{KICK_PREFIX}{}", uuid::Uuid::new_v4());
        let worker = Worker {
            rx,
            hub,
            shared: Arc::clone(&shared),
            kick: kick.clone(),
            chans: HashMap::new(),
        };
        let handle = thread::Builder::new()
            .name("redlease-wait".into())
            .spawn(move || worker.run())
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            shared,
            kick,
            handle: Some(handle),
        })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// A channel the thread serves.
#[derive(Default)]
struct Chan {
    /// Waiters by arrival order.
    queue: BTreeMap<u64, Sender<Wake>>,
    confirmed: bool,
    idle_since: Option<Instant>,
    /// When a release message came that no queued waiter took: a caller may have
    /// found the lock busy just before it and not be queued yet.
    unclaimed: Option<Instant>,
}

/// How long an unclaimed release message is kept for the next waiter to queue.
const UNCLAIMED: Duration = Duration::from_secs(1);

/// The thread's own state; nobody else touches it.
struct Worker {
    rx: Receiver<Command>,
    hub: Arc<Hub>,
    shared: Arc<Shared>,
    kick: String,
    chans: HashMap<String, Chan>,
}

/// How [`Worker::serve`] ended.
enum Served {
    /// Shutdown: the thread ends.
    Stop,
    /// The connection was up and broke: reconnect at once.
    Lost,
    /// No usable connection: reconnect after a delay.
    Failed,
}

impl Worker {
    fn run(mut self) {
        let mut delay = Duration::ZERO;
        loop {
            match self.serve() {
                Served::Stop => return,
                Served::Lost => delay = Duration::ZERO,
                Served::Failed => {
                    delay = (delay * 2).max(self.hub.backoff.0).min(MAX_RECONNECT_DELAY);
                }
            }
            // Polling until the connection is back, answering commands meanwhile.
            self.set_down();
            if delay.is_zero() {
                continue;
            }
            match self.rx.recv_timeout(delay) {
                Ok(cmd) => {
                    if !self.apply(cmd) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Serves one connection until it breaks, or until shutdown.
    fn serve(&mut self) -> Served {
        let Ok(mut con) = self.hub.topology.subscriber().connect_raw() else {
            return if self.drain() {
                Served::Failed
            } else {
                Served::Stop
            };
        };
        let mut ps = con.as_pubsub();
        let kick = self.replies(&mut ps, |ps, kick| ps.subscribe(kick));
        if kick.is_err() {
            return Served::Failed;
        }
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
        }
        self.shared.healthy.store(true, Ordering::Release);
        loop {
            // Acquire: the `Wait` of every caller that skipped its kick because
            // of the flag is visible to the drain below.
            self.shared.kicked.swap(false, Ordering::AcqRel);
            if !self.drain() {
                return Served::Stop;
            }
            // Commands are read again after unsubscribing: a caller that saw the
            // channel subscribed had queued before it left the shared view, so its
            // `Wait` is read now and the channel subscribed again at once.
            if self.unsubscribe_idle(&mut ps).is_err() {
                return Served::Lost;
            }
            if !self.drain() {
                return Served::Stop;
            }
            if self.subscribe_pending(&mut ps).is_err() {
                return Served::Lost;
            }
            match ps.get_message() {
                Ok(msg) => {
                    // Commands sent before this message was read go first, so a waiter
                    // that queued before the release is woken by it, and one that
                    // left is not.
                    if !self.drain() {
                        return Served::Stop;
                    }
                    let channel = msg.get_channel_name();
                    if channel != self.kick {
                        self.dispatch(channel);
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => {
                    log::warn!("pub/sub connection lost ({e}); waiters poll until it is back");
                    return Served::Lost;
                }
            }
        }
    }

    /// Applies every pending command; `false` on shutdown.
    fn drain(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    if !self.apply(cmd) {
                        return false;
                    }
                }
                Err(e) => return e.is_empty(),
            }
        }
    }

    /// Applies one command; `false` on shutdown.
    fn apply(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Wait { channel, seq, tx } => {
                let chan = self.chans.entry(channel).or_default();
                chan.idle_since = None;
                // A release that came between this caller's busy reply and its
                // queueing is its wake-up: it would otherwise wait for a poll.
                if chan
                    .unclaimed
                    .take()
                    .is_some_and(|t| t.elapsed() < UNCLAIMED)
                    && tx.send(Wake::Released).is_ok()
                {
                    return true;
                }
                chan.queue.insert(seq, tx);
            }
            Command::Leave {
                channel,
                seq,
                pass,
                unread,
            } => {
                if let Some(chan) = self.chans.get_mut(&channel) {
                    chan.queue.remove(&seq);
                    if chan.queue.is_empty() {
                        chan.idle_since.get_or_insert_with(Instant::now);
                    }
                }
                // Out of the queue now, so nothing more is sent to it: whatever
                // wake-up it holds unread is the last it got.
                let unused =
                    unread.is_some_and(|rx| rx.try_iter().any(|m| matches!(m, Wake::Released)));
                if pass || unused {
                    self.dispatch(&channel);
                }
            }
            Command::Shutdown => return false,
        }
        true
    }

    /// Hands a release to the oldest live waiter on `channel`.
    fn dispatch(&mut self, channel: &str) {
        let Some(chan) = self.chans.get_mut(channel) else {
            return;
        };
        let mut claimed = false;
        while let Some((_, tx)) = chan.queue.pop_first() {
            if tx.send(Wake::Released).is_ok() {
                claimed = true;
                break;
            }
        }
        chan.unclaimed = (!claimed).then(Instant::now);
        if chan.queue.is_empty() {
            chan.idle_since.get_or_insert_with(Instant::now);
        }
    }

    /// Runs `f` (a command with a reply) under the client's read timeout, then goes
    /// back to the short tick for message reads, also when `f` failed (dropping the
    /// connection unsubscribes, and must not wait long for a silent server).
    fn replies(
        &self,
        ps: &mut redis::PubSub<'_>,
        f: impl FnOnce(&mut redis::PubSub<'_>, &str) -> redis::RedisResult<()>,
    ) -> redis::RedisResult<()> {
        ps.set_read_timeout(Some(self.hub.topology.subscriber().read_timeout()))?;
        let out = f(ps, &self.kick);
        ps.set_read_timeout(Some(TICK))?;
        out
    }

    fn subscribe_pending(&mut self, ps: &mut redis::PubSub<'_>) -> redis::RedisResult<()> {
        let pending: Vec<String> = self
            .chans
            .iter()
            .filter(|(_, c)| !c.confirmed && !c.queue.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        // One channel per command: each has exactly one reply, so a reply read
        // is always the confirmation of the command just sent.
        self.replies(ps, |ps, _| {
            pending.iter().try_for_each(|name| ps.subscribe(name))
        })?;
        let mut subscribed = self.shared.subscribed.write();
        for name in pending {
            let Some(chan) = self.chans.get_mut(&name) else {
                continue;
            };
            chan.confirmed = true;
            // Waiters that queued before the subscription may have missed a release.
            for tx in chan.queue.values() {
                let _ = tx.send(Wake::Retry);
            }
            subscribed.insert(name);
        }
        Ok(())
    }

    fn unsubscribe_idle(&mut self, ps: &mut redis::PubSub<'_>) -> redis::RedisResult<()> {
        let now = Instant::now();
        let idle: Vec<String> = self
            .chans
            .iter()
            .filter(|(_, c)| c.queue.is_empty() && c.idle_since.is_some_and(|t| now - t >= LINGER))
            .map(|(name, _)| name.clone())
            .collect();
        if idle.is_empty() {
            return Ok(());
        }
        let mut confirmed = Vec::new();
        {
            // Out of the shared view first: a caller that still sees it has queued
            // already, and is told to retry once the thread has resubscribed.
            let mut subscribed = self.shared.subscribed.write();
            for name in idle {
                subscribed.remove(&name);
                if self.chans.remove(&name).is_some_and(|c| c.confirmed) {
                    confirmed.push(name);
                }
            }
        }
        self.replies(ps, |ps, _| {
            confirmed.iter().try_for_each(|name| ps.unsubscribe(name))
        })
    }

    /// The connection is gone: waiters poll until it is back (a release may be
    /// missed meanwhile), and the thread resubscribes in the background.
    fn set_down(&mut self) {
        let was_up = self.shared.healthy.swap(false, Ordering::AcqRel);
        self.shared.subscribed.write().clear();
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
            if was_up {
                for tx in chan.queue.values() {
                    let _ = tx.send(Wake::Retry);
                }
            }
        }
    }
}
