//! The renewal thread: one per client, fed held leases through a channel, renewing
//! every lease that is due in one pipelined round trip.
//!
//! The thread owns its deadline queue. A lease's shared state ([`LeaseState`]) is
//! the only thing it has in common with the guard: validity moves forward only on a
//! confirmed renewal, and loss is reported through it.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{ArcMutexGuard, RawMutex};
use redis::Value;

use crate::client::Core;
use crate::error::{Error, Result};
use crate::lease::{Held, LeaseState, LossReason};
use crate::metrics::bump;
use crate::scheme::Extend;

/// Leases due within this share of their interval are renewed with the ones due now,
/// so leases taken at nearby times fall into one batch and stay in it.
const EARLY_SHARE: u32 = 4;

/// A lease as the renewal thread keeps it.
pub(crate) struct Lease {
    state: Arc<LeaseState>,
    /// Renew at all (`Renewal::Auto`)? Otherwise only report the end of the TTL.
    renew: bool,
    interval: Duration,
    hold_until: Option<Instant>,
    renewals_left: Option<u32>,
    /// Why the lease will end if nothing renews it any more.
    ends_by: LossReason,
    due: Instant,
}

impl Lease {
    pub(crate) fn new(
        state: Arc<LeaseState>,
        renew: bool,
        interval: Duration,
        hold_until: Option<Instant>,
        renewals_left: Option<u32>,
        acquired: Instant,
    ) -> Self {
        let due = if renew {
            acquired + interval
        } else {
            state.valid_until()
        };
        let ends_by = if renew {
            LossReason::Unreachable
        } else {
            LossReason::TtlElapsed
        };
        Self {
            state,
            renew,
            interval,
            hold_until,
            renewals_left,
            ends_by,
            due,
        }
    }

    /// The TTL for the next renewal (clipped to the hold bound), or `None` when the
    /// lease must not be renewed any more.
    fn next_ttl(&self, now: Instant) -> Option<Duration> {
        if !self.renew || self.renewals_left == Some(0) {
            return None;
        }
        let ttl = self.state.ttl();
        let ttl = match self.hold_until {
            Some(end) => ttl.min(end.saturating_duration_since(now)),
            None => ttl,
        };
        (ttl >= Duration::from_millis(1)).then_some(ttl)
    }
}

enum Command {
    Register(Box<Lease>),
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

/// Orders the heap by due time, earliest first.
struct Due(Box<Lease>);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.0.due == other.0.due
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.0.due.cmp(&self.0.due)
    }
}

