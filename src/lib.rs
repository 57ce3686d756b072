//! Blocking distributed locks on Redis.
//!
//! The crate docs are written in README.md; see the items below.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unreachable_pub, clippy::allow_attributes, clippy::dbg_macro)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

mod cancel;
mod client;
mod config;
mod error;
mod guard;
mod lease;
mod metrics;
mod pool;
mod renewal;
mod scheme;
mod scripts;
mod wait;

pub use cancel::CancelToken;
pub use client::LockClient;
pub use config::{
    DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT,
    DEFAULT_POOL_SIZE, DEFAULT_TTL, LockClientBuilder, LockOptions, MAX_TTL, MIN_TTL, Renewal,
    Scheme,
};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use lease::{LeaseLost, LossReason};
pub use metrics::Metrics;
pub use scheme::Release;
