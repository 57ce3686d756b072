//! One Redis server's connections.

pub(crate) mod connection;
pub(crate) mod node;
pub(crate) mod resp;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
#[cfg(feature = "cluster")]
pub(crate) mod slots;
pub(crate) mod target;
pub(crate) mod tls;
