//! The client's session record, kept by the renewal thread: written once before
//! the client is handed out, then again every `SESSION_REFRESH`, so that it
//! lives while the client does and expires at most its TTL after.
//!
//! The writes run on the topology's I/O threads, like renewals: the renewal thread
//! never waits on them. A write that fails is logged (a warning once) and tried
//! again at the next refresh; it never makes a lock call fail.
//!
//! A client that keeps liveness extends its record every third of the liveness
//! instead; an extend that finds it gone ends the session's epoch (the renewal
//! thread reports every lease of it lost) and the record is written anew.

use std::sync::Arc;
use std::time::Instant;

use crate::owner::{Liveness, SessionWrite};
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
        let next = Instant::now() + write.refresh_every();
        Self { write, next }
    }

    /// The client's liveness session, if it keeps one.
    pub(super) fn live(&self) -> Option<&Arc<Liveness>> {
        self.write.liveness()
    }

    /// The session's epoch ended: the next epoch's record is written now.
    pub(super) fn restart(&mut self, topology: &dyn Topology) {
        topology.write_session(&self.write, None);
        self.next = Instant::now() + self.write.refresh_every();
    }

    /// The client stops: its record's delete is sent (on the I/O threads, which
    /// stop after this thread, so it is sent before they end), its reply not
    /// waited for; where it cannot be sent at once the record expires by itself.
    pub(super) fn end(&self, topology: &dyn Topology) {
        self.write.end();
        // Every lease of a liveness session is breakable once the record is gone.
        if let Some(live) = self.live() {
            live.next_epoch();
        }
        topology.write_session(&self.write, None);
    }

    /// Sends the refresh when it is due; when the next one is.
    pub(super) fn due(&mut self, topology: &dyn Topology) -> Instant {
        let now = Instant::now();
        if now >= self.next {
            topology.write_session(&self.write, None);
            self.next = now + self.write.refresh_every();
        }
        self.next
    }
}
