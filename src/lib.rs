//! Blocking distributed locks on Redis.
//!
//! redlease is for code that is not async — plain-threaded services, batch workers,
//! cron jobs — and for teams moving off the old `SETNX`/`GETSET` timestamp locks. No
//! tokio, no futures: calls block, with every network call bounded by a timeout.
//! MSRV: Rust 1.88, raised only in a minor release. This page is a map; the
//! [`guide`] is the long form, a chapter per topic.
//!
//! # Quick start
//!
//! ```no_run
//! # fn main() -> redlease::Result<()> {
//! use std::time::Duration;
//! use redlease::LockClient;
//!
//! let client = LockClient::builder("redis://127.0.0.1/")
//!     .key_prefix("lock:")
//!     .ttl(Duration::from_secs(30))
//!     .build()?;
//!
//! let guard = client.lock("invoice:42")?;   // waits; renewed in the background
//! assert!(guard.unlock()?.was_held());      // Released, or Expired / Taken
//!
//! // One attempt, or a bounded wait: busy is `Ok(None)`, never an error.
//! if let Some(g) = client.try_lock_for("report", Duration::from_millis(500))? {
//!     drop(g); // releases
//! }
//! # Ok(()) }
//! ```
//!
//! # What each type is for
//!
//! - [`LockClient`], made by a [`LockClientBuilder`] ([`LockClient::builder`], one
//!   server; [`LockClient::redlock`], a [quorum](guide::redlock); Sentinel and Cluster
//!   behind their features, see [deployments](guide::deployments)): the lock calls,
//!   `lock` to `with_lock`; [`LockClient::inspect`] and [`LockClient::held`] show
//!   holders and their [`Owner`]s ([`LockInfo`], [`Holder`], [`HeldLock`],
//!   [`ClientTag`]; [operations](guide::operations)).
//! - [`LockGuard`]: a held lease, renewed in the background, released when dropped;
//!   [`LockGuard::fence`], [`is_held`](LockGuard::is_held), [`lost`](LockGuard::lost)
//!   (a [`LeaseLost`]), [`unlock`](LockGuard::unlock) (a [`Release`]).
//! - [`LockOptions`] and [`Renewal`]: one call's TTL, fencing, scheme, renewal and
//!   `on_lost` callback, over the client's defaults; [`CancelToken`] stops a wait;
//!   [`Metrics`], the client's counters.
//! - [`Scheme`]: [`Scheme::Token`] (the default; redis-py's, redsync's,
//!   node-redlock's format; on Valkey 9 released and renewed with `DELIFEQ` and
//!   `SET … IFEQ`, no script: [deployments](guide::deployments#valkey-9-no-scripts-on-the-hot-path)),
//!   [`Scheme::Reentrant`] (Redisson's `RLock`),
//!   [`Scheme::LegacyTimestamp`] ([`LegacyTimestamp`]; [migrating](guide::migrating)).
//! - Redisson's primitives ([guide](guide::redisson)): [`FairLock`], [`ReadWriteLock`]
//!   ([`ReadGuard`], [`WriteGuard`]), [`Semaphore`] ([`PermitGuard`]; k at once: [`PermitsGuard`]),
//!   each with the lock's whole family of calls and the same guard surface; a waiter breaks
//!   the holds, or takes back the permits, of a dead [liveness](guide::crash_recovery) session.
//! - Fleets ([guide](guide::fleets)): [`LockClient::election`] → [`Election`] →
//!   [`Leadership`], whose term is a fence; [`LockOptions::min_hold`], once per
//!   period; [`LockClient::lock_all`] → [`MultiGuard`]; [`LockClient::lock_any`] →
//!   [`AnyGuard`], one of several names; [`LockClient::partitions`] →
//!   [`PartitionGroup`] → [`Member`] ([`PartitionEvent`], [`GroupStatus`]), work shared
//!   by a fleet; [`LockClient::wait_free`]; [`LockClient::shutdown`] → [`ShutdownReport`];
//!   [`LockGuard::ticket`] → [`Ticket`], for [`LockClient::release_ticket`] when the holder dies;
//!   [`LockGuard::into_ticket`] → a printable [`Ticket`] that [`LockClient::adopt`] takes over
//!   in a later step or another process (a token or Redisson-format reentrant lock; a
//!   permit's: [`PermitGuard::into_ticket`] → [`LockClient::adopt_permit`]).
//!   [`LockClient::latch`] → [`Latch`] → [`Participant`], a fan-in (Redisson's count) whose
//!   waiters get [`Error::ParticipantDied`] when a worker dies ([`DEFAULT_LATCH_LIVENESS`],
//!   [`LATCH_DONE_TTL`], [`LATCH_ABANDONED_TTL`]).
//! - Is the server safe for locks? [`LockClient::doctor`] → a [`Report`] of [`Finding`]s
//!   ([`Severity`]; [`ServerReport`], [`Checkup`], [`ServerCheck`]; [operations](guide::operations)).
//!
//! # Guarantees and errors, in brief
//!
//! Busy is `Ok(None)`, never an error; a lock that may be held is never reported as
//! not acquired. A lease is valid until `sent + ttl - drift` on the local monotonic
//! clock and [`LockGuard::is_held`] never says true past it; a paused process may
//! still believe it holds a lock, which [`LockGuard::fence`] lets downstream systems
//! refuse. Every call returns within `max(wait, read timeout)` + 200 ms
//! ([guarantees and limits](guide::guarantees)).
//! [`Error::is_timeout`] and [`Error::is_connection_error`] decide retries; a
//! [`RedisFailure`] names the [`Operation`], the key and the limit that ran out; bad
//! input is [`Error::Config`] or [`Error::Invalid`], never a panic ([errors](guide::errors)).
//!
//! # Foreign types
//!
//! [`redis::RedisError`] (in [`RedisFailure`]), [`r2d2::Error`], [`redis::IntoConnectionInfo`]
//! (URLs), [`redis::ConnectionLike`] ([`Owner::lookup`]), [`crossbeam_channel::Receiver`].
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unreachable_pub, clippy::allow_attributes, clippy::dbg_macro)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

