//! One renewal round of the renewal thread: taking the leases that are due and
//! handing them to the topology in one batch ([`Thread::tick`]), then scheduling,
//! retiring or reporting each when its answer comes ([`Thread::answer`]).

use std::sync::Arc;
use std::time::Instant;

use super::Thread;
use super::schedule::{Due, EARLY_SHARE};
use crate::metrics::{bump, export};
use crate::topology::{Renew, Renewed};

impl Thread {
    /// Takes every lease that is due (or nearly), retires the ones that ended, and
    /// hands the rest to the topology in one batch.
    pub(super) fn tick(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(top) = self.queue.heap.peek() {
            if top.0.due > now + top.0.interval / EARLY_SHARE {
                break;
            }
            let Some(Due(lease)) = self.queue.heap.pop() else {
                break;
            };
            due.push(lease);
        }
        // Leases go back into the queue only after every due one is taken out: one
        // put back due within the early window must not be taken again this tick.
        let mut batch = Vec::new();
        for mut lease in due {
            let Some(released) = lease.state.held.try_lock().map(|h| h.released) else {
                // A release or an extend is running on it: look again shortly,
                // and no later than the end of its validity (a loss is told then).
                lease.due = (now + lease.retry()).min(lease.state.valid_until());
                self.queue.push(lease);
                continue;
            };
            if released || lease.state.is_lost() {
                continue;
            }
            if now >= lease.state.valid_until() {
                lease.state.notify_lost(lease.ends_by, &self.counters);
            } else if let Some(ttl) = lease.next_ttl(now) {
                let id = lease.state.id;
                let last = ttl < lease.state.ttl();
                batch.push(Renew {
                    id,
                    state: Arc::clone(&lease.state),
                    ttl,
                });
                self.in_flight.insert(id, (lease, last));
            } else {
                lease.stop_renewing();
                self.queue.push(lease);
            }
        }
        if !batch.is_empty() {
            bump(&self.counters.renewal_ticks, 1);
            self.topology.renew(batch, self.answers_tx.clone());
        }
    }

    /// Schedules, retires or reports each lease of an answered batch.
    pub(super) fn answer(&mut self, batch: Vec<(u64, Renewed)>) {
        let now = Instant::now();
        for (id, outcome) in batch {
            let Some((mut lease, last)) = self.in_flight.remove(&id) else {
                continue;
            };
            if lease.state.is_lost() {
                continue;
            }
            match outcome {
                Renewed::Extended { sent } => {
                    export::renewal("extended");
                    if let Some(n) = &mut lease.renewals_left {
                        *n = n.saturating_sub(1);
                    }
                    if last || lease.renewals_left == Some(0) {
                        lease.stop_renewing();
                    } else {
                        lease.due = lease.schedule(sent);
                    }
                }
                Renewed::Lost(reason) => {
                    export::renewal("lost");
                    lease.state.notify_lost(reason, &self.counters);
                    continue;
                }
                Renewed::Skipped => {
                    if lease.state.held.try_lock().is_some_and(|h| h.released) {
                        continue;
                    }
                    // As below: a loss is told no later than the lease's validity.
                    lease.due = (now + lease.retry()).min(lease.state.valid_until());
                }
                Renewed::Failed => {
                    // Try again soon, but report the loss no later than the end of
                    // the lease's validity.
                    bump(&self.counters.renewals_failed, 1);
                    export::renewal("failed");
                    lease.due = (now + lease.retry()).min(lease.state.valid_until());
                }
            }
            self.queue.push(lease);
        }
    }
}
