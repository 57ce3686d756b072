//! Blocking distributed locks on Redis.
//!
//! redlease is for code that is not async — plain-threaded services, batch workers,
//! cron jobs — and for teams moving off the old `SETNX`/`GETSET` timestamp locks. No
//! tokio, no futures: calls block, with every network call bounded by a timeout.
//! MSRV: Rust 1.88, raised only in a minor release. These docs are a map; the README
//! is the long form, named by section below.
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
//! guard.check()?;                           // still ours? (local, no round trip)
//! let released = guard.unlock()?;           // Released / Expired / Taken
//! assert!(released.was_held());
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
//! - [`LockClient`], made by a [`LockClientBuilder`] ([`LockClient::builder`] for one
//!   server, [`LockClient::redlock`] for a quorum of masters; `sentinel` and `cluster`
//!   behind their features): the lock calls, from `lock` to `with_lock`, and
//!   [`LockClient::inspect`] / [`LockClient::held`], which show a lock's holders and
//!   their [`Owner`]s ([`LockInfo`], [`Holder`], [`HeldLock`], [`ClientTag`]).
//! - [`LockGuard`]: a held lease, renewed in the background and released when
//!   dropped; [`LockGuard::fence`], [`LockGuard::is_held`], [`LockGuard::lost`]
//!   (a [`LeaseLost`]), [`LockGuard::unlock`] (a [`Release`]).
//! - [`LockOptions`] and [`Renewal`]: one call's TTL, fencing, scheme, renewal policy
//!   and `on_lost` callback, over the client's defaults.
//! - [`Scheme`], how a lock is stored: [`Scheme::Token`] (the default; the format of
//!   redis-py, redsync, node-redlock and redlock-rs), [`Scheme::Reentrant`]
//!   (Redisson's `RLock`), [`Scheme::LegacyTimestamp`] (deployed `SETNX`/`GETSET`
//!   locks, see [`LegacyTimestamp`]; README: *Migrating from `SETNX`/`GETSET`…*).
//! - Redisson's primitives, each shared with Redisson clients: [`FairLock`]
//!   ([`LockClient::fair_lock`]), [`ReadWriteLock`] ([`LockClient::read_write_lock`]; a
//!   [`ReadGuard`] or [`WriteGuard`]), [`Semaphore`] ([`LockClient::semaphore`]; a
//!   [`PermitGuard`] per permit). Each offers the lock's whole family (`x`, `try_x`,
//!   `try_x_for`, `try_x_until`, `x_with`, and `with_lock` / `with_read` /
//!   `with_write` / `with_permit`), and every guard `key()`, `is_held()`, `lost()`,
//!   `valid_until()`, `check()`, `extend()` and `unlock()`; a handle's `name()` is the
//!   name as passed, its `key()` the name with the client's prefix. README:
//!   *Interoperability*, and a section each.
//! - [`CancelToken`] stops a blocked wait; [`Metrics`] is a snapshot of a client's
//!   counters (README: *Metrics*).
//! - Is the server safe for locks? [`LockClient::doctor`] (or
//!   [`ServerReport::read`] on any connection, [`Report::read`] without a client,
//!   checked against a [`Checkup`]) → a [`Report`] of [`Finding`]s, each with its
//!   [`Severity`]; `build()` logs the critical ones, or refuses them as
//!   [`Error::UnsafeServer`] ([`ServerCheck`]). README: *Before production*.
//!
//! # Fleets (README: *Fleets*)
//!
//! - A leader: [`LockClient::election`] → [`Election`]; `campaign()` and its
//!   `try_`/`_for`/`_with` forms give a [`Leadership`] whose [`term`](Leadership::term)
//!   is a fencing token; [`Election::leader`] reads the [`Leader`],
//!   [`Election::observe`] streams them ([`Observer`]).
//! - Once per period: [`LockOptions::min_hold`] keeps a released lock until a minimum
//!   time after its acquisition.
//! - Several names, all or none: [`LockClient::lock_all`] (and `try_lock_all`,
//!   `try_lock_all_for`, `lock_all_with`) → [`MultiGuard`].
//! - [`LockClient::wait_free`] waits until nobody holds a name, without taking it (a
//!   hint, stale at once).
//! - [`LockClient::shutdown`] releases every lease the client's guards hold, within a
//!   deadline ([`ShutdownReport`]).
//!
//! # Threads
//!
//! Each client's threads stop, and are joined, when its last clone is dropped; each
//! name fits the 15 bytes Linux keeps, so `ps` and `top` show it whole.
//!
//! | thread | how many | job |
//! | --- | --- | --- |
//! | `redlease-renew` | one | renews every held lease in due order, per its [`Renewal`]; reports a loss when the lease's validity ends, never waiting on the network or on user code; keeps the client's session record |
//! | `redlease-io` | one per node | sends each tick's renewals in one pipelined round trip; deletes the value of an acquire whose reply was lost |
//! | `redlease-lane` | one per node of a Redlock quorum | runs callers' calls on its node, so every node is asked at once |
//! | `redlease-map` | one per cluster client | reads the slot map again when a master stops answering |
//! | `redlease-wait` | one (per master on a Redis 7 cluster) | one pub/sub connection; hands each release to this client's oldest waiting caller, and tells every `wait_free` caller |
//! | `redlease-watch` | one per [`Observer`] | reads the leader of an election on each release or elected message, and every [`OBSERVE_POLL`] |
//! | `redlease-notify` | one | runs the `on_lost` callbacks, one after another: never on the renewal thread |
//! | `redlease-stop` | up to 8 per node, during [`LockClient::shutdown`] only | release the leases the shutdown took; each ends when none is left or the deadline passed (one in a release finishes it, bounded by the timeouts) |
//!
//! # Guarantees, in brief
//!
//! - Busy is `Ok(None)`, never an error; a lock that may be held is never reported
//!   as not acquired (a lost acquire reply is an error, and its value is deleted).
//! - A lease is valid until `sent + ttl - drift` on the local monotonic clock; only a
//!   confirmed renewal moves that forward, and [`LockGuard::is_held`] never says true
//!   past it, and no call hands over a lease already past it (a grant whose reply
//!   came later is deleted in the background). Every call returns within
//!   `max(wait, read timeout)` + 200 ms (and a little scheduling).
//! - A Redis Cluster that redirects (`MOVED`, `ASK`) or is briefly down (`TRYAGAIN`,
//!   `CLUSTERDOWN`) is waited out with a fresh slot map within the caller's time.
//! - A process paused past its lease still believes, for a moment, that it holds it:
//!   [`LockGuard::fence`], strictly increasing (at least the server's clock in µs,
//!   so it keeps rising across a failover), lets downstream systems refuse it.
//!   README: *What it gives you*, *What it does not promise*, *Redlock*.
//!
//! # Errors
//!
//! [`Error::is_timeout`] and [`Error::is_connection_error`] decide retries; a
//! [`RedisFailure`] names the [`Operation`], the key and the limit that ran out;
//! [`Error::Permission`] what a Redis ACL refuses, found by `build()`; a key that holds
//! another format is one [`Error::WrongFormat`] (the key, the [`LockFormat`] asked
//! for, what it holds), and what a deployment cannot hold (a fair lock on Redlock)
//! [`Error::Unsupported`]. Bad input ([`Error::Config`], [`Error::Invalid`]) never
//! panics. README: *Errors*, *Redis ACL users*.
//!
//! # Foreign types
//!
//! [`RedisFailure::redis_error`] is a [`redis::RedisError`], and a failure's source
//! that or an [`r2d2::Error`]; URLs are anything [`redis::IntoConnectionInfo`]
//! accepts; [`Owner::lookup`] reads through any [`redis::ConnectionLike`]; the lost
//! channel is a [`crossbeam_channel::Receiver`].
//!
//! # Feature flags
//!
//! | feature (all off by default; README: *Deployments*) | what it adds |
//! | --- | --- |
//! | `tls-rustls` | `rediss://` URLs, private CAs and client certificates (`TlsCertificates`) |
//! | `sentinel` | `LockClient::sentinel`: the master found through Redis Sentinel |
//! | `cluster` | `LockClient::cluster`: locks routed to the master of their key's slot |
//! | `metrics` | counters, gauges and histograms through the `metrics` crate's facade |
//! | `cli` | the `redlease` command-line tool (`src/bin/redlease/`; README: *Command-line tool*) |

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unreachable_pub, clippy::allow_attributes, clippy::dbg_macro)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

// Layers, bottom to top: a file imports only from its own layer or below, and no
// two files import each other in a ring (tests/layers.rs checks both).
// root leaves: counters, the lease clock, the formats a key can hold, what the
// doctor finds
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
// LockClient, its acquire loop, LockGuard, options, builder, inspect
mod client;
// Redisson's named primitives: fair, read-write, semaphore
mod primitives;

pub use client::LockClient;
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
pub use error::{Error, NodeFailure, Operation, RedisFailure, Result};
pub use finding::{Finding, Severity};
pub use lease::{LeaseLost, LossReason};
pub use metrics::Metrics;
#[cfg(feature = "tls-rustls")]
pub use net::tls::TlsCertificates;
pub use owner::{ClientTag, Owner, Session};
pub use primitives::election::{Election, Leader, Leadership, OBSERVE_POLL, Observer};
pub use primitives::fair::FairLock;
pub use primitives::held::{PermitGuard, ReadGuard, WriteGuard};
pub use primitives::rwlock::ReadWriteLock;
pub use primitives::semaphore::{Permits, Semaphore};
pub use scheme::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, Release, Scheme, TimestampUnit};
pub use threads::cancel::CancelToken;
pub use time::{MAX_TTL, MIN_TTL};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
