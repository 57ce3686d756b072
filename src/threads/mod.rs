//! The client's background threads, a file or folder each, with the callers' side of
//! each beside it (registering a lease, waiting for a release). Each runs in a thread
//! named `redlease-<job>`, stopped and joined when the client's last clone is dropped.
//!
//! Layout: `renewal/` the `redlease-renew` thread (the deadline queue, renewal rounds,
//! the session record); `wait/` the `redlease-wait` thread and the callers' side of a
//! wait (pub/sub, lines, hand-off, backoff); `notify.rs` the `redlease-notify` thread,
//! which runs the `on_lost` callbacks; `cancel.rs` [`CancelToken`](crate::CancelToken),
//! which stops a blocked wait. The per-node threads (`redlease-io`, `redlease-lane`)
//! and a cluster's `redlease-map` belong to their topology: `topology/io/`,
//! `topology/redlock/`, `topology/cluster/`.

pub(crate) mod cancel;
pub(crate) mod notify;
pub(crate) mod renewal;
pub(crate) mod wait;
