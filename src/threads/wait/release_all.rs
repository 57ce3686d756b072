//! Releasing the leases of a guard of several names: in one script where their
//! keys share a node and no caller of this client waits for any of them, else one
//! by one as each guard releases.

use std::sync::Arc;
use std::time::Instant;

use super::Hub;
use super::handoff::{release, take_value};
use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::metrics::bump;
use crate::scheme::token::all::{ALL_SCRIPTS, release_all_cmd};
use crate::scheme::{Announce, Release};

/// Releases every lease of `states` (token leases), and says what Redis found for
/// each, in order.
///
/// One round trip when their keys share a node (one server, one cluster slot)
/// and no caller of this client waits for any of them: nobody to hand a lock to,
/// and no line to give a turn. Otherwise, and for any lease after a failed
/// script, each is released as a single guard releases it (hand-offs included).
pub(crate) fn release_all(hub: &Hub, states: &[Arc<LeaseState>]) -> Vec<Result<Release>> {
    let locks: Vec<&str> = states.iter().map(|s| s.key.as_str()).collect();
    let alone = states.iter().all(|s| !hub.lines.busy(&s.channel));
    // A lease inside its minimum hold keeps its key on release: its own script.
    let now = Instant::now();
    let holding = states.iter().any(|s| s.min_hold_left(now).is_some());
    if states.len() < 2 || !alone || holding || !hub.topology.one_step(&locks) {
        return states.iter().map(|s| release(hub, s)).collect();
    }
    // Marked released under each lease's mutex: no renewal is sent after this.
    // A lease the client's shutdown took already is not ours to release again.
    let taken: Vec<Option<String>> = states.iter().map(|s| take_value(s).map(|v| v.0)).collect();
    if taken.iter().any(Option::is_none) {
        return states
            .iter()
            .zip(taken)
            .map(|(s, v)| match v {
                Some(v) => release_value(hub, s, &v),
                None => Err(Error::Shutdown),
            })
            .collect();
    }
    let values: Vec<String> = taken.into_iter().flatten().collect();
    let cmd = release_all_cmd(&locks, &values, hub.topology.sharded());
    let reply = hub
        .topology
        .query(locks[0], &ALL_SCRIPTS, &cmd)
        .ok()
        .and_then(|v| redis::from_redis_value::<Vec<i64>>(v).ok())
        .filter(|r| r.len() == states.len());
    let Some(found) = reply else {
        // Compare-and-delete is idempotent: each key is tried again on its own,
        // and reports its own outcome or error.
        return states
            .iter()
            .zip(&values)
            .map(|(s, v)| release_value(hub, s, v))
            .collect();
    };
    states
        .iter()
        .zip(found)
        .map(|(s, n)| {
            Ok(match n {
                0 => Release::Expired,
                n if n < 0 => Release::Taken,
                n => {
                    // `n - 1` clients heard the release message, our own waiter
                    // thread perhaps among them (as a single release counts).
                    let listeners = u64::try_from(n - 1).unwrap_or(0);
                    if listeners > 1 {
                        bump(&hub.counters.yields, 1);
                        hub.lines.hold_off(&s.channel, listeners - 1, None);
                    }
                    Release::Released
                }
            })
        })
        .collect()
}

/// Releases `value`, the lease `state` held, on its own: compare-and-delete.
fn release_value(hub: &Hub, state: &LeaseState, value: &str) -> Result<Release> {
    let announce = Announce {
        channel: &state.channel,
        always: false,
        keep: state.min_hold_left(Instant::now()),
    };
    let freed = hub
        .topology
        .release(&*state.backend, &state.key, announce, value, &[])?;
    Ok(freed.outcome)
}
