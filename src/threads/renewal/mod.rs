//! The renewal thread: one per client, fed held leases through a channel. It keeps
//! them in due order and, at each tick, hands every due lease to the topology,
//! which renews them in one pipelined round trip per node on its own I/O threads.
//!
//! The thread itself never waits on the network or on user code, so it reports a
//! loss when the lease's validity ends, whatever a round trip in flight is doing.
//! A lease's shared state ([`LeaseState`]) is all it has in common with the guard:
//! validity moves forward only on a confirmed renewal, and loss is reported through
//! it. A release is not sent to the thread: it marks the lease under the lease's
//! mutex, and the thread drops the lease when it next comes due (or in a sweep).
//!
//! Layout: this file is the thread (its channels, its loop); `round.rs` one
//! renewal round (a tick, the answers); `schedule.rs` each lease's renewal policy
//! and the deadline queue; `session.rs` the client's session record.

mod round;
mod schedule;
mod session;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering, fence};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{Receiver, Select, Sender};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::lease::{LeaseState, LossReason};
use crate::metrics::Counters;
use crate::owner::SESSION_WAKE;
use crate::owner::SessionWrite;
use crate::time::to_nanos;
use crate::topology::{Renewed, Topology};
pub(crate) use schedule::Lease;
use schedule::Queue;
use session::Refresh;

/// What the renewal thread is told, on its channel.
enum Command {
    /// Look at the inbox of new leases now: one of them is due before the thread
    /// would otherwise wake, or the inbox is getting long.
    Wake,
    /// Acknowledge once every earlier command is taken (for `flush`).
    Sync(Sender<()>),
    /// Send every lease held now (for `LockClient::held`).
    Held(Sender<Vec<Arc<LeaseState>>>),
    /// Send every lease its guard has not released, lost or not, the inbox's
    /// included (for `LockClient::shutdown`, which releases them).
    Unreleased(Sender<Vec<Arc<LeaseState>>>),
    Shutdown,
}

/// New leases waiting in the inbox after which the thread is woken to take them.
const INBOX_WAKE: usize = 1024;

/// The renewal thread's handle; dropping it stops and joins the thread.
///
/// New leases go into an inbox of their own (a vector behind a mutex), which the
/// thread empties whenever it wakes; it is woken for them only when one is due before
/// its next wake-up or the inbox is long. So taking a lock costs a push, not a
/// thread wake-up, and a client churning through short locks keeps the thread
/// asleep until the next renewal is due.
pub(crate) struct Renewer {
    tx: Sender<Command>,
    inbox: Arc<Mutex<Vec<Lease>>>,
    reschedule: Sender<u64>,
    /// When the thread will next wake on its own (lease-clock nanoseconds); 0
    /// while it is awake and will still look at the inbox.
    wake_at: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

/// The thread: its channels, its queue, and the leases whose renewal is in flight.
struct Thread {
    rx: Receiver<Command>,
    inbox: Arc<Mutex<Vec<Lease>>>,
    /// The inbox's last contents, emptied, swapped back in on the next take, so
    /// neither side allocates in the steady state.
    spare: Vec<Lease>,
    reschedule: Receiver<u64>,
    wake_at: Arc<AtomicU64>,
    answers_tx: Sender<Vec<(u64, Renewed)>>,
    answers: Receiver<Vec<(u64, Renewed)>>,
    topology: Arc<dyn Topology>,
    counters: Arc<Counters>,
    queue: Queue,
    session: Refresh,
    /// The earliest time a lease dropped from the inbox (released before the thread
    /// saw it) would have come due. The thread wakes then even with nothing queued,
    /// so that leases taken on the same terms later, due later still, find a wake-up
    /// time already published and need not wake it: a client churning through
    /// short locks on one thread then wakes it about once per renewal interval.
    dropped_due: Option<Instant>,
    /// Leases handed to the topology, by id, with whether it is their last renewal
    /// (clipped to the hold bound).
    in_flight: HashMap<u64, (Lease, bool)>,
    /// The end of the liveness session's validity whose lapse was last reported
    /// (lease-clock nanos).
    lapse_told: Option<u64>,
}

impl Renewer {
    /// Starts the thread, once the session record `session` is written.
    pub(crate) fn spawn(
        topology: Arc<dyn Topology>,
        counters: Arc<Counters>,
        session: SessionWrite,
    ) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let inbox = Arc::new(Mutex::new(Vec::new()));
        let (reschedule, reschedule_rx) = crossbeam_channel::unbounded();
        let (answers_tx, answers) = crossbeam_channel::unbounded();
        let wake_at = Arc::new(AtomicU64::new(0));
        if let Some(live) = session.liveness() {
            live.wake_with(reschedule.clone());
        }
        let mut thread = Thread {
            rx,
            inbox: Arc::clone(&inbox),
            spare: Vec::new(),
            reschedule: reschedule_rx,
            wake_at: Arc::clone(&wake_at),
            answers_tx,
            answers,
            session: Refresh::start(&*topology, session),
            topology,
            counters,
            queue: Queue::new(),
            dropped_due: None,
            in_flight: HashMap::new(),
            lapse_told: None,
        };
        if thread.session.live().is_some_and(|l| !l.ready()) {
            return Err(Error::config(
                "liveness",
                "the session record could not be written (the redis user needs HSET, \
                 PEXPIRE and DEL on `<prefix>redlease:session:*`), or, with replica \
                 confirmation, was not acknowledged by enough replicas",
            ));
        }
        let handle = thread::Builder::new()
            .name("redlease-renew".into())
            .spawn(move || thread.run())
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            inbox,
            reschedule,
            wake_at,
            handle: Some(handle),
        })
    }

    /// Hands a newly acquired lease to the thread.
    pub(crate) fn register(&self, lease: Lease) {
        let _ = lease.state.reschedule.set(self.reschedule.clone());
        let due = to_nanos(lease.due);
        // Leases released before the thread took them leave the inbox here, on the
        // thread of a caller, which most often made them: their memory goes back to
        // the allocator's cache of the thread that will allocate the next ones,
        // instead of being freed on the renewal thread.
        let mut done: [Option<Lease>; 2] = [None, None];
        let queued = {
            let mut inbox = self.inbox.lock();
            for slot in &mut done {
                if !inbox.last().is_some_and(Lease::released) {
                    break;
                }
                *slot = inbox.pop();
            }
            inbox.push(lease);
            inbox.len()
        };
        drop(done);
        // Pairs with the fence in `run`: either the thread sees this lease before it
        // sleeps, or this sees the wake-up time it published.
        fence(AtomicOrdering::SeqCst);
        if due < self.wake_at.load(AtomicOrdering::SeqCst) || queued >= INBOX_WAKE {
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

    /// The leases held now (not released, not lost); empty once the thread stopped.
    pub(crate) fn held(&self) -> Vec<Arc<LeaseState>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Command::Held(tx)).is_err() {
            return Vec::new();
        }
        rx.recv().unwrap_or_default()
    }

    /// Every lease whose guard has not released it, lost ones included; empty once
    /// the thread stopped. A lease registered after this call returns is not in it.
    pub(crate) fn unreleased(&self) -> Vec<Arc<LeaseState>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Command::Unreleased(tx)).is_err() {
            return Vec::new();
        }
        rx.recv().unwrap_or_default()
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

