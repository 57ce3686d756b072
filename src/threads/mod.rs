//! The client's background threads.

pub(crate) mod cancel;
pub(crate) mod notify;
pub(crate) mod renewal;
pub(crate) mod wait;
