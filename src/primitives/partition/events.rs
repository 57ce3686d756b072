//! What a member is told ([`PartitionEvent`]), what its handle asks of its
//! thread (`Command`), and what the two share (`Shared`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::lease::LeaseState;

/// What a member is told about its partitions, in the order it happened, on
/// [`Member::events`](crate::Member::events). Sent by the member's own thread, never by the renewal
/// thread: a slow reader delays no renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionEvent {
    /// The partition is this member's now, with this fence (pass it with every
    /// write the work on it makes: it rises with every new owner).
    Assigned {
        /// The partition's number.
        partition: u32,
        /// Its fencing token for this ownership.
        fence: u64,
    },
    /// Another member asked for the partition: finish or checkpoint, then
    /// [`release`](crate::Member::release) it. Past `deadline` the asker takes it
    /// anyway, and this member's writes under its fence are refused downstream.
    Revoking {
        /// The partition's number.
        partition: u32,
        /// When the asker takes it anyway (this process's clock).
        deadline: Instant,
    },
    /// The partition's lease was lost (expired, taken after a revoke's
    /// deadline, deleted): stop working on it at once.
    Lost {
        /// The partition's number.
        partition: u32,
        /// The fence it was held under.
        fence: u64,
    },
}

/// What the member's thread and its handle share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The partitions held, with their fences and leases.
    pub(crate) held: Mutex<BTreeMap<u32, (u64, Arc<LeaseState>)>>,
    /// Rounds done.
    pub(crate) rounds: AtomicU64,
}

/// What the handle asks of the member's thread.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    /// Release this partition, then answer.
    Release(u32, Sender<bool>),
    /// Release everything, delete the record, answer and stop.
    Leave(Sender<()>),
    /// The client is shutting down: leave.
    Shutdown,
}
