//! The waiter thread: one pub/sub connection per client that turns release
//! messages into wake-ups, one local waiter per message, oldest first.
//!
//! Callers never block on the thread. A caller about to wait puts a [`WaitSlot`] in
//! the thread's queue for the key's channel and sleeps on the slot's own channel,
//! for at most the holder's remaining TTL (or a backoff step when pub/sub is down),
//! so a holder that dies without publishing delays waiters by at most its TTL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::{Mutex, RwLock};

use crate::cancel::{CancelToken, Watch};
use crate::client::Core;
use crate::error::{Error, Result};
use crate::metrics::bump;
use crate::scheme::Keys;

/// How long the thread blocks on the socket before looking at its commands.
const TICK: Duration = Duration::from_millis(50);
/// How long a channel stays subscribed after its last waiter left, so a busy key
/// does not pay `SUBSCRIBE` + `UNSUBSCRIBE` on every wait.
const LINGER: Duration = Duration::from_secs(2);

/// Why a waiting caller was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release message arrived for the key; the slot left the queue.
    Released,
    /// Try again now (subscription confirmed or re-established); still queued.
    Retry,
    /// The wait's [`CancelToken`] fired.
    Cancelled,
    /// The client was closed.
    Shutdown,
}

enum Command {
    Wait {
        channel: String,
        seq: u64,
        tx: Sender<Wake>,
    },
    Leave {
        channel: String,
        seq: u64,
        pass: bool,
    },
    Shutdown,
}

/// State the callers share with each other and read from the thread.
#[derive(Default)]
struct Shared {
    /// Whether the pub/sub connection is up; when not, waits fall back to polling.
    healthy: AtomicBool,
    /// Channels whose subscription Redis has confirmed. The thread removes a channel
    /// here before unsubscribing, so a caller that sees it may skip the handshake.
    subscribed: RwLock<HashSet<String>>,
    /// Per channel: this client's callers waiting on it, and when the holder's TTL
    /// last seen runs out. Kept by the callers for fair queueing.
    local: Mutex<HashMap<String, Local>>,
    seq: AtomicU64,
}

#[derive(Default)]
struct Local {
    waiting: usize,
    holder_until: Option<Instant>,
}

/// The waiter thread's handle; dropping it stops and joins the thread.
pub(crate) struct Waiter {
    tx: Sender<Command>,
    shared: Arc<Shared>,
    kick: String,
    handle: Option<JoinHandle<()>>,
}

impl Waiter {
    pub(crate) fn spawn(core: Arc<Core>) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        let kick = format!("redlease:waiter:{}", uuid::Uuid::new_v4());
        let worker = Worker {
            rx,
            core,
            shared: Arc::clone(&shared),
            kick: kick.clone(),
            chans: HashMap::new(),
        };
        let handle = thread::Builder::new()
            .name("redlease-waiter".into())
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

/// One caller's wait for one key, from its first busy reply to its return.
pub(crate) struct WaitSlot<'a> {
    core: &'a Core,
    waiter: Option<&'a Waiter>,
    channel: String,
    key: String,
    seq: u64,
    tx: Sender<Wake>,
    rx: Receiver<Wake>,
    queued: bool,
    counted: bool,
    acquired: bool,
    backoff_step: u32,
    _watches: [Option<Watch>; 2],
}

impl<'a> WaitSlot<'a> {
    /// A slot for `keys`; `waiter` is `None` when waits must poll.
    pub(crate) fn new(
        core: &'a Core,
        waiter: Option<&'a Waiter>,
        keys: &Keys,
        cancel: Option<&CancelToken>,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let watches = [
            Some(core.shutdown.watch(&tx, Wake::Shutdown)),
            cancel.map(|c| c.watch(&tx, Wake::Cancelled)),
        ];
        let seq = waiter.map_or(0, |w| w.shared.seq.fetch_add(1, Ordering::Relaxed));
        Self {
            core,
            waiter,
            channel: keys.channel.clone(),
            key: keys.lock.clone(),
            seq,
            tx,
            rx,
            queued: false,
            counted: false,
            acquired: false,
            backoff_step: 0,
            _watches: watches,
        }
    }

    /// Whether a slot is worth making before the first attempt: this client already
    /// has waiters on the key, or its channel is subscribed.
    pub(crate) fn wanted(waiter: Option<&Waiter>, keys: &Keys) -> bool {
        waiter.is_some_and(|w| {
            w.shared.healthy.load(Ordering::Acquire)
                && (w.shared.local.lock().contains_key(&keys.channel)
                    || w.shared.subscribed.read().contains(&keys.channel))
        })
    }

