//! One node's share of a renewal tick: the renewals of a batch of leases in one
//! pipeline. The exchange with the node (`pipeline`: chunks of leases renewed by
//! one script call each) gives raw [`Reply`]s; where one node holds
//! the lock ([`renew`]) they are applied to each lease at once, with the lease's
//! mutex held while its renewal is in flight, so that no release runs while a
//! renewal of the same value is on the wire. Where a quorum holds it, the topology
//! holds the mutexes across all nodes and applies the majority's answer ([`vote`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{ArcMutexGuard, RawMutex};
use redis::Value;

use super::Link;
use super::pipeline::{Item, Loaded, exchange, slot_rule};
use crate::lease::{Held, LeaseState, LossReason};
use crate::metrics::{Counters, bump};
use crate::net::connection::Conn;
use crate::net::node::Node;
use crate::scheme::{Backend, Extend};
use crate::topology::{Renew, Renewed};

/// The shortest timeout a round trip gets, however close a lease is to its end.
const MIN_BUDGET: Duration = Duration::from_millis(1);

/// A lease of a batch, with its mutex held: no release or extend runs on it until
/// this is dropped.
pub(crate) struct Flight {
    pub(crate) id: u64,
    pub(crate) state: Arc<LeaseState>,
    pub(crate) held: ArcMutexGuard<RawMutex, Held>,
    pub(crate) ttl: Duration,
}

/// What one node answered to one renewal, not yet applied to the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    Extended,
    Gone,
    Taken,
    /// The node answered with an error: nothing was changed.
    Error,
    /// No answer in time: the renewal may or may not have landed.
    Unanswered,
}

/// One lease's renewal for a node that is not the only one holding the lock: the
/// values it renews, copied out of the lease so each node's thread can send them.
/// (Only the token scheme runs on a quorum; its value never changes.)
pub(crate) struct Spec {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) ttl: Duration,
}

/// Takes each lease's mutex without waiting. A lease whose release or extend is
/// running (mutex busy), or that is released or lost, is answered `Skipped` and
/// looked at again shortly by the renewal thread.
pub(crate) fn hold(batch: Vec<Renew>) -> (Vec<Flight>, Vec<(u64, Renewed)>) {
    let mut flights = Vec::with_capacity(batch.len());
    let mut skipped = Vec::new();
    for Renew { id, state, ttl } in batch {
        let Some(held) = state.held.try_lock_arc() else {
            skipped.push((id, Renewed::Skipped));
            continue;
        };
        if held.released || state.is_lost() {
            skipped.push((id, Renewed::Skipped));
            continue;
        }
        flights.push(Flight {
            id,
            state,
            held,
            ttl,
        });
    }
    (flights, skipped)
}

/// How long a round trip may take for a batch whose earliest end of validity is
/// `report_by`: never past it, never more than the node's read timeout.
fn budget(node: &Node, report_by: Option<Instant>) -> Duration {
    report_by
        .map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
        .clamp(MIN_BUDGET, node.read_timeout())
}

/// Renews `batch` on `node`, the only node holding these locks, in one round trip
/// (two more after a `NOSCRIPT`), and says what each renewal found. Confirmed
/// renewals move the lease's validity before this returns.
///
/// The connection is taken first and each lease's mutex after it, without waiting
/// (a lease whose release or extend is running is skipped and looked at again
/// shortly): a guard's `extend`, which holds a connection while it waits for the
/// mutex, cannot stall the batch even with a pool of one. Every wait is bounded by
/// the earliest end of validity in the batch.
pub(crate) fn renew(
    node: &Node,
    counters: &Counters,
    batch: Vec<Renew>,
    loaded: &mut Loaded,
) -> Vec<(u64, Renewed)> {
    let started = Instant::now();
    let report_by = batch.iter().map(|r| r.state.valid_until()).min();
    let mut conn = match node.get_timeout(budget(node, report_by)) {
        Ok(conn) => conn,
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            bump(&counters.renewal_nanos, nanos_since(started));
            return batch.into_iter().map(|r| (r.id, Renewed::Failed)).collect();
        }
    };
    let (flights, mut answers) = hold(batch);
    if flights.is_empty() {
        return answers;
    }
    let mut items: Vec<Item<'_>> = flights
        .iter()
        .map(|f| {
            let backend = &f.state.backend;
            Item::new(backend, &f.state.key, &f.held.value, &f.held.maybe, f.ttl)
        })
        .collect();
    let sent = Instant::now();
    let budget = budget(node, report_by);
    let replies: Vec<Reply> = send(&mut conn, node, counters, &mut items, budget, loaded)
        .into_iter()
        .zip(&items)
        .map(|(reply, item)| read(item, reply))
        .collect();
    drop(conn);
    bump(&counters.renewal_nanos, nanos_since(started));
    let written: Vec<Option<String>> = items.into_iter().map(|i| i.new_value).collect();
    for ((f, reply), new_value) in flights.into_iter().zip(replies).zip(written) {
        answers.push((f.id, apply(f, sent, reply, new_value)));
    }
    answers
}

