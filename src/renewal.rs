//! The renewal thread: one per client, fed held leases through a channel, renewing
//! every lease that is due in one pipelined round trip.
//!
//! The thread owns its deadline queue. A lease's shared state ([`LeaseState`]) is
//! the only thing it has in common with the guard: validity moves forward only on a
//! confirmed renewal, and loss is reported through it. A release is not sent to the
//! thread: it marks the lease under the lease's mutex, and the thread drops the lease
//! when it next comes due (or in a sweep of the queue).
//!
//! Layout: this file is the thread (its commands, its loop, one tick);
//! `schedule.rs` holds each lease's renewal policy and the deadline queue;
//! `batch.rs` the one pipelined round trip per tick.

mod batch;
mod schedule;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering, fence};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::client::Core;
use crate::error::{Error, Result};
use crate::lease::{LossReason, to_nanos};
use batch::{Loaded, Outcome, renew_due};
pub(crate) use schedule::Lease;
use schedule::{Due, EARLY_SHARE, Queue};

/// What the renewal thread is told, on its channel.
pub(crate) enum Command {
    /// Look at the inbox of new leases now: one of them is due before the thread
    /// would otherwise wake, or the inbox is getting long.
    Wake,
    /// The lease with this id was extended to a shorter validity: schedule it again.
    Reschedule(u64),
    /// Acknowledge once every earlier command is taken (for `flush`).
    Sync(Sender<()>),
    Shutdown,
}

/// New leases waiting in the inbox after which the thread is woken to take them.
const INBOX_WAKE: usize = 1024;

