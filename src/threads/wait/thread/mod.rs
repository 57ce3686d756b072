//! The waiter thread itself: its queues, its pub/sub connection, and what it does
//! with each command and each message.
//!
//! Layout: this file is the thread's queues and loop; `subscriptions.rs` its
//! subscriptions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::listen::{Event, Listener};
use super::{Command, Hub, Shared, Wake};
use crate::net::connection::is_interrupted;

mod subscriptions;

/// How long the thread blocks on the socket before looking at its commands.
const TICK: Duration = Duration::from_millis(50);
/// How long the last read of a stopping thread waits: dropping the connection
/// unsubscribes and reads the replies, which a frozen server never sends, and
/// which nobody needs once the connection is closed.
const STOP_READ: Duration = Duration::from_millis(1);
/// How long a channel stays subscribed after its last waiter left, so a busy key
/// does not pay `SUBSCRIBE` + `UNSUBSCRIBE` on every wait.
const LINGER: Duration = Duration::from_secs(2);
/// The longest pause between two reconnection attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// How long a shard channel whose subscription is not confirmed (refused: its
/// slot is another master's) waits before it is asked for again; its waiters poll.
const RESUBSCRIBE: Duration = Duration::from_secs(2);

/// A channel the thread serves.
#[derive(Default)]
struct Chan {
    /// Waiters by arrival order.
    queue: BTreeMap<u64, Sender<Wake>>,
    /// Watchers (`wait_free`): each hears every message, and takes none from
    /// the waiters.
    watchers: BTreeMap<u64, Sender<Wake>>,
    confirmed: bool,
    /// When a shard subscription was sent and not confirmed yet.
    requested: Option<Instant>,
    idle_since: Option<Instant>,
}

impl Chan {
    /// Whether nobody waits on it, nor watches it.
    fn idle(&self) -> bool {
        self.queue.is_empty() && self.watchers.is_empty()
    }
}

/// The thread's own state; nobody else touches it.
pub(super) struct Worker {
    rx: Receiver<Command>,
    hub: Arc<Hub>,
    shared: Arc<Shared>,
    kick: String,
    chans: HashMap<String, Chan>,
    /// The subscriber node this thread keeps to (sharded pub/sub), if any.
    lane: Option<usize>,
    /// Whether release channels are shard channels (`SSUBSCRIBE`).
    sharded: bool,
    /// Told once, when the first connection is up or has failed.
    ready: Option<Sender<()>>,
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
    pub(super) fn new(
        rx: Receiver<Command>,
        hub: Arc<Hub>,
        shared: Arc<Shared>,
        kick: String,
        (lane, ready): (Option<usize>, Sender<()>),
    ) -> Self {
        let shard_channels = lane.is_some() && hub.topology.sharded();
        Self {
            rx,
            hub,
            shared,
            kick,
            chans: HashMap::new(),
            lane,
            sharded: shard_channels,
            ready: Some(ready),
        }
    }

