//! [`LockClient::shutdown`]: every lease this client's guards still hold,
//! released before the process goes, within a deadline; and what it found
//! ([`ShutdownReport`]).
//!
//! The renewal thread hands over every lease its guards have not released; each
//! is released as its guard's `unlock` would release it (the backend's own
//! owner-checked release, through the topology), but never handed to a waiting
//! caller: the client's waiters are woken with [`Error::Shutdown`](crate::Error::Shutdown)
//! instead. The
//! releases run on a few short-lived threads per node, so one frozen server
//! delays only its own leases, and the caller waits for them until the deadline
//! at most: a release not answered by then is reported as failed, and its lease
//! expires with its TTL (it is no longer renewed).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::client::LockClient;
use crate::error::Result;
use crate::lease::{LeaseState, LossReason};
use crate::metrics::bump;
use crate::scheme::Release;
use crate::threads::wait::{Hub, abandon, release_for_shutdown};

/// Release threads started per node at most: enough to overlap round trips when
/// a shutdown has many leases to release, few enough to spawn in a moment.
const THREADS_PER_NODE: usize = 8;

/// What [`LockClient::shutdown`] did with the leases its guards held.
///
/// A reentrant lock held twice by nested guards counts twice: each hold is
/// released on its own, as its guard would have released it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Leases that were still ours and are now released in Redis (a reentrant
    /// hold, a read hold, a permit: that hold given back).
    pub released: usize,
    /// Leases whose release found them gone (expired, or deleted) or someone
    /// else's: left untouched.
    pub already_gone: usize,
    /// Leases whose release failed or got no answer before the deadline: they
    /// are no longer renewed, and expire with their TTL.
    pub failed: usize,
}

impl ShutdownReport {
    /// Every lease the shutdown took from its guards.
    pub fn total(&self) -> usize {
        self.released + self.already_gone + self.failed
    }
}

impl LockClient {
    /// Releases every lease this client's guards still hold, within `deadline`,
    /// and stops the client taking new ones.
    ///
    /// In order: new lock calls (of every primitive) are refused and waiting
    /// calls woken with [`Error::Shutdown`](crate::Error::Shutdown), as by [`close`](Self::close); the
    /// renewal thread hands over every lease not yet released, and renews none of
    /// them again; each is released as its guard's `unlock` would release it
    /// (owner-checked: a key someone else holds now is left alone), never handed
    /// to a waiting caller. Releases run concurrently, a few at a time per node.
    ///
    /// Afterwards every guard of these leases ([`LockGuard`](crate::LockGuard),
    /// [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard),
    /// [`PermitGuard`](crate::PermitGuard), a fair lock's guard, each name of a
    /// [`MultiGuard`](crate::MultiGuard), a [`Leadership`](crate::Leadership)) says
    /// `is_held() == false`; its `lost()` receiver gets one [`LeaseLost`](crate::LeaseLost)
    /// (reason [`LossReason::Released`], or [`Expired`](LossReason::Expired) /
    /// [`Taken`](LossReason::Taken) when the release found the lease gone) and an
    /// `on_lost` callback runs; `unlock()` and `extend()` return
    /// [`Error::Shutdown`](crate::Error::Shutdown) (a `MultiGuard`'s `unlock` one
    /// per name, a `Leadership`'s `resign` too) and dropping it sends nothing. A
    /// lock inside its [minimum hold](crate::LockOptions::min_hold) is kept until
    /// the hold ends, as its `unlock` would keep it, and counts as released. A
    /// guard released by its holder while the shutdown ran is not counted.
    ///
    /// Releases that guards dropped before it queued for the I/O threads
    /// ([`release_in_background`](crate::LockClientBuilder::release_in_background))
    /// are waited for until `deadline` too, and counted in the report as the
    /// others are (one still unanswered then counts as failed).
    ///
    /// Returns by `deadline` (plus the time to spawn the release threads); a
    /// release not answered by then counts as [`failed`](ShutdownReport::failed),
    /// and may still land afterwards. Calling it again returns an empty report.
    /// The client's threads keep running until its last clone is dropped.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::{Duration, Instant};
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let guard = client.lock("invoice:42")?;
    /// // SIGTERM arrived: give every lock back before the process goes.
    /// let report = client.shutdown(Instant::now() + Duration::from_secs(5));
    /// assert!(!guard.is_held());
    /// println!("released {}, {} left to expire", report.released, report.failed);
    /// # Ok(()) }
    /// ```
    pub fn shutdown(&self, deadline: Instant) -> ShutdownReport {
        let hub = &self.inner.hub;
        // Releases dropped guards queued (`release_in_background`): what they
        // found from here on is this shutdown's to report.
        let before = hub.queued.tally();
        // Seen by an acquire that registers its lease after the renewal thread
        // answers below: it gives its lease back itself (see `acquire`).
        self.inner.stopped.store(true, Ordering::SeqCst);
        self.close();
        let leases = self.inner.renewer.unreleased();
        let (done_tx, done) = crossbeam_channel::unbounded();
        for group in by_node(hub, &leases) {
            start(hub, group, deadline, &done_tx);
        }
        drop(done_tx);
        let mut answered = vec![false; leases.len()];
        let mut report = ShutdownReport::default();
        for _ in 0..leases.len() {
            let Ok((i, outcome)) = done.recv_deadline(deadline) else {
                break;
            };
            answered[i] = true;
            count(hub, &leases[i], outcome, &mut report);
        }
        for (state, _) in leases.iter().zip(&answered).filter(|(_, a)| !**a) {
            // Not sent, or no answer yet: it expires with its TTL.
            abandon(state);
            state.notify_lost(LossReason::Released, &hub.counters);
            report.failed += 1;
        }
        let unanswered = hub.queued.drain(deadline);
        let queued = hub.queued.tally() - before;
        report.released += queued.released;
        report.already_gone += queued.gone;
        report.failed += queued.failed + unanswered;
        if report.total() > 0 {
            log::info!("shutdown: {report:?}");
        }
        report
    }
}