fn run(rx: &Receiver<Command>, core: &Core) {
    let mut heap: BinaryHeap<Due> = BinaryHeap::new();
    loop {
        let next = heap.peek().map(|d| d.0.due);
        if next.is_some_and(|due| due <= Instant::now()) {
            tick(&mut heap, core);
            continue;
        }
        let cmd = match next {
            Some(due) => rx.recv_deadline(due),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match cmd {
            Ok(Command::Register(lease)) => heap.push(Due(lease)),
            Ok(Command::Sync(ack)) => {
                let _ = ack.send(());
            }
            Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => tick(&mut heap, core),
        }
    }
    for Due(lease) in heap {
        if !lease.state.held.lock().released {
            lease
                .state
                .notify_lost(LossReason::Shutdown, &core.counters);
        }
    }
}

/// A lease in the current batch, with its mutex held so that no release runs while
/// its renewal is in flight.
struct InFlight {
    lease: Box<Lease>,
    held: ArcMutexGuard<RawMutex, Held>,
    ttl: Duration,
    cmd: redis::Cmd,
    new_value: String,
}

/// Takes every lease that is due (or nearly), retires the ones that ended, and renews
/// the rest in one pipeline.
fn tick(heap: &mut BinaryHeap<Due>, core: &Core) {
    let now = Instant::now();
    let mut batch: Vec<InFlight> = Vec::new();
    while let Some(top) = heap.peek() {
        let early = top.0.interval / EARLY_SHARE;
        if top.0.due > now + early {
            break;
        }
        let Some(Due(mut lease)) = heap.pop() else {
            break;
        };
        let held = lease.state.held.lock_arc();
        if held.released || lease.state.is_lost() {
            continue;
        }
        if now >= lease.state.valid_until() {
            drop(held);
            lease.state.notify_lost(lease.ends_by, &core.counters);
            continue;
        }
        let Some(ttl) = lease.next_ttl(now) else {
            // Not renewed any more: report the end when the validity runs out.
            if lease.renew {
                lease.ends_by = LossReason::MaxHold;
                lease.renew = false;
            }
            lease.due = lease.state.valid_until();
            drop(held);
            heap.push(Due(lease));
            continue;
        };
        let (cmd, new_value) = lease
            .state
            .backend
            .extend_cmd(&lease.state.key, &held.value, ttl);
        batch.push(InFlight {
            lease,
            held,
            ttl,
            cmd,
            new_value,
        });
    }
    if batch.is_empty() {
        return;
    }
    let sent = Instant::now();
    let replies = send(core, &batch);
    bump(&core.counters.renewals, batch.len() as u64);
    bump(&core.counters.renewal_round_trips, 1);
    for (mut f, reply) in batch.into_iter().zip(replies) {
        let state = Arc::clone(&f.lease.state);
        let outcome = match reply.map(|v| state.backend.extend_reply(&v)) {
            Some(Ok(outcome)) => Some(outcome),
            Some(Err(e)) => {
                log::debug!("renewal of `{}` failed: {e}", state.key);
                None
            }
            None => None,
        };
        match outcome {
            Some(Extend::Extended) => {
                f.held.value = f.new_value;
                state.confirm(sent, f.ttl);
                if let Some(n) = &mut f.lease.renewals_left {
                    *n = n.saturating_sub(1);
                }
                f.lease.due = sent + f.lease.interval;
            }
            Some(gone_or_taken) => {
                drop(f.held);
                let reason = if gone_or_taken == Extend::Taken {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                };
                state.notify_lost(reason, &core.counters);
                continue;
            }
            None => {
                bump(&core.counters.renewals_failed, 1);
                // Retry soon, but report the loss no later than the validity's end.
                let retry = (f.lease.interval / EARLY_SHARE).max(Duration::from_millis(1));
                f.lease.due = (Instant::now() + retry).min(state.valid_until());
            }
        }
        drop(f.held);
        heap.push(Due(f.lease));
    }
}

/// Sends the batch's renewals in one pipeline; one reply per lease, `None` where
/// no reply came (the failure is logged once for the batch).
///
/// The read timeout is cut to the shortest remaining validity in the batch, so a
/// silent server cannot hold the thread past the moment a lease must be reported.
fn send(core: &Core, batch: &[InFlight]) -> Vec<Option<Value>> {
    let result = core.pool.get().map_err(Error::from).and_then(|mut conn| {
        let earliest = batch.iter().map(|f| f.lease.state.valid_until()).min();
        let budget = earliest
            .map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(Instant::now())
            })
            .clamp(Duration::from_millis(1), core.settings.read_timeout);
        let indices: Vec<usize> = (0..batch.len()).collect();
        let timeouts = (budget, core.settings.read_timeout);
        let mut replies = pipeline(&mut conn, batch, &indices, timeouts)?;
        // A server that lost its scripts (restart, SCRIPT FLUSH) answers NOSCRIPT:
        // load them and send just those renewals again.
        let again: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Value::ServerError(e) if e.code() == "NOSCRIPT"))
            .collect();
        if !again.is_empty() {
            for f in &again {
                for script in batch[*f].lease.state.backend.scripts() {
                    conn.run(|c| script.load(c))?;
                }
            }
            let retried = pipeline(&mut conn, batch, &again, timeouts)?;
            for (i, reply) in again.into_iter().zip(retried) {
                replies[i] = reply;
            }
        }
        Ok(replies)
    });
    match result {
        Ok(replies) => replies.into_iter().map(Some).collect(),
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            batch.iter().map(|_| None).collect()
        }
    }
}

/// One round trip carrying the renewals of `batch[i]` for each `i` in `indices`,
/// read with the `budget` timeout, then the connection's usual one restored.
fn pipeline(
    conn: &mut crate::pool::Conn,
    batch: &[InFlight],
    indices: &[usize],
    (budget, usual): (Duration, Duration),
) -> Result<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for &i in indices {
        pipe.add_command(batch[i].cmd.clone());
    }
    let replies = conn.run(|c| {
        c.set_read_timeout(Some(budget))?;
        let replies = pipe.query::<Vec<Value>>(c)?;
        c.set_read_timeout(Some(usual))?;
        Ok(replies)
    })?;
    Ok(replies)
}
