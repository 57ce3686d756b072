//! One tick's round trip: the renewals of every due lease in one pipeline, each
//! lease's mutex held while its renewal is in flight.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{ArcMutexGuard, RawMutex};
use redis::{RedisResult, Value};

use super::schedule::Lease;
use crate::client::Core;
use crate::lease::{Held, LeaseState, LossReason};
use crate::metrics::bump;
use crate::pool::Conn;
use crate::scheme::{Backend, Extend};

/// The shortest timeout a round trip gets, however close a lease is to its end.
const MIN_BUDGET: Duration = Duration::from_millis(1);

/// What a tick hands back: leases to queue again, and losses to report once no
/// lease's mutex is locked any more.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) later: Vec<Lease>,
    pub(super) ended: Vec<(Arc<LeaseState>, LossReason)>,
}

/// A lease in the current batch, with its mutex held so that no release runs while
/// its renewal is in flight.
struct InFlight {
    lease: Lease,
    held: ArcMutexGuard<RawMutex, Held>,
    ttl: Duration,
    /// Clipped to the hold bound: the last renewal.
    last: bool,
    cmd: redis::Cmd,
    new_value: String,
}

/// Renews `leases` in one round trip.
///
/// The connection is taken first and each lease's mutex after it, without waiting
/// (a lease whose release or extend is running is looked at again shortly): the
/// thread never waits for a mutex, so a guard's `extend`, which holds a connection
/// while it waits for the mutex, cannot stall it even with a pool of one.
pub(super) fn renew_due(
    leases: Vec<Lease>,
    now: Instant,
    core: &Core,
    out: &mut Outcome,
    loaded: &mut Loaded,
) {
    let counters = &core.counters;
    bump(&counters.renewal_ticks, 1);
    let started = Instant::now();
    // Nothing may hold the thread past the moment a lease must be reported lost.
    let report_by = leases.iter().map(|l| l.state.valid_until()).min();
    let budget = || {
        report_by
            .map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(Instant::now())
            })
            .clamp(MIN_BUDGET, core.settings.read_timeout)
    };
    let mut conn = match core.pool.get_timeout(budget()) {
        Ok(conn) => conn,
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", leases.len());
            bump(&counters.renewal_nanos, nanos_since(started));
            for lease in leases {
                retry_later(lease, core, out);
            }
            return;
        }
    };
    let mut batch = Vec::with_capacity(leases.len());
    for mut lease in leases {
        let Some(held) = lease.state.held.try_lock_arc() else {
            lease.due = now + lease.retry();
            out.later.push(lease);
            continue;
        };
        let Some(ttl) = lease.next_ttl(now).filter(|_| !held.released) else {
            continue;
        };
        let last = ttl < lease.state.ttl();
        let state = &lease.state;
        let (cmd, new_value) = state
            .backend
            .extend_cmd(&state.key, &held.value, &held.maybe, ttl);
        batch.push(InFlight {
            lease,
            held,
            ttl,
            last,
            cmd,
            new_value,
        });
    }
    if batch.is_empty() {
        return;
    }
    let sent = Instant::now();
    let replies = send(&mut conn, core, &mut batch, budget(), loaded);
    drop(conn);
    bump(&counters.renewal_nanos, nanos_since(started));
    for (f, reply) in batch.into_iter().zip(replies) {
        let InFlight {
            mut lease,
            mut held,
            ttl,
            last,
            new_value,
            ..
        } = f;
        let state = Arc::clone(&lease.state);
        match reply.map(|v| state.backend.extend_reply(&v)) {
            Some(Ok(Extend::Extended)) => {
                held.confirmed(new_value);
                state.renewed(sent, ttl);
                if let Some(n) = &mut lease.renewals_left {
                    *n = n.saturating_sub(1);
                }
                if last || lease.renewals_left == Some(0) {
                    lease.stop_renewing();
                } else {
                    lease.due = lease.schedule(sent);
                }
                out.later.push(lease);
            }
            Some(Ok(gone_or_taken)) => {
                let reason = if gone_or_taken == Extend::Taken {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                };
                out.ended.push((state, reason));
            }
            failed => {
                match failed {
                    Some(Err(e)) => log::debug!("renewal of `{}` failed: {e}", state.key),
                    // No reply: the renewal may have landed and rewritten the value.
                    _ => held.unconfirmed(new_value),
                }
                drop(held);
                retry_later(lease, core, out);
            }
        }
    }
}

fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A renewal failed: try again soon, but report the loss no later than the end of
/// the lease's validity.
fn retry_later(mut lease: Lease, core: &Core, out: &mut Outcome) {
    bump(&core.counters.renewals_failed, 1);
    lease.due = (Instant::now() + lease.retry()).min(lease.state.valid_until());
    out.later.push(lease);
}

/// The hashes of the scripts the thread has loaded on the server: each is loaded
/// before its first use, so renewals do not meet `NOSCRIPT` in the normal case.
pub(super) type Loaded = HashSet<&'static str>;

/// Sends the batch's renewals in one pipeline; one reply per lease, `None` where
/// no reply came (the failure is logged once for the batch). Every read and write
/// on the connection is bounded by `budget`.
fn send(
    conn: &mut Conn,
    core: &Core,
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
        Ok(()) => exchange(conn, core, batch, loaded),
        Err(e) => {
            log::warn!("renewal of {} leases failed: {e}", batch.len());
            vec![None; batch.len()]
        }
    };
    if !conn.broken {
        let s = &core.settings;
        let _ = timeouts(conn, s.read_timeout, s.write_timeout);
    }
    replies
}

fn exchange(
    conn: &mut Conn,
    core: &Core,
    batch: &mut [InFlight],
    loaded: &mut Loaded,
) -> Vec<Option<Value>> {
    let all: Vec<usize> = (0..batch.len()).collect();
    let first = load_scripts(conn, core, batch, &all, loaded)
        .and_then(|()| round_trip(conn, core, batch, &all));
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
        let state = &f.lease.state;
        (f.cmd, f.new_value) =
            state
                .backend
                .extend_cmd(&state.key, &f.held.value, &f.held.maybe, f.ttl);
    }
    let retried = load_scripts(conn, core, batch, &again, loaded)
        .and_then(|()| round_trip(conn, core, batch, &again));
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
    core: &Core,
    batch: &[InFlight],
    indices: &[usize],
    loaded: &mut Loaded,
) -> RedisResult<()> {
    let mut last: Option<&Arc<dyn Backend>> = None;
    for &i in indices {
        let backend = &batch[i].lease.state.backend;
        if last.is_some_and(|b| Arc::ptr_eq(b, backend)) {
            continue;
        }
        last = Some(backend);
        for script in backend.scripts() {
            if !loaded.contains(script.get_hash()) {
                bump(&core.counters.renewal_round_trips, 1);
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
    core: &Core,
    batch: &mut [InFlight],
    indices: &[usize],
) -> RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for &i in indices {
        pipe.add_command(std::mem::replace(&mut batch[i].cmd, redis::Cmd::new()));
    }
    bump(&core.counters.renewals, indices.len() as u64);
    bump(&core.counters.renewal_round_trips, 1);
    let replies = conn.run(|c| pipe.query::<Vec<Value>>(c));
    // With errors kept as replies, any error left means the reply stream is unknown.
    conn.broken |= replies.is_err();
    replies
}
