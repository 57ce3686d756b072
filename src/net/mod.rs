//! One Redis server's connections, below every lock format: this layer knows servers,
//! connections and timeouts, never a lock.
//!
//! Layout: `node/` is one server as a lock store (its pool and the connector for the
//! waiter's pub/sub connection; `idle.rs` the idle connections in front of the pool);
//! `connection.rs` the pooled connection, its r2d2 manager and every call's timeout;
//! `caps.rs` whether a node's connections use the server's conditional commands;
//! `resp.rs` the hot path's commands written in RESP by hand; `target.rs` where a
//! node's connections go (a server, the master a Sentinel names, a cluster node);
//! `tls.rs` the certificates of `rediss://` servers (feature `tls-rustls`);
//! `sentinel.rs` the master lookup through Redis Sentinel (feature `sentinel`);
//! `slots.rs` Redis Cluster's key slots (feature `cluster`).

pub(crate) mod caps;
pub(crate) mod connection;
pub(crate) mod node;
pub(crate) mod resp;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
#[cfg(feature = "cluster")]
pub(crate) mod slots;
pub(crate) mod target;
pub(crate) mod tls;