/// One node's reply applied to its lease, the lease's mutex still held.
/// `new_value`: what the lease's own command wrote, `None` when the value stayed.
fn apply(mut f: Flight, sent: Instant, reply: Reply, new_value: Option<String>) -> Renewed {
    match reply {
        Reply::Extended => {
            let value = new_value.unwrap_or_else(|| std::mem::take(&mut f.held.value));
            f.held.confirmed(value);
            f.state.renewed(sent, f.ttl);
            Renewed::Extended { sent }
        }
        Reply::Taken => Renewed::Lost(LossReason::Taken),
        Reply::Gone => Renewed::Lost(LossReason::Expired),
        Reply::Error => Renewed::Failed,
        Reply::Unanswered => {
            // No reply: the renewal may have landed and rewritten the value.
            if let Some(new_value) = new_value {
                f.held.unconfirmed(new_value);
            }
            Renewed::Failed
        }
    }
}

/// Sends `specs` to one node of a quorum in one round trip (two more after a
/// `NOSCRIPT`) on the thread's own connection, and returns the raw replies, one
/// per spec. Nothing is sent once `report_by` (the earliest end of validity among
/// the specs' leases) has passed: no answer could count then.
pub(crate) fn vote(
    link: &mut Link,
    counters: &Counters,
    specs: &[Spec],
    report_by: Option<Instant>,
    loaded: &mut Loaded,
) -> Vec<Reply> {
    let started = Instant::now();
    if report_by.is_some_and(|t| t <= started) {
        return vec![Reply::Unanswered; specs.len()];
    }
    let budget = budget(link.node(), report_by);
    let slot = slot_rule(link.node());
    let conn = match link.conn(started + budget, budget) {
        Ok(conn) => conn,
        Err(e) => {
            log::debug!("renewal of {} leases failed: {e}", specs.len());
            return vec![Reply::Unanswered; specs.len()];
        }
    };
    let mut items: Vec<Item<'_>> = specs
        .iter()
        .map(|s| Item::new(&s.backend, &s.key, &s.value, &[], s.ttl))
        .collect();
    let replies = exchange(conn, counters, &mut items, loaded, slot);
    bump(&counters.renewal_nanos, nanos_since(started));
    replies
        .into_iter()
        .zip(&items)
        .map(|(reply, item)| read(item, reply))
        .collect()
}

/// A node's reply to one renewal command.
fn read(item: &Item<'_>, reply: Option<Value>) -> Reply {
    let Some(value) = reply else {
        return Reply::Unanswered;
    };
    match item.backend.extend_reply(&value) {
        Ok(Extend::Extended) => Reply::Extended,
        Ok(Extend::Gone) => Reply::Gone,
        Ok(Extend::Taken) => Reply::Taken,
        Err(e) => {
            log::debug!("renewal of `{}` failed: {e}", item.key);
            Reply::Error
        }
    }
}

fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Sends the batch's renewals in one pipeline; one reply per lease, `None` where
/// no reply came (the failure is logged once for the batch). Every read and write
/// on the connection is bounded by `budget`.
fn send(
    conn: &mut Conn,
    node: &Node,
    counters: &Counters,
    batch: &mut [Item<'_>],
    budget: Duration,
    loaded: &mut Loaded,
) -> Vec<Option<Value>> {
    let timeouts = |conn: &mut Conn, read, write| {
        conn.run(|c| {
            c.set_read_timeout(Some(read))?;
            c.set_write_timeout(Some(write))
        })
    };
    let replies = match timeouts(conn, budget, budget) {
        Ok(()) => exchange(conn, counters, batch, loaded, slot_rule(node)),
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            vec![None; batch.len()]
        }
    };
    if !conn.broken {
        let _ = timeouts(conn, node.read_timeout(), node.write_timeout());
    }
    replies
}
