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
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::client::Core;
use crate::error::{Error, Result};
use crate::lease::LossReason;
use batch::{Loaded, Outcome, renew_due};
pub(crate) use schedule::Lease;
use schedule::{Due, EARLY_SHARE, Queue};

/// What the renewal thread is told, on its channel.
pub(crate) enum Command {
    /// A newly acquired lease.
    Register(Box<Lease>),
    /// The lease with this id was extended to a shorter validity: schedule it again.
    Reschedule(u64),
    /// Acknowledge once every earlier command is taken (for `flush`).
    Sync(Sender<()>),
    Shutdown,
}

/// The renewal thread's handle; dropping it stops and joins the thread.
pub(crate) struct Renewer {
    tx: Sender<Command>,
    handle: Option<JoinHandle<()>>,
}

impl Renewer {
    pub(crate) fn spawn(core: Arc<Core>) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = thread::Builder::new()
            .name("redlease-renewal".into())
            .spawn(move || run(&rx, &core))
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            handle: Some(handle),
        })
    }

    /// Hands a newly acquired lease to the thread.
    pub(crate) fn register(&self, lease: Lease) {
        let _ = lease.state.renewer.set(self.tx.clone());
        // Sending fails only once the thread is gone; the lease then just runs out.
        let _ = self.tx.send(Command::Register(Box::new(lease)));
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
        Command::Register(lease) => queue.push(*lease),
        Command::Reschedule(id) => queue.reschedule(id),
        Command::Sync(ack) => {
            let _ = ack.send(());
        }
        Command::Shutdown => return false,
    }
    true
}

fn run(rx: &Receiver<Command>, core: &Core) {
    let mut queue = Queue::new();
    let mut loaded = Loaded::new();
    'run: loop {
        let next = queue.heap.peek().map(|d| d.0.due);
        if next.is_some_and(|due| due <= Instant::now()) {
            // Take what is queued first (new leases join this tick), but no more, so
            // a stream of commands cannot hold off a tick.
            for _ in 0..rx.len() {
                let Ok(cmd) = rx.try_recv() else { break };
                if !apply(&mut queue, cmd) {
                    break 'run;
                }
            }
            tick(&mut queue, &mut loaded, core);
            continue;
        }
        let cmd = match next {
            Some(due) => rx.recv_deadline(due),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let go_on = match cmd {
            Ok(cmd) => apply(&mut queue, cmd),
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        };
        if !go_on {
            break;
        }
    }
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