    /// Before the first attempt: join the queue when the channel is subscribed, and
    /// when this client's callers already wait for the key, wait behind them rather
    /// than barge in on the lock a waiter is about to be handed.
    pub(crate) fn prepare(&mut self, deadline: Option<Instant>) -> Result<()> {
        let Some(w) = self.waiter else { return Ok(()) };
        let (ahead, holder_until) = {
            let local = w.shared.local.lock();
            local
                .get(&self.channel)
                .map_or((0, None), |l| (l.waiting, l.holder_until))
        };
        if w.shared.subscribed.read().contains(&self.channel) {
            self.enqueue(w);
        }
        if ahead == 0 || !self.queued {
            return Ok(());
        }
        self.count(None);
        let bound = holder_until.unwrap_or_else(|| Instant::now() + self.core.settings.backoff_max);
        self.sleep(bound, deadline)
    }

    /// After a busy reply: wait until it is worth trying again.
    ///
    /// Subscribes first when needed (so no release is missed between the failed
    /// attempt and the wait), then sleeps until a release message, the holder's
    /// `remaining` TTL, a backoff step (when polling), or `deadline`.
    pub(crate) fn pause(
        &mut self,
        remaining: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<()> {
        self.count(remaining);
        let now = Instant::now();
        let pubsub = self
            .waiter
            .filter(|w| w.shared.healthy.load(Ordering::Acquire));
        let until = match (pubsub, remaining) {
            (Some(w), remaining) => {
                if !self.queued {
                    self.enqueue(w);
                    if w.shared.subscribed.read().contains(&self.channel) {
                        return Ok(()); // subscribed already: retry at once
                    }
                    self.kick(w);
                }
                // A holder that never publishes is waited out by its TTL.
                let bound = remaining.unwrap_or_else(|| self.backoff());
                now + bound + Duration::from_millis(1)
            }
            (None, Some(r)) => now + self.backoff().min(r + Duration::from_millis(1)),
            (None, None) => now + self.backoff(),
        };
        self.sleep(until, deadline)
    }

    /// Marks the wait as ended by an acquisition: a wake-up it still holds was
    /// meant for it, and is not passed on.
    pub(crate) fn acquired(&mut self) {
        self.acquired = true;
    }

    fn sleep(&mut self, until: Instant, deadline: Option<Instant>) -> Result<()> {
        let until = deadline.map_or(until, |d| d.min(until));
        match self.rx.recv_deadline(until) {
            Ok(Wake::Released) => {
                self.queued = false;
                self.backoff_step = 0;
                bump(&self.core.counters.wakeups, 1);
                Ok(())
            }
            Ok(Wake::Retry) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                Ok(())
            }
            Ok(Wake::Cancelled) => Err(Error::Cancelled {
                key: self.key.clone(),
            }),
            Ok(Wake::Shutdown) => Err(Error::Shutdown),
        }
    }

    fn enqueue(&mut self, w: &Waiter) {
        let cmd = Command::Wait {
            channel: self.channel.clone(),
            seq: self.seq,
            tx: self.tx.clone(),
        };
        self.queued = w.tx.send(cmd).is_ok();
    }

    /// Wakes the thread out of its socket read, so it subscribes now rather than at
    /// its next tick: one `PUBLISH` to the thread's own control channel.
    fn kick(&self, w: &Waiter) {
        if let Ok(mut conn) = self.core.pool.get() {
            let _ = conn.run(|c| redis::cmd("PUBLISH").arg(&w.kick).arg("").query::<i64>(c));
        }
    }

    fn count(&mut self, remaining: Option<Duration>) {
        let Some(w) = self.waiter else { return };
        let mut local = w.shared.local.lock();
        let entry = local.entry(self.channel.clone()).or_default();
        if !self.counted {
            entry.waiting += 1;
            self.counted = true;
        }
        if let Some(r) = remaining {
            entry.holder_until = Instant::now().checked_add(r);
        }
    }

