//! The per-node I/O machinery every deployment shares: a node's I/O thread
//! ([`Worker`], kept alive by an [`IoThread`]), the pipelined renewal batch it
//! sends, and a thread's own connection to a node ([`Link`]).
//!
//! Layout: `worker.rs` a node's I/O thread; `handle.rs` the client's handle of
//! it; `background.rs` the releases it takes off the caller's time (guards'
//! queued releases, and the record of them); `exit.rs` the process's exit hook,
//! which sends what is still queued when the process ends; `wire.rs` how it
//! sends those together; `batch.rs` a node's share of a renewal
//! tick; `pipeline.rs` how that share goes on the wire; `link.rs` a thread's own
//! connection to a node.

mod background;
pub(crate) mod batch;
mod exit;
mod handle;
mod link;
mod pipeline;
mod wire;
mod worker;

pub(crate) use background::{Cleanup, Free, Parked, Queued};
pub(crate) use exit::watch as watch_at_exit;
pub(crate) use handle::IoThread;
pub(crate) use link::{Link, timed_out};
pub(crate) use worker::{Job, Worker};
