//! Waiting: the waiter thread's handle and the callers' side of a wait.
//!
//! The waiter thread (`thread/`) holds one pub/sub connection per client and turns
//! release messages into wake-ups, one local waiter per message, oldest first.
//!
//! Callers never block on the thread. A caller about to wait puts a [`WaitSlot`] in
//! the thread's queue for the key's channel and sleeps on the slot's own channel,
//! for at most the holder's remaining TTL (or a backoff step when pub/sub is down),
//! so a holder that dies without publishing delays waiters by at most its TTL.
//!
//! Data flows one way: callers send [`Command`]s, the thread sends [`Wake`]s back on
//! each slot's own channel. The thread owns the queues; callers only read the
//! [`Shared`] view (is the connection up, which channels are subscribed).
//!
//! Layout: this file is the waiter's handle ([`Hub`], `Waiters`) and the messages
//! between callers and the thread; `thread/` the thread itself (`subscriptions.rs` its
//! channels); `listen.rs` its pub/sub connection; `slot/` one caller's side of a
//! wait; `line.rs` the callers of this client waiting for each key; `handoff.rs` local
//! hand-off; `background.rs` a dropped guard's release queued for the I/O thread
//! (`release_in_background`); `release_all.rs` the release of several leases in one call (a guard
//! of several names); `backoff.rs` the polling step; `shared.rs` what callers read from the
//! thread; `watcher.rs` a caller that hears every release message of some channels
//! and never acquires (`wait_free`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::metrics::Counters;
use crate::owner::ClientTag;
use crate::threads::cancel::CancelToken;
use crate::topology::{Queued, Topology};

mod background;
mod backoff;
mod handoff;
mod line;
mod listen;
mod release_all;
mod shared;
mod slot;
mod thread;
mod watcher;

use shared::Shared;
use thread::Worker;

pub(crate) use background::release_queued;
pub(crate) use handoff::{Offers, Want, abandon, release, release_for_shutdown, release_later};
use line::Lines;
pub(crate) use release_all::release_all;
pub(crate) use slot::{Next, WaitSlot};
pub(crate) use watcher::{Heard, Subscription, Watcher};

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
    /// The client's tag, which the tokens of its waiting callers' offers carry.
    pub(crate) tag: ClientTag,
    /// Whether a dropped guard queues its release for the I/O thread
    /// (`LockClientBuilder::release_in_background`).
    pub(crate) background: bool,
    /// The names whose queued release has not been answered yet.
    pub(crate) queued: Arc<Queued>,
}