    /// The next polling delay: exponential from the client's minimum to its maximum,
    /// with full jitter.
    fn backoff(&mut self) -> Duration {
        let s = &self.core.settings;
        let cap = s
            .backoff_min
            .saturating_mul(1 << self.backoff_step.min(16))
            .min(s.backoff_max);
        self.backoff_step += 1;
        let lo = u64::try_from(s.backoff_min.as_micros()).unwrap_or(u64::MAX);
        let hi = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX).max(lo);
        Duration::from_micros(fastrand::u64(lo..=hi))
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        let Some(w) = self.waiter else { return };
        // A wake-up this slot received but did not use belongs to the next waiter.
        let unused = !self.acquired && self.rx.try_iter().any(|m| m == Wake::Released);
        if self.queued || unused {
            let _ = w.tx.send(Command::Leave {
                channel: self.channel.clone(),
                seq: self.seq,
                pass: unused,
            });
        }
        if self.counted {
            let mut local = w.shared.local.lock();
            if let Some(entry) = local.get_mut(&self.channel) {
                entry.waiting -= 1;
                if entry.waiting == 0 {
                    local.remove(&self.channel);
                }
            }
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
}

/// The thread's own state; nobody else touches it.
struct Worker {
    rx: Receiver<Command>,
    core: Arc<Core>,
    shared: Arc<Shared>,
    kick: String,
    chans: HashMap<String, Chan>,
}

/// What the thread does next after reading its commands.
enum Flow {
    Go,
    Stop,
}

impl Worker {
    fn run(mut self) {
        let mut delay = self.core.settings.backoff_min;
        loop {
            match self.serve() {
                Flow::Stop => return,
                Flow::Go => {}
            }
            // The connection failed: poll until it is back, answering commands.
            self.set_down();
            match self.rx.recv_timeout(delay) {
                Ok(cmd) => {
                    if let Flow::Stop = self.apply(cmd) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// Serves one connection until it fails (`Go`: reconnect) or shutdown (`Stop`).
    fn serve(&mut self) -> Flow {
        let Ok(mut con) = self.core.connector.connect_raw() else {
            return self.drain();
        };
        if con.set_read_timeout(Some(TICK)).is_err() {
            return Flow::Go;
        }
        let mut ps = con.as_pubsub();
        if ps.subscribe(&self.kick).is_err() {
            return Flow::Go;
        }
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
        }
        self.shared.healthy.store(true, Ordering::Release);
        loop {
            if let Flow::Stop = self.drain() {
                return Flow::Stop;
            }
            if self.subscribe_pending(&mut ps).is_err() {
                return Flow::Go;
            }
            if self.unsubscribe_idle(&mut ps).is_err() {
                return Flow::Go;
            }
            match ps.get_message() {
                Ok(msg) => {
                    // Commands sent before this message was read go first, so a waiter
                    // that queued before the release is woken by it.
                    if let Flow::Stop = self.drain() {
                        return Flow::Stop;
                    }
                    let channel = msg.get_channel_name();
                    if channel != self.kick {
                        self.dispatch(channel);
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => {
                    log::warn!("pub/sub connection lost ({e}); waiters poll until it is back");
                    return Flow::Go;
                }
            }
        }
    }

    fn drain(&mut self) -> Flow {
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    if let Flow::Stop = self.apply(cmd) {
                        return Flow::Stop;
                    }
                }
                Err(TryRecvError::Empty) => return Flow::Go,
                Err(TryRecvError::Disconnected) => return Flow::Stop,
            }
        }
    }

    fn apply(&mut self, cmd: Command) -> Flow {
        match cmd {
            Command::Wait { channel, seq, tx } => {
                let chan = self.chans.entry(channel).or_default();
                chan.queue.insert(seq, tx);
                chan.idle_since = None;
            }
            Command::Leave { channel, seq, pass } => {
                if let Some(chan) = self.chans.get_mut(&channel) {
                    chan.queue.remove(&seq);
                    if chan.queue.is_empty() {
                        chan.idle_since = Some(Instant::now());
                    }
                }
                if pass {
                    self.dispatch(&channel);
                }
            }
            Command::Shutdown => return Flow::Stop,
        }
        Flow::Go
    }

    /// Hands a release to the oldest live waiter on `channel`.
    fn dispatch(&mut self, channel: &str) {
        let Some(chan) = self.chans.get_mut(channel) else {
            return;
        };
        while let Some((_, tx)) = chan.queue.pop_first() {
            if tx.send(Wake::Released).is_ok() {
                break;
            }
        }
        if chan.queue.is_empty() && chan.idle_since.is_none() {
            chan.idle_since = Some(Instant::now());
        }
    }

    fn subscribe_pending(&mut self, ps: &mut redis::PubSub<'_>) -> redis::RedisResult<()> {
        for (name, chan) in &mut self.chans {
            if chan.confirmed || chan.queue.is_empty() {
                continue;
            }
            ps.subscribe(name)?;
            chan.confirmed = true;
            self.shared.subscribed.write().insert(name.clone());
            // Waiters that queued before the subscription may have missed a release.
            for tx in chan.queue.values() {
                let _ = tx.send(Wake::Retry);
            }
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
        for name in idle {
            // Out of the shared view first: a caller that still sees it queues, and
            // is told to retry once the thread has resubscribed.
            self.shared.subscribed.write().remove(&name);
            self.chans.remove(&name);
            ps.unsubscribe(&name)?;
        }
        Ok(())
    }

    /// The connection is gone: waiters must poll, and retry now in case a release
    /// was missed.
    fn set_down(&mut self) {
        self.shared.healthy.store(false, Ordering::Release);
        self.shared.subscribed.write().clear();
        for chan in self.chans.values_mut() {
            chan.confirmed = false;
            for tx in chan.queue.values() {
                let _ = tx.send(Wake::Retry);
            }
        }
    }
}