/// The renewal thread's handle; dropping it stops and joins the thread.
///
/// New leases go through a channel of their own, the inbox, which the thread drains
/// whenever it wakes; it is woken for them only when one is due before its next
/// wake-up or the inbox is long. So taking a lock costs a channel send, not a
/// thread wake-up, and a client churning through short locks keeps the thread
/// asleep until the next renewal is due.
pub(crate) struct Renewer {
    tx: Sender<Command>,
    inbox: Sender<Box<Lease>>,
    /// When the thread will next wake on its own (lease-clock nanoseconds); 0
    /// while it is awake and will still look at the inbox.
    wake_at: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

/// The thread's ends of the channels.
struct Inbound {
    rx: Receiver<Command>,
    inbox: Receiver<Box<Lease>>,
    wake_at: Arc<AtomicU64>,
}

impl Renewer {
    pub(crate) fn spawn(core: Arc<Core>) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (inbox, inbox_rx) = crossbeam_channel::unbounded();
        let wake_at = Arc::new(AtomicU64::new(0));
        let inbound = Inbound {
            rx,
            inbox: inbox_rx,
            wake_at: Arc::clone(&wake_at),
        };
        let handle = thread::Builder::new()
            .name("redlease-renewal".into())
            .spawn(move || run(&inbound, &core))
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            inbox,
            wake_at,
            handle: Some(handle),
        })
    }

    /// Hands a newly acquired lease to the thread.
    pub(crate) fn register(&self, lease: Lease) {
        let _ = lease.state.renewer.set(self.tx.clone());
        let due = to_nanos(lease.due);
        // Sending fails only once the thread is gone; the lease then just runs out.
        if self.inbox.send(Box::new(lease)).is_err() {
            return;
        }
        // Pairs with the fence in `run`: either the thread sees this lease before it
        // sleeps, or this sees the wake-up time it published.
        fence(AtomicOrdering::SeqCst);
        if due < self.wake_at.load(AtomicOrdering::SeqCst) || self.inbox.len() >= INBOX_WAKE {
            let _ = self.tx.send(Command::Wake);
        }
    }

    /// Returns once the thread has taken every command sent before this call.
    pub(crate) fn sync(&self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Command::Sync(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Applies a command; `false` on shutdown.
fn apply(queue: &mut Queue, cmd: Command) -> bool {
    match cmd {
        Command::Wake => {}
        Command::Reschedule(id) => queue.reschedule(id),
        Command::Sync(ack) => {
            let _ = ack.send(());
        }
        Command::Shutdown => return false,
    }
    true
}

/// Moves the inbox's leases into the queue. Leases released meanwhile are dropped;
/// one whose mutex is busy is kept and looked at when due (the thread never waits
/// on a lease's mutex).
fn take_inbox(inbound: &Inbound, queue: &mut Queue) {
    for lease in inbound.inbox.try_iter() {
        if lease.state.held.try_lock().is_none_or(|h| !h.released) {
            queue.push(*lease);
        }
    }
}

fn run(inbound: &Inbound, core: &Core) {
    let rx = &inbound.rx;
    let mut queue = Queue::new();
    let mut loaded = Loaded::new();
    'run: loop {
        inbound.wake_at.store(0, AtomicOrdering::SeqCst);
        take_inbox(inbound, &mut queue);
        let next = queue.heap.peek().map(|d| d.0.due);
        if next.is_some_and(|due| due <= Instant::now()) {
            // Take what is queued first, but no more, so a stream of commands
            // cannot hold off a tick.
            for _ in 0..rx.len() {
                let Ok(cmd) = rx.try_recv() else { break };
                if !apply(&mut queue, cmd) {
                    break 'run;
                }
            }
            tick(&mut queue, &mut loaded, core);
            continue;
        }
        inbound
            .wake_at
            .store(next.map_or(u64::MAX, to_nanos), AtomicOrdering::SeqCst);
        fence(AtomicOrdering::SeqCst);
        if !inbound.inbox.is_empty() {
            continue;
        }
        let cmd = match next {
            Some(due) => rx.recv_deadline(due),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let go_on = match cmd {
            Ok(cmd) => {
                // Leases first: a reschedule or a flush may be about one of them.
                take_inbox(inbound, &mut queue);
                apply(&mut queue, cmd)
            }
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        };
        if !go_on {
            break;
        }
    }
    take_inbox(inbound, &mut queue);
    for Due(lease) in queue.heap {
        let released = lease.state.held.lock().released;
        if !released {
            lease
                .state
                .notify_lost(LossReason::Shutdown, &core.counters);
        }
    }
}

/// Takes every lease that is due (or nearly), retires the ones that ended, renews
/// the rest in one pipeline, and then reports the losses.
fn tick(queue: &mut Queue, loaded: &mut Loaded, core: &Core) {
    let now = Instant::now();
    let mut due = Vec::new();
    while let Some(top) = queue.heap.peek() {
        if top.0.due > now + top.0.interval / EARLY_SHARE {
            break;
        }
        let Some(Due(lease)) = queue.heap.pop() else {
            break;
        };
        due.push(lease);
    }
    let mut out = Outcome::default();
    // First pass, keeping no mutex: report the ends right away (the callbacks may
    // release guards, whose mutexes the renewal keeps locked).
    let mut renew = Vec::new();
    for mut lease in due {
        let Some(released) = lease.state.held.try_lock().map(|h| h.released) else {
            // A release or an extend is running on it: look again shortly.
            lease.due = now + lease.retry();
            out.later.push(lease);
            continue;
        };
        if released || lease.state.is_lost() {
            continue;
        }
        if now >= lease.state.valid_until() {
            lease.state.notify_lost(lease.ends_by, &core.counters);
        } else if lease.next_ttl(now).is_none() {
            lease.stop_renewing();
            out.later.push(lease);
        } else {
            renew.push(lease);
        }
    }
    if !renew.is_empty() {
        renew_due(renew, now, core, &mut out, loaded);
    }
    // Every mutex is unlocked now.
    for lease in out.later {
        queue.push(lease);
    }
    for (state, reason) in out.ended {
        state.notify_lost(reason, &core.counters);
    }
}