impl Thread {
    /// Applies a command; `false` on shutdown.
    fn apply(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Wake => {}
            Command::Sync(ack) => {
                let _ = ack.send(());
            }
            Command::Held(tx) => {
                let queued = self.queue.heap.iter().map(|d| &d.0);
                let leases = queued.chain(self.in_flight.values().map(|(l, _)| l));
                let held = leases.filter(|l| !l.state.is_lost() && !l.released());
                let _ = tx.send(held.map(|l| Arc::clone(&l.state)).collect());
            }
            Command::Unreleased(tx) => {
                // A lease registered before the command was sent is in the inbox
                // or the queue by now.
                self.take_inbox();
                let queued = self.queue.heap.iter().map(|d| &d.0);
                let leases = queued.chain(self.in_flight.values().map(|(l, _)| l));
                let all = leases.filter(|l| !l.released());
                let _ = tx.send(all.map(|l| Arc::clone(&l.state)).collect());
            }
            Command::Shutdown => return false,
        }
        true
    }

    fn run(&mut self) {
        'run: loop {
            self.wake_at.store(0, AtomicOrdering::SeqCst);
            self.take_inbox();
            self.take_answers();
            self.report_ended();
            let session_end = self.check_session();
            let next = self.queue.heap.peek().map(|d| d.0.due);
            if next.is_some_and(|due| due <= Instant::now()) {
                // Take what is queued first, but no more, so a stream of commands
                // cannot hold off a tick.
                for _ in 0..self.rx.len() {
                    let Ok(cmd) = self.rx.try_recv() else { break };
                    if !self.apply(cmd) {
                        break 'run;
                    }
                }
                self.tick();
                continue;
            }
            let now = Instant::now();
            let dropped = self.dropped_due.take().filter(|d| *d > now);
            self.dropped_due = dropped;
            let session = self.session.due(&*self.topology);
            let wake = [next, self.next_end(), dropped, Some(session), session_end];
            let wake = wake.into_iter().flatten().min();
            self.wake_at
                .store(wake.map_or(u64::MAX, to_nanos), AtomicOrdering::SeqCst);
            fence(AtomicOrdering::SeqCst);
            if !self.inbox.lock().is_empty() {
                continue;
            }
            if !self.wait(wake) {
                break;
            }
        }
        self.session.end(&*self.topology);
        self.take_inbox();
        let queued = std::mem::take(&mut self.queue.heap)
            .into_iter()
            .map(|d| d.0);
        let flying = self.in_flight.drain().map(|(_, (lease, _))| lease);
        for lease in queued.chain(flying).collect::<Vec<_>>() {
            let released = lease.state.held.lock().released;
            if !released {
                lease
                    .state
                    .notify_lost(LossReason::Shutdown, &self.counters);
            }
        }
    }

    /// Sleeps until a command, an answer, a reschedule or `until`; `false` on
    /// shutdown.
    fn wait(&mut self, until: Option<std::time::Instant>) -> bool {
        let mut sel = Select::new();
        let commands = sel.recv(&self.rx);
        let answers = sel.recv(&self.answers);
        let reschedules = sel.recv(&self.reschedule);
        let oper = match until {
            Some(at) => match sel.select_deadline(at) {
                Ok(oper) => oper,
                Err(_) => return true,
            },
            None => sel.select(),
        };
        match oper.index() {
            i if i == commands => match oper.recv(&self.rx) {
                Ok(cmd) => {
                    // Leases first: a flush may be about one of them.
                    self.take_inbox();
                    self.apply(cmd)
                }
                Err(_) => false,
            },
            i if i == answers => {
                if let Ok(batch) = oper.recv(&self.answers) {
                    self.answer(batch);
                }
                true
            }
            i if i == reschedules => {
                if let Ok(id) = oper.recv(&self.reschedule) {
                    self.take_inbox();
                    // The session is looked at on every turn of the loop.
                    if id != SESSION_WAKE {
                        self.queue.reschedule(id);
                    }
                }
                true
            }
            _ => true,
        }
    }

    /// Moves the inbox's leases into the queue, and applies pending reschedules.
    /// Leases released meanwhile are dropped; one whose mutex is busy is kept and
    /// looked at when due (the thread never waits on a lease's mutex).
    fn take_inbox(&mut self) {
        std::mem::swap(&mut *self.inbox.lock(), &mut self.spare);
        for lease in self.spare.drain(..) {
            if lease.state.session_ended() {
                lease
                    .state
                    .notify_lost(LossReason::SessionEnded, &self.counters);
            } else if lease.state.held.try_lock().is_none_or(|h| !h.released) {
                self.queue.push(lease);
            } else if self.dropped_due.is_none_or(|d| lease.due < d) {
                self.dropped_due = Some(lease.due);
            }
        }
        for id in self.reschedule.try_iter() {
            self.queue.reschedule(id);
        }
    }

    fn take_answers(&mut self) {
        while let Ok(batch) = self.answers.try_recv() {
            self.answer(batch);
        }
    }

    /// The earliest end of validity among the leases whose renewal is in flight and
    /// not yet reported lost.
    fn next_end(&self) -> Option<Instant> {
        self.in_flight
            .values()
            .filter(|(l, _)| !l.state.is_lost())
            .map(|(l, _)| l.state.valid_until())
            .min()
    }

    /// Looks at the client's liveness session: a record found gone ends its epoch
    /// (every lease of it is lost; the next epoch's record is written), and a
    /// session not confirmed before its validity ended loses every lease held
    /// (the holder must know before anyone may break them). Returns when to look
    /// again: the end of the session's validity, while leases are held.
    fn check_session(&mut self) -> Option<Instant> {
        let live = Arc::clone(self.session.live()?);
        if live.take_gone() {
            log::warn!("liveness session record found gone: every lease of it is lost");
            live.next_epoch();
            self.session.restart(&*self.topology);
            self.lose_leases(LeaseState::session_ended);
        }
        if self.queue.heap.is_empty() && self.in_flight.is_empty() {
            return None;
        }
        let end = live.valid_until();
        if Instant::now() < end {
            return Some(end);
        }
        if self.lapse_told != Some(to_nanos(end)) {
            self.lapse_told = Some(to_nanos(end));
            log::warn!(
                "liveness session not confirmed within its liveness: every lease held is lost"
            );
            self.lose_leases(|_| true);
        }
        None
    }

    /// Reports every queued or in-flight lease that `which` picks lost, as its
    /// session ended, and releases its value in the background: no longer
    /// renewed, it would keep its lock until its TTL, and a new record of this
    /// client (or one still alive after a lapse) would keep waiters from breaking
    /// it. The release compares the value, so it never removes another's lock;
    /// the guard's own `unlock` then finds it gone. A reentrant hold is left to
    /// its TTL, as a late grant's is.
    fn lose_leases(&self, which: impl Fn(&LeaseState) -> bool) {
        let queued = self.queue.heap.iter().map(|d| &d.0);
        let leases = queued.chain(self.in_flight.values().map(|(l, _)| l));
        for lease in leases {
            let state = &lease.state;
            if state.is_lost() || lease.released() || !which(state) {
                continue;
            }
            state.notify_lost(LossReason::SessionEnded, &self.counters);
            if state.backend.reentrant() {
                continue;
            }
            let value = state.held.try_lock().map(|h| h.value.clone());
            if let Some(value) = value {
                let until = Instant::now() + state.ttl();
                let backend = Arc::clone(&state.backend);
                self.topology
                    .release_later(backend, state.keys(), value, until);
            }
        }
    }

    /// Reports every in-flight lease whose validity has ended: its answer may come
    /// late or never, and the holder must know now.
    fn report_ended(&self) {
        let now = Instant::now();
        for (lease, _) in self.in_flight.values() {
            if !lease.state.is_lost() && now >= lease.state.valid_until() {
                lease.state.notify_lost(lease.ends_by, &self.counters);
            }
        }
    }
}
