//! The client's session record, kept by the renewal thread: written once before
//! the client is handed out, then again every [`SESSION_REFRESH`], so that it
//! lives while the client does and expires at most its TTL after.
//!
//! The writes run on the topology's I/O threads, like renewals: the renewal thread
//! never waits on them. A write that fails is logged (a warning once) and tried
//! again at the next refresh; it never makes a lock call fail.

use std::sync::Arc;
use std::time::Instant;

use crate::owner::{SESSION_REFRESH, SessionWrite};
use crate::topology::Topology;

/// The record and when to write it next.
pub(super) struct Refresh {
    write: Arc<SessionWrite>,
    next: Instant,
}

impl Refresh {
    /// Writes the record and waits until every node it went to has tried, at most
    /// twice the read timeout: a lock taken right after `build()` has an owner.
    pub(super) fn start(topology: &dyn Topology, write: SessionWrite) -> Self {
        let write = Arc::new(write);
        let (tx, rx) = crossbeam_channel::unbounded();
        let sent = topology.write_session(&write, Some(&tx));
        let by = Instant::now() + 2 * topology.read_timeout();
        for _ in 0..sent {
            if rx.recv_deadline(by).is_err() {
                break;
            }
        }
        Self {
            write,
            next: Instant::now() + SESSION_REFRESH,
        }
    }

    /// The client stops: its record's delete is sent (on the I/O threads, which
    /// stop after this thread, so it is sent before they end), its reply not
    /// waited for; where it cannot be sent at once the record expires by itself.
    pub(super) fn end(&self, topology: &dyn Topology) {
        self.write.end();
        topology.write_session(&self.write, None);
    }

    /// Sends the refresh when it is due; when the next one is.
    pub(super) fn due(&mut self, topology: &dyn Topology) -> Instant {
        let now = Instant::now();
        if now >= self.next {
            topology.write_session(&self.write, None);
            self.next = now + SESSION_REFRESH;
        }
        self.next
    }
}