/// A lease's index in the shutdown's list, with the lease.
type Job = (usize, Arc<LeaseState>);
/// A lease's index and what its release said (`None`: its guard released it).
type Done = (usize, Option<Result<Release>>);

/// The leases grouped by the node that holds them (a quorum's all together).
fn by_node(hub: &Hub, leases: &[Arc<LeaseState>]) -> Vec<Vec<Job>> {
    let mut groups: HashMap<Option<usize>, Vec<Job>> = HashMap::new();
    for (i, state) in leases.iter().enumerate() {
        let node = hub.topology.readers(&state.key).first().map(|n| {
            // The node's address identifies it for as long as `readers` keeps it.
            Arc::as_ptr(n) as usize
        });
        groups.entry(node).or_default().push((i, Arc::clone(state)));
    }
    groups.into_values().collect()
}

/// Starts the release threads of one node's leases, each taking the next lease
/// until none is left or the deadline passed. Without threads, releases on the
/// caller's thread.
fn start(hub: &Arc<Hub>, group: Vec<Job>, deadline: Instant, done: &Sender<Done>) {
    let threads = group.len().min(THREADS_PER_NODE);
    let (jobs_tx, jobs) = crossbeam_channel::unbounded();
    for job in group {
        let _ = jobs_tx.send(job);
    }
    drop(jobs_tx);
    for _ in 0..threads {
        let (mine, theirs, tell) = (Arc::clone(hub), jobs.clone(), done.clone());
        let spawned = std::thread::Builder::new()
            .name("redlease-stop".into())
            .spawn(move || work(&mine, &theirs, deadline, &tell));
        if spawned.is_err() {
            work(hub, &jobs, deadline, done);
            return;
        }
    }
}

/// Releases leases from `jobs` until none is left or the deadline passed.
fn work(hub: &Hub, jobs: &Receiver<Job>, deadline: Instant, done: &Sender<Done>) {
    while Instant::now() < deadline {
        let Ok((i, state)) = jobs.try_recv() else {
            return;
        };
        // The caller stops reading at the deadline: an answer after it is lost.
        let _ = done.send((i, release_for_shutdown(hub, &state)));
    }
}

/// Counts one answered release, and tells the lease's guard how it ended.
fn count(
    hub: &Hub,
    state: &LeaseState,
    outcome: Option<Result<Release>>,
    report: &mut ShutdownReport,
) {
    let reason = match outcome {
        // Its guard released it meanwhile: not the shutdown's.
        None => return,
        Some(Ok(Release::Released)) => {
            bump(&hub.counters.released, 1);
            report.released += 1;
            LossReason::Released
        }
        Some(Ok(Release::Taken)) => {
            report.already_gone += 1;
            LossReason::Taken
        }
        Some(Ok(_)) => {
            report.already_gone += 1;
            LossReason::Expired
        }
        Some(Err(e)) => {
            bump(&hub.counters.release_errors, 1);
            log::warn!("shutdown: release of `{}` failed: {e}", state.key);
            report.failed += 1;
            LossReason::Released
        }
    };
    state.notify_lost(reason, &hub.counters);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_totals_its_counts() {
        let report = ShutdownReport {
            released: 3,
            already_gone: 2,
            failed: 1,
        };
        assert_eq!(report.total(), 6);
        assert_eq!(ShutdownReport::default().total(), 0);
    }
}
