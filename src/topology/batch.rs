//! One node's share of a renewal tick: the renewals of a batch of leases in one
//! pipeline, each lease's mutex held while its renewal is in flight, so that no
//! release runs while a renewal of the same value is on the wire.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{ArcMutexGuard, RawMutex};
use redis::{RedisResult, Value};

use super::{Renew, Renewed};
use crate::connection::Conn;
use crate::lease::{Held, LeaseState, LossReason};
use crate::metrics::{Counters, bump};
use crate::node::Node;
use crate::scheme::{Backend, Extend};

/// The shortest timeout a round trip gets, however close a lease is to its end.
const MIN_BUDGET: Duration = Duration::from_millis(1);

/// A lease in the current batch, with its mutex held.
struct InFlight {
    id: u64,
    state: Arc<LeaseState>,
    held: ArcMutexGuard<RawMutex, Held>,
    ttl: Duration,
    cmd: redis::Cmd,
    new_value: String,
}

/// Renews `batch` on `node` in one round trip (two more after a `NOSCRIPT`), and
/// says what each renewal found. Confirmed renewals move the lease's validity
/// before this returns.
///
/// The connection is taken first and each lease's mutex after it, without waiting
/// (a lease whose release or extend is running is skipped and looked at again
/// shortly): a guard's `extend`, which holds a connection while it waits for the
/// mutex, cannot stall the batch even with a pool of one. Every wait is bounded by
/// the earliest end of validity in the batch.
pub(super) fn renew(
    node: &Node,
    counters: &Counters,
    batch: Vec<Renew>,
    loaded: &mut Loaded,
) -> Vec<(u64, Renewed)> {
    let started = Instant::now();
    let report_by = batch.iter().map(|r| r.state.valid_until()).min();
    let budget = || {
        report_by
            .map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(Instant::now())
            })
            .clamp(MIN_BUDGET, node.read_timeout())
    };
    let mut answers = Vec::with_capacity(batch.len());
    let mut conn = match node.get_timeout(budget()) {
        Ok(conn) => conn,
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            bump(&counters.renewal_nanos, nanos_since(started));
            answers.extend(batch.into_iter().map(|r| (r.id, Renewed::Failed)));
            return answers;
        }
    };
    let mut flights = Vec::with_capacity(batch.len());
    for Renew { id, state, ttl } in batch {
        let Some(held) = state.held.try_lock_arc() else {
            answers.push((id, Renewed::Skipped));
            continue;
        };
        if held.released || state.is_lost() {
            answers.push((id, Renewed::Skipped));
            continue;
        }
        let (cmd, new_value) = state
            .backend
            .extend_cmd(&state.key, &held.value, &held.maybe, ttl);
        flights.push(InFlight {
            id,
            state,
            held,
            ttl,
            cmd,
            new_value,
        });
    }
    if flights.is_empty() {
        return answers;
    }
    let sent = Instant::now();
    let replies = send(&mut conn, node, counters, &mut flights, budget(), loaded);
    drop(conn);
    bump(&counters.renewal_nanos, nanos_since(started));
    for (f, reply) in flights.into_iter().zip(replies) {
        let InFlight {
            id,
            state,
            mut held,
            ttl,
            new_value,
            ..
        } = f;
        let outcome = match reply.map(|v| state.backend.extend_reply(&v)) {
            Some(Ok(Extend::Extended)) => {
                held.confirmed(new_value);
                state.renewed(sent, ttl);
                Renewed::Extended { sent }
            }
            Some(Ok(Extend::Taken)) => Renewed::Lost(LossReason::Taken),
            Some(Ok(Extend::Gone)) => Renewed::Lost(LossReason::Expired),
            Some(Err(e)) => {
                log::debug!("renewal of `{}` failed: {e}", state.key);
                Renewed::Failed
            }
            None => {
                // No reply: the renewal may have landed and rewritten the value.
                held.unconfirmed(new_value);
                Renewed::Failed
            }
        };
        answers.push((id, outcome));
    }
    answers
}

fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The hashes of the scripts the node's I/O thread has loaded on the server: each is
/// loaded before its first use, so renewals do not meet `NOSCRIPT` in the normal case.
pub(super) type Loaded = HashSet<&'static str>;

/// Sends the batch's renewals in one pipeline; one reply per lease, `None` where
/// no reply came (the failure is logged once for the batch). Every read and write
/// on the connection is bounded by `budget`.
fn send(
    conn: &mut Conn,
    node: &Node,
    counters: &Counters,
    batch: &mut [InFlight],
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
        Ok(()) => exchange(conn, counters, batch, loaded),
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

fn exchange(
    conn: &mut Conn,
    counters: &Counters,
    batch: &mut [InFlight],
    loaded: &mut Loaded,
) -> Vec<Option<Value>> {
    let all: Vec<usize> = (0..batch.len()).collect();
    let first = load_scripts(conn, counters, batch, &all, loaded)
        .and_then(|()| round_trip(conn, counters, batch, &all));
    let mut replies: Vec<Option<Value>> = match first {
        Ok(replies) => replies.into_iter().map(Some).collect(),
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            return vec![None; batch.len()];
        }
    };
    // A server that lost its scripts (restart, SCRIPT FLUSH) answers NOSCRIPT: load
    // them again and send just those renewals again.
    let again: Vec<usize> = (0..replies.len())
        .filter(|&i| matches!(&replies[i], Some(Value::ServerError(e)) if e.code() == "NOSCRIPT"))
        .collect();
    if again.is_empty() {
        return replies;
    }
    loaded.clear();
    for &i in &again {
        let f = &mut batch[i];
        let state = &f.state;
        (f.cmd, f.new_value) =
            state
                .backend
                .extend_cmd(&state.key, &f.held.value, &f.held.maybe, f.ttl);
    }
    let retried = load_scripts(conn, counters, batch, &again, loaded)
        .and_then(|()| round_trip(conn, counters, batch, &again));
    match retried {
        Ok(retried) => {
            for (i, reply) in again.into_iter().zip(retried) {
                replies[i] = Some(reply);
            }
        }
        Err(e) => {
            log::warn!(
                "renewal of {} leases failed after NOSCRIPT: {e}",
                again.len()
            );
            for i in again {
                replies[i] = None;
            }
        }
    }
    replies
}

/// Loads the scripts of `batch[i]`'s scheme, for each `i` in `indices`, that are not
/// in `loaded` yet: one round trip per script, once per server.
fn load_scripts(
    conn: &mut Conn,
    counters: &Counters,
    batch: &[InFlight],
    indices: &[usize],
    loaded: &mut Loaded,
) -> RedisResult<()> {
    let mut last: Option<&Arc<dyn Backend>> = None;
    for &i in indices {
        let backend = &batch[i].state.backend;
        if last.is_some_and(|b| Arc::ptr_eq(b, backend)) {
            continue;
        }
        last = Some(backend);
        for script in backend.scripts() {
            if !loaded.contains(script.get_hash()) {
                bump(&counters.renewal_round_trips, 1);
                conn.run(|c| script.load(c))?;
                loaded.insert(script.get_hash());
            }
        }
    }
    Ok(())
}

/// One round trip carrying the renewals of `batch[i]` for each `i` in `indices`. A
/// connection whose pipeline failed is not reused.
fn round_trip(
    conn: &mut Conn,
    counters: &Counters,
    batch: &mut [InFlight],
    indices: &[usize],
) -> RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for &i in indices {
        pipe.add_command(std::mem::replace(&mut batch[i].cmd, redis::Cmd::new()));
    }
    bump(&counters.renewals, indices.len() as u64);
    bump(&counters.renewal_round_trips, 1);
    let replies = conn.run(|c| pipe.query::<Vec<Value>>(c));
    // With errors kept as replies, any error left means the reply stream is unknown.
    conn.broken |= replies.is_err();
    replies
}
