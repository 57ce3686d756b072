//! A node's lane: the thread that runs callers' calls on one node of a quorum, so
//! that a caller can ask every node at once and wait for each at most its node
//! timeout. One lane per node, made with the client: no thread is spawned per call.
//!
//! A lane talks to its node through a [`Link`], a connection of its own made again
//! whenever it broke, within the call's bound: a dead node fails at once (connection
//! refused) rather than after the pool's checkout timeout, and a silent one within
//! the bound. Calls wait in the lane's queue in order, so a release of a value is
//! never overtaken by a later acquire on the same node.

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};
use crate::net::node::Node;
use crate::topology::io::{IoThread, Link};

/// A call for a lane: runs on the lane's thread with its connection.
pub(crate) type Call = Box<dyn FnOnce(&mut Link) + Send>;

/// What a lane is sent: a call, or `None` to stop.
type Msg = Option<Call>;

/// The sending end of a lane, kept by the topology: it never keeps the thread
/// alive (the client keeps the [`IoThread`], whose drop stops it).
pub(crate) struct Lane {
    tx: Sender<Msg>,
}

impl Lane {
    pub(crate) fn spawn(node: Arc<Node>) -> Result<(Self, IoThread)> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = thread::Builder::new()
            .name("redlease-lane".into())
            .spawn(move || run(&rx, Link::new(node)))
            .map_err(Error::Spawn)?;
        let stop = tx.clone();
        let io = IoThread::new(handle, move || {
            let _ = stop.send(None);
        });
        Ok((Self { tx }, io))
    }

    /// Queues `call`; never blocks. Gives the call back when the lane has stopped
    /// (the client was dropped).
    pub(crate) fn send(&self, call: Call) -> Option<Call> {
        self.tx.send(Some(call)).err().and_then(|e| e.into_inner())
    }
}

fn run(rx: &Receiver<Msg>, mut link: Link) {
    // Connect before the first call needs it; a node that is down now is tried
    // again by each call.
    let bound = link.node().call_bound();
    let _ = link.conn(Instant::now() + bound, link.node().read_timeout());
    while let Ok(Some(call)) = rx.recv() {
        call(&mut link);
    }
}
