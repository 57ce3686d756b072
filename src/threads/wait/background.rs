//! A guard's release that its caller does not wait for
//! (`LockClientBuilder::release_in_background`): queued for the key's node's I/O
//! thread, which sends it with the others queued meanwhile, in one write.
//!
//! Only where nothing else needs the caller: a token lock (the others' values
//! name a thread or change as they are renewed), outside a minimum hold, with no
//! caller of this client acquiring or waiting for the key (they are handed the
//! lock, or woken, by the release as usual), on a topology whose release is one
//! node's (not a quorum's). Otherwise the release runs as usual, on the caller's
//! time.

use std::sync::Arc;
use std::time::Instant;

use super::Hub;
use super::handoff::{release, release_for_real, take_value};
use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::scheme::Release;
use crate::topology::{Cleanup, Free, Parked, watch_at_exit};

/// Releases `state` in the background where it can: `None` once queued (the
/// I/O thread counts it when answered), else what the usual release said.
pub(crate) fn release_queued(hub: &Hub, state: &Arc<LeaseState>) -> Option<Result<Release>> {
    let now = Instant::now();
    let plain = state.backend.hands_over()
        && state.min_hold_left(now).is_none()
        && !hub.shutdown.is_cancelled()
        && !hub.lines.busy(&state.channel);
    if !plain {
        return Some(release(hub, state));
    }
    // A lease that can pass to another holder as it is stays whole until the
    // I/O thread sends its release: a caller of this client that locks the name
    // first takes it back (`Queued::take_back`) and nothing is sent. Any other
    // gives up its values now, as a release does.
    let taken = if state.terms().is_some() {
        None
    } else {
        let Some((value, maybe)) = take_value(state) else {
            // The client's shutdown released it.
            return Some(Err(Error::Shutdown));
        };
        if !maybe.is_empty() {
            // An unanswered extend may have rewritten the value: every candidate
            // is compared, as a guard's own release does.
            return Some(release_for_real(hub, state, &value, &maybe));
        }
        Some((value, maybe))
    };
    let parked = Parked::new(Arc::clone(state), taken);
    // A client kept in a `static`, or one `exit` leaves undropped, never drops:
    // the process's exit hook sends its queue then (once per client).
    watch_at_exit(&hub.queued, hub.topology.read_timeout());
    // Recorded before it is sent, so an acquire of the name that follows takes
    // the lease back or waits for the answer; a caller that arrived meanwhile,
    // and may not have seen the record, is woken by the release message.
    hub.queued.add(&state.key, &parked);
    let free = Box::new(Free {
        name: state.key.clone(),
        cleanup: Cleanup {
            backend: Arc::clone(&state.backend),
            keys: state.keys(),
            // Filled in when the release is sent (`Free::take`).
            value: String::new(),
            // The value expires by itself a TTL after its last renewal at most.
            until: now + state.ttl(),
        },
        parked,
        always: hub.lines.busy(&state.channel),
        queued: Arc::clone(&hub.queued),
    });
    match hub.topology.release_queued(free) {
        Ok(()) => None,
        // Not queued (the node's thread is gone, a cluster slot unknown): here.
        Err(free) => match free.take() {
            Some((free, others)) => {
                free.queued.cancel(&free.name, &free.parked);
                let maybe: Vec<String> = others.into_iter().map(|c| c.value).collect();
                Some(release_for_real(hub, state, &free.cleanup.value, &maybe))
            }
            None => Some(Err(Error::Shutdown)),
        },
    }
}
