//! [`Member`]: one worker's membership of a partition group, and the events it
//! is told ([`PartitionEvent`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::PartitionGroup;
use super::events::{Command, PartitionEvent, Shared};
use super::round::Worker;
use crate::client::options::check_ttl;
use crate::error::{Error, Result};

/// One worker's membership of a [`PartitionGroup`], made by
/// [`PartitionGroup::join`]. Leaves the group when dropped.
///
/// A thread of its own (`redlease-part`) runs the member's rounds: each writes
/// the member's record and reads the group's in one round trip, then takes the
/// free partitions the assignment gives it, asks for those another member holds
/// beyond its quota, and tells [`events`](Self::events) what changed. Its
/// partitions' leases are renewed by the client's renewal thread. The thread
/// stops when the member leaves, or when the client is dropped or
/// [shut down](crate::LockClient::shutdown) (its partitions released and its
/// record deleted, so the others take them within a round).
#[must_use = "if unused the member leaves at once"]
pub struct Member {
    id: String,
    events: Receiver<PartitionEvent>,
    tx: Sender<Command>,
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl PartitionGroup {
    /// Joins the group as a new member and starts its rounds (the first at once).
    ///
    /// # Errors
    /// [`Error::Config`] for a TTL out of range, a round interval that is zero
    /// or not below the TTL, or a stability window not above the round
    /// interval; [`Error::Invalid`] for an empty member id or one with a tab or
    /// a line break; [`Error::Shutdown`] after the client's
    /// [`shutdown`](crate::LockClient::shutdown); [`Error::Spawn`] when the thread
    /// cannot start.
    pub fn join(&self) -> Result<Member> {
        if self.client.inner.hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let s = &self.settings;
        check_ttl("ttl", s.ttl)?;
        if s.round.is_zero() || s.round >= s.ttl {
            return Err(Error::config(
                "round",
                "must be above zero and below the ttl",
            ));
        }
        if s.stability <= s.round {
            return Err(Error::config(
                "stability",
                "must be above the round interval",
            ));
        }
        let id = match &s.member_id {
            Some(id) if id.is_empty() || id.contains(['\t', '\n']) => {
                return Err(Error::Invalid {
                    what: "member id",
                    reason: "must be non-empty, without tabs or line breaks",
                });
            }
            Some(id) => id.clone(),
            None => uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let (events_tx, events) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        let worker = Worker::new(self, id.clone(), events_tx, Arc::clone(&shared), &tx);
        let handle = std::thread::Builder::new()
            .name("redlease-part".into())
            .spawn(move || worker.run(&rx))
            .map_err(Error::Spawn)?;
        Ok(Member {
            id,
            events,
            tx,
            shared,
            handle: Some(handle),
        })
    }
}

impl Member {
    /// The member id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The member's events, oldest first. The channel disconnects once the
    /// member has left.
    pub fn events(&self) -> &Receiver<PartitionEvent> {
        &self.events
    }

    /// The partitions this member holds now, with their fences, by number: a
    /// partition whose lease is lost, or past its validity, is not listed,
    /// even before the member's thread has noticed.
    pub fn held(&self) -> Vec<(u32, u64)> {
        self.shared
            .held
            .lock()
            .iter()
            .filter(|(_, (_, lease))| lease.is_held())
            .map(|(p, (f, _))| (*p, *f))
            .collect()
    }

    /// How many rounds the member has run.
    pub fn rounds(&self) -> u64 {
        self.shared.rounds.load(Ordering::Acquire)
    }

    /// Releases `partition` (after a [`PartitionEvent::Revoking`], once its work
    /// is done or checkpointed), so that the asker takes it at its next round.
    /// Waits for the member's thread to release it and to write its record
    /// without it: at most its round in progress, the release and the record,
    /// each within the client's network timeouts.
    /// Returns whether this member held it.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the member's thread has stopped.
    pub fn release(&self, partition: u32) -> Result<bool> {
        let (ack, done) = crossbeam_channel::bounded(1);
        self.tx
            .send(Command::Release(partition, ack))
            .map_err(|_| Error::Shutdown)?;
        done.recv().map_err(|_| Error::Shutdown)
    }

    /// Leaves the group: releases every partition and deletes the member's
    /// record, so the others take them at their next round; waits for it
    /// (within the client's network timeouts).
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the member's thread had already stopped (the
    /// client was dropped or shut down, which left for it).
    pub fn leave(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        let (ack, done) = crossbeam_channel::bounded(1);
        let sent = self.tx.send(Command::Leave(ack)).is_ok();
        let left = sent && done.recv_timeout(Duration::from_secs(60)).is_ok();
        let _ = handle.join();
        if left { Ok(()) } else { Err(Error::Shutdown) }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.id)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}