// Layers, bottom to top: a file imports only from its own layer or below, and no
// two files import each other in a ring (tests/layers.rs checks both).
// root leaves: counters, the lease clock, key formats, what the doctor finds
mod finding;
mod format;
mod metrics;
mod time;
// the error type
mod error;
// one Redis server's connections
mod net;
// client tags, session records, the token's identity format
mod owner;
// wire formats: a folder per scheme, with its own scripts
mod scheme;
// a held lease's shared state (it names its scheme)
mod lease;
// where locks live: one server, a Redlock quorum, a cluster
mod topology;
// background threads: renewal, waiting, callbacks
mod threads;
// LockClient, its acquire loop, LockGuard, options, builder, inspect, doctor
mod client;
// named primitives: fair, read-write, semaphore, election, partitions, latch
mod primitives;
// the long-form docs: markdown chapters, no code
pub mod guide;

pub use client::LockClient;
pub use client::any_guard::AnyGuard;
pub use client::builder::{
    DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT,
    DEFAULT_NODE_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_TTL, LockClientBuilder, ServerCheck,
};
pub use client::doctor::{Checkup, Report, ServerReport};
pub use client::guard::LockGuard;
pub use client::inspect::{HeldLock, Holder, LockFormat, LockInfo, MAX_PERMITS, Waiter};
pub use client::multi_guard::MultiGuard;
pub use client::options::{LockOptions, Renewal};
pub use client::shutdown::ShutdownReport;
pub use client::ticket::Ticket;
pub use error::{Error, NodeFailure, Operation, RedisFailure, Result};
pub use finding::{Finding, Severity};
pub use lease::{LeaseLost, LossReason};
pub use metrics::Metrics;
#[cfg(feature = "tls-rustls")]
pub use net::tls::TlsCertificates;
pub use owner::{ClientTag, Owner, Session};
pub use primitives::election::{Election, Leader, Leadership, OBSERVE_POLL, Observer};
pub use primitives::fair::FairLock;
pub use primitives::held::{PermitGuard, PermitsGuard, ReadGuard, WriteGuard};
pub use primitives::latch::{DEFAULT_LATCH_LIVENESS, Latch, Participant};
pub use primitives::partition::{
    GroupStatus, MAX_PARTITIONS, Member, MemberInfo, PartitionEvent, PartitionGroup, PartitionInfo,
};
pub use primitives::rwlock::ReadWriteLock;
pub use primitives::semaphore::{Permits, Semaphore};
pub use scheme::latch::{ABANDONED_TTL as LATCH_ABANDONED_TTL, DONE_TTL as LATCH_DONE_TTL};
pub use scheme::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, Release, Scheme, TimestampUnit};
pub use threads::cancel::CancelToken;
pub use time::{MAX_TTL, MIN_TTL};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