impl Hub {
    pub(crate) fn new(
        topology: Arc<dyn Topology>,
        counters: Arc<Counters>,
        backoff: (Duration, Duration),
        tag: ClientTag,
        background: bool,
    ) -> Self {
        Self {
            tag,
            background,
            queued: Arc::default(),
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
    /// Send every release message on `channel` to `tx` (a [`Watcher`]), without
    /// taking it from the waiters; `seq` names the watcher.
    Watch {
        channel: String,
        seq: u64,
        tx: Sender<Wake>,
    },
    /// The watcher `seq` is done with `channel`.
    Unwatch {
        channel: String,
        seq: u64,
    },
    Shutdown,
}

/// A client's waiter threads: one, or with sharded pub/sub one per subscriber
/// node (a master of a cluster), each listening to the channels of its slots.
pub(crate) struct Waiters {
    lanes: Vec<Waiter>,
    hub: Arc<Hub>,
}

impl Waiters {
    /// Starts the threads and waits (at most a read timeout) until each has its
    /// connection up or failed, so that the client's first waits are woken by
    /// release messages rather than found by polling.
    pub(crate) fn spawn(hub: &Arc<Hub>) -> Result<Self> {
        let (ready, readied) = crossbeam_channel::unbounded();
        let lanes = if hub.topology.sharded() {
            (0..hub.topology.subscribers())
                .map(|i| Waiter::spawn(Arc::clone(hub), Some(i), ready.clone()))
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![Waiter::spawn(Arc::clone(hub), None, ready)?]
        };
        let until = Instant::now() + hub.topology.read_timeout();
        for _ in &lanes {
            if readied.recv_deadline(until).is_err() {
                break;
            }
        }
        Ok(Self {
            lanes,
            hub: Arc::clone(hub),
        })
    }

    /// Whether no channel is subscribed: no caller of this client waits, nor has
    /// waited lately, for any key.
    pub(crate) fn quiet(&self) -> bool {
        self.lanes
            .iter()
            .all(|w| w.shared.channels.load(Ordering::Acquire) == 0)
    }

    /// The waiter thread that hears `channel`'s release messages, if one does.
    pub(crate) fn for_channel(&self, channel: &str) -> Option<&Waiter> {
        if let [one] = self.lanes.as_slice() {
            return Some(one);
        }
        let i = self.hub.topology.subscriber_for(channel)?;
        self.lanes.get(i)
    }
}

impl Waiters {
    /// Tells every thread to stop, without waiting: the client's drop does it
    /// first, so the threads end while the rest of the client is taken down.
    pub(crate) fn signal(&mut self) {
        for w in &mut self.lanes {
            if w.stopping.is_none() {
                let _ = w.tx.send(Command::Shutdown);
                w.stopping = Some(Instant::now());
            }
        }
    }
}

impl Drop for Waiters {
    /// Tells every thread to stop, and wakes each out of its socket read at once
    /// (else it sees the command at its next tick): then each lane's drop joins it.
    fn drop(&mut self) {
        self.signal();
        for w in &self.lanes {
            // Only a thread with its connection up reads the socket; one without
            // waits on its commands, and has the shutdown already. The kick's
            // reply is never read: a stopped server leaves the thread to its tick.
            if w.shared.healthy.load(Ordering::Acquire) {
                let node = w.shared.node.load(Ordering::Acquire);
                self.hub
                    .topology
                    .subscriber(node)
                    .publish_unanswered(&w.kick);
            }
        }
    }
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters")
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

/// One waiter thread's handle; dropping it stops and joins the thread, or,
/// when the thread is in a call to a server that does not answer, leaves it to
/// end when the call does (bounded by the read timeout): a client's drop waits
/// on nothing remote.
pub(crate) struct Waiter {
    tx: Sender<Command>,
    shared: Arc<Shared>,
    kick: String,
    handle: Option<JoinHandle<()>>,
    /// Disconnected when the thread ends.
    ended: Receiver<()>,
    /// When the thread was told to stop (by `Waiters`' drop): the join waits
    /// until [`JOIN_WAIT`] after it.
    stopping: Option<Instant>,
}

/// How long dropping a waiter thread waits for it to end: its tick (a socket
/// read of 50 ms) and its unsubscribe on a frozen server fit, a call under the
/// read timeout does not.
const JOIN_WAIT: Duration = Duration::from_millis(100);

impl Waiter {
    /// A waiter thread; `lane` fixes the subscriber node it listens on (sharded
    /// pub/sub), else it moves to the next when its node fails.
    fn spawn(hub: Arc<Hub>, lane: Option<usize>, ready: Sender<()>) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        if let Some(i) = lane {
            shared.node.store(i, Ordering::Release);
        }
        let kick = format!("{KICK_PREFIX}{}", uuid::Uuid::new_v4());
        let worker = Worker::new(rx, hub, Arc::clone(&shared), kick.clone(), (lane, ready));
        let (alive, ended) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("redlease-wait".into())
            .spawn(move || {
                let _alive = alive;
                worker.run();
            })
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            shared,
            kick,
            handle: Some(handle),
            ended,
            stopping: None,
        })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        let Some(handle) = self.handle.take() else {
            return;
        };
        let by = self.stopping.unwrap_or_else(Instant::now) + JOIN_WAIT;
        if self.ended.recv_deadline(by).is_err_and(|e| e.is_timeout()) {
            log::debug!("the waiter thread is left to finish its call");
            return;
        }
        let _ = handle.join();
    }
}