    pub(super) fn run(mut self) {
        let mut delay = Duration::ZERO;
        loop {
            let served = self.serve();
            self.announce();
            match served {
                Served::Stop => return,
                Served::Lost => {
                    delay = Duration::ZERO;
                    self.next_node();
                }
                Served::Failed => {
                    self.next_node();
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

    /// Tells the client the first connection is up (or failed), once.
    fn announce(&mut self) {
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(());
        }
    }

    /// The node the thread listens on.
    fn node(&self) -> &crate::net::node::Node {
        let i = self.shared.node.load(Ordering::Acquire);
        self.hub.topology.subscriber(i)
    }

    /// Moves to the next subscriber node (a release publishes on each of them);
    /// a thread kept to one node (sharded pub/sub) stays.
    fn next_node(&self) {
        let n = self.hub.topology.subscribers();
        if n > 1 && self.lane.is_none() {
            let i = self.shared.node.load(Ordering::Acquire);
            self.shared.node.store((i + 1) % n, Ordering::Release);
        }
    }

    /// Serves one connection until it breaks, or until shutdown.
    fn serve(&mut self) -> Served {
        let con = if self.sharded {
            self.node().connect_resp3()
        } else {
            self.node().connect_raw()
        };
        let Ok(mut con) = con else {
            return if self.drain() {
                Served::Failed
            } else {
                Served::Stop
            };
        };
        let mut ps = Listener::new(&mut con, self.sharded);
        let kick = self.replies(&mut ps, Listener::subscribe_kick);
        if kick.is_err() {
            return Served::Failed;
        }
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
            chan.requested = None;
        }
        self.shared.healthy.store(true, Ordering::Release);
        self.announce();
        loop {
            // Acquire: the `Wait` of every caller that skipped its kick because
            // of the flag is visible to the drain below.
            self.shared.kicked.swap(false, Ordering::AcqRel);
            if !self.drain() {
                return stop(&ps);
            }
            // Commands are read again after unsubscribing: a caller that saw the
            // channel subscribed had queued before it left the shared view, so its
            // `Wait` is read now and the channel subscribed again at once.
            if self.unsubscribe_idle(&mut ps).is_err() {
                return Served::Lost;
            }
            if !self.drain() {
                return stop(&ps);
            }
            if self.subscribe_pending(&mut ps).is_err() {
                return Served::Lost;
            }
            match ps.next() {
                Ok(event) => {
                    // Commands sent before this message was read go first, so a waiter
                    // that queued before the release is woken by it, and one that
                    // left is not.
                    if !self.drain() {
                        return stop(&ps);
                    }
                    match event {
                        Event::Message(channel) if channel != self.kick => {
                            self.hub.lines.hear(&channel);
                            self.tell_watchers(&channel, &Wake::Released);
                            self.dispatch(&channel);
                        }
                        Event::Confirmed(channel) => self.confirm(vec![channel]),
                        Event::Dropped(channel) => self.dropped(&channel),
                        Event::Message(_) | Event::Other => {}
                    }
                }
                // A signal cut the read short: the connection is fine, and the
                // parser keeps what it had read; read again.
                Err(e) if e.is_timeout() || is_interrupted(&e) => {}
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
                // A release that came between this caller's busy reply and its
                // queueing is its wake-up: it would otherwise wait for a poll. (The
                // caller looks too, right after queueing, and may have taken it.)
                let woken = self.shared.take_unclaimed(&channel) && tx.send(Wake::Released).is_ok();
                let chan = self.chans.entry(channel).or_default();
                chan.idle_since = None;
                if !woken {
                    chan.queue.insert(seq, tx);
                }
            }
            Command::Leave {
                channel,
                seq,
                pass,
                unread,
            } => {
                if let Some(chan) = self.chans.get_mut(&channel) {
                    chan.queue.remove(&seq);
                    if chan.idle() {
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
            Command::Watch { channel, seq, tx } => {
                let chan = self.chans.entry(channel).or_default();
                chan.idle_since = None;
                chan.watchers.insert(seq, tx);
            }
            Command::Unwatch { channel, seq } => {
                if let Some(chan) = self.chans.get_mut(&channel) {
                    chan.watchers.remove(&seq);
                    if chan.idle() {
                        chan.idle_since.get_or_insert_with(Instant::now);
                    }
                }
            }
            Command::Shutdown => return false,
        }
        true
    }

    /// Sends `wake` to every watcher of `channel`, forgetting those gone.
    fn tell_watchers(&mut self, channel: &str, wake: &Wake) {
        if let Some(chan) = self.chans.get_mut(channel) {
            chan.watchers.retain(|_, tx| tx.send(wake.clone()).is_ok());
        }
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
        if claimed {
            self.shared.take_unclaimed(channel);
        } else {
            self.shared.keep_unclaimed(channel);
        }
        if chan.idle() {
            chan.idle_since.get_or_insert_with(Instant::now);
        }
    }

    /// Runs `f` (a command with a reply) under the client's read timeout, then goes
    /// back to the short tick for message reads, also when `f` failed (dropping the
    /// connection unsubscribes, and must not wait long for a silent server).
    fn replies<'l, T>(
        &self,
        ps: &mut Listener<'l>,
        f: impl FnOnce(&mut Listener<'l>, &str) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        ps.set_read_timeout(self.node().read_timeout())?;
        let out = f(ps, &self.kick);
        ps.set_read_timeout(TICK)?;
        out
    }

    /// The connection is gone: waiters poll until it is back (a release may be
    /// missed meanwhile), and the thread resubscribes in the background.
    fn set_down(&mut self) {
        let was_up = self.shared.healthy.swap(false, Ordering::AcqRel);
        self.shared.subscribed_mut(std::collections::HashSet::clear);
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
            chan.requested = None;
            if was_up {
                for tx in chan.queue.values().chain(chan.watchers.values()) {
                    let _ = tx.send(Wake::Retry);
                }
            }
        }
    }
}

/// The thread stops: the connection's last reads (its unsubscribe, when it is
/// dropped) wait [`STOP_READ`] at most.
fn stop(ps: &Listener<'_>) -> Served {
    let _ = ps.set_read_timeout(STOP_READ);
    Served::Stop
}
