//! Blocking distributed locks on Redis.
//!
//! redlease is for code that is not async — plain-threaded services, batch workers,
//! cron jobs — and for teams moving off the old `SETNX`/`GETSET` timestamp locks. No
//! tokio, no futures: calls block, with every network call bounded by a timeout.
//!
//! # Quick start
//!
//! ```no_run
//! # fn main() -> redlease::Result<()> {
//! use std::time::Duration;
//! use redlease::{LockClient, LockOptions};
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
//! let total = client.with_lock("counter", || 2 + 2)?;
//! let fenced = client.lock_with("ledger", &LockOptions::new().fencing(true))?;
//! # let _ = (total, fenced);
//! # Ok(()) }
//! ```
//!
//! The same program is `examples/basic.rs`.
//!
//! # Schemes
//!
//! [`Scheme::Token`] (the default) stores `SET key rl2:<tag>:<counter> NX PX <ttl>` (the
//! client's [`ClientTag`] and a counter in base 36 that never repeats in the process:
//! unique, and 22–27 bytes; older versions' `rl1:<32 hex>` tokens are still read); release is a
//! Lua compare-and-delete and extension a compare-and-pexpire, so nobody can release or
//! extend a lock they do not hold. With fencing, the acquire script also takes a fence
//! from the key prefix's one counter, `<prefix>redlease:fence`, in the same atomic
//! step: one more than the counter and at least the server's clock in microseconds
//! (`TIME`), so fences keep rising across a failover that lost the counter's last
//! increments (as long as the two servers' clocks agree to within the failover's
//! time). [`LockGuard::fence`] is strictly increasing per key (and across the
//! prefix's keys), large (about 1.8 × 10¹⁵) and not consecutive, and a million lock
//! names still leave one counter. Pass it to downstream systems
//! and have them reject lower fences: that is what makes a paused, expired holder
//! harmless. Lock names starting with `redlease:` are reserved.
//!
//! [`Scheme::Reentrant`] is Redisson's `RLock` (Redisson 2.7.0 / 3.2.0 to 3.x and
//! 4.x), field for field: the key is a hash, field `<client uuid>:<thread id>` (a
//! UUID v4 per [`LockClient`], a number per thread), value the hold count, with a
//! `PEXPIRE`. The owner locks again with `HINCRBY` (one round trip, another guard);
//! another thread, of the same client too, waits. The outermost unlock `DEL`s the
//! key and publishes `0` on `redisson_lock__channel:{<key>}` (no braces added when
//! the key has a `{`), the channel both Redisson's waiters and ours listen on.
//!
//! [`Scheme::LegacyTimestamp`] (opt-in) shares keys with deployed `SETNX`/`GETSET`
//! timestamp locks: the value is the expiry as a unix timestamp, an expired value is
//! taken over atomically, and release and renewal compare the exact value written.
//! Its limits (all clients' clocks must agree; a paused holder is overtaken) are in
//! [`LegacyTimestamp`]'s docs.
//!
//! # Migrating from timestamp locks
//!
//! 1. Run redlease with [`Scheme::LegacyTimestamp`] beside the deployed clients, on
//!    the same keys, in the same unit. They exclude each other.
//! 2. Once every client of a key runs redlease, switch that key to [`Scheme::Token`].
//!    During the rollout legacy-mode and token-mode redlease clients still exclude
//!    each other: `SET NX` fails on a timestamp, and legacy mode treats a token (not
//!    an integer) as held.
//! 3. Remove the compatibility mode.
//!
//! The order matters: a deployed client cannot parse a token (Jedis-style code's
//! `Long.parseLong` throws), so a key moves to tokens only after its last deployed
//! client is gone. `examples/migrate_from_timestamp.rs` shows steps 1 and 2.
//!
//! # Redlock
//!
//! [`LockClient::redlock`] builds the same client over N independent masters. A lock
//! is held when a majority granted one token within the lease's validity, and stays
//! held while a majority confirms each renewal; a minority of nodes down or slow
//! costs at most the [node timeout](LockClientBuilder::node_timeout) per call. The
//! price is one round trip to every node per call, and two conditions for safety:
//! the nodes' clocks must not drift much against the TTL, and a node that restarts
//! empty must stay out longer than the longest TTL (or persist every write with
//! `appendfsync always`), else a lock held on a bare majority can be granted twice.
//! Fencing (no single counter) and the legacy scheme are refused.
//!
//! # Threads and guarantees
//!
//! Each client runs four threads, stopped and joined when its last clone is dropped
//! (each name fits the 15 bytes Linux keeps, so `ps` and `top` show it whole):
//!
//! - `redlease-renew` keeps every held lease in due order and, at each tick, hands
//!   the due ones to the topology, per the lease's [`Renewal`] policy and its
//!   `max_hold` / `max_renewals` bounds. It never waits on the network or on user
//!   code, so a loss is reported when the lease's validity ends, whatever a round
//!   trip in flight is doing. When a renewal finds the key gone or taken, or
//!   renewals fail until the lease's validity ends, the lease is lost:
//!   [`LockGuard::is_held`] turns false, [`LockGuard::lost`] receives a [`LeaseLost`],
//!   and the `on_lost` callback is queued. It also keeps the client's session
//!   record (`<prefix>redlease:session:<tag>`: host, pid, program), rewritten
//!   every 3 s with a 10 s TTL, which [`LockClient::inspect`] reads to name a
//!   lock's [`Owner`].
//! - `redlease-io` (one per Redis node) sends each tick's renewals in one pipelined
//!   round trip (one script call per chunk of up to 500 token or reentrant leases,
//!   each compared on its own), and removes values an ambiguous acquire may have
//!   left, off the caller's time. With Redlock, each node also has a `redlease-lane`, which sends
//!   callers' commands to it, so every node is asked at once.
//! - `redlease-map` (a cluster client) reads the slot map again when a master
//!   stops answering, at most every 100 ms.
//! - `redlease-notify` runs the `on_lost` callbacks, one after another: a slow or
//!   panicking callback delays only the callbacks behind it, never a renewal or a
//!   loss report.
//! - `redlease-wait` holds one pub/sub connection and hands each release to one
//!   waiting caller of this client, oldest first (on a Redis 7 cluster, one such
//!   thread per master, each on the shard channels of its slots). Since most other clients release
//!   without publishing, the oldest waiting caller of each key (the head of its
//!   line) also polls on a capped, jittered step (the builder's `backoff`, never
//!   past the holder's remaining TTL); the callers behind it send nothing, and the
//!   next one takes over when the head leaves. Callers of one client that arrive
//!   together queue behind each other instead of racing to Redis.
//!
//! A token release publishes only when someone waits for it: a caller about to
//! wait marks a redlease holder's token (`rl2:<tag>:<counter>` becomes `rl2:<tag>:<counter>+`,
//! TTL kept; once a caller of the client waits, the acquire's `SET … NX PX … GET`
//! names the holder, so each new holder is marked once), and a client publishes too when its own callers wait for the
//! key. Values other clients wrote are never marked.
//!
//! Within a client, a releasing guard of a token lock hands it to the oldest waiting
//! caller: the lease itself when the caller asked for the same terms (no round
//! trip), or its token swapped for the caller's in one atomic script. Every 8 hand-offs in a
//! row the key is released for real; when other clients' waiters hear that release,
//! this client's waiters hold off for 10 ms, so the key goes to another process.
//!
//! A lease is valid until `sent + ttl - drift` on the local monotonic clock, where
//! `sent` is taken before the acquiring command is sent and `drift` is 2 ms + 1 % of
//! the TTL; only a confirmed renewal moves it forward. [`LockGuard::is_held`] never
//! says true past it. What no lock client can promise: a process paused past its
//! lease still believes, for a moment, that it holds it. Fencing closes that gap.
//!
//! Every call returns within `max(wait, read timeout)` plus 200 ms and a little
//! scheduling when Redis is frozen or unreachable: one timeout, never two stacked (a
//! pooled connection is waited for at most the read timeout too, and an attempt made
//! as a wait ends waits for its reply until the call must return, but at least
//! 200 ms). A call never waits on a connection the pool is still making: with none
//! idle it opens its own, within the connect or the read timeout (handshake
//! included), so the first call after a network outage heals works. If an
//! acquire's reply is lost after the command may have reached Redis,
//! the call returns an error — never `Ok(None)` — and `redlease-io` deletes the token
//! (compare-and-delete) once Redis answers again, retried until its TTL ends: no ghost
//! locks.
//!
//! # Architecture
//!
//! Data flows one way: caller → topology → scheme → Redis; renewal thread →
//! topology → Redis; Redis → waiter thread → caller. No module imports one above
//! it, and no two files import each other in a ring (`python3
//! ../shared/tools/modgraph.py src` and `… src --files` check both):
//!
//! ```text
//! facade      builder, options, client (LockClient), guard (LockGuard), inspect
//!             (LockInfo: a lock's holders and their owners)
//! threads     renewal/ (deadline queue)   notify   wait/ (pub/sub, local queue, hand-off)
//! topology    the seam (topology/mod.rs): where a lock lives, a folder per deployment
//!             single/  one server
//!             redlock/ a quorum: the vote, per-node lanes, a ballot counting renewals
//!             cluster/ a single per master, the slot map, its redlease-map thread
//!             io/      shared by all: a node's I/O thread, the renewal batch, a link
//!             probe    what the Redis user may do, checked by build
//! lease       a held lease's shared state: validity, loss, callback
//! scheme      the seam: how a lock is stored   token, legacy, reentrant, replicas
//! node        one Redis server: its pool
//! connection  r2d2 manager, timeouts, retry on a stale connection; where
//!             connections go: tls (certificates), sentinel (the current master)
//! leaves      error, metrics, scripts, time, cancel, slots (cluster key slots),
//!             owner (client tags, session records)
//! ```
//!
//! ```text
//!  caller ──lock()──► topology.acquire ──► scheme ──► Redis
//!  guard ──register──► redlease-renew ──batch──► redlease-io ──pipeline──► Redis
//!                         │ loss at validity end          │ answers
//!                         ├──► lost() channel ◄───────────┘
//!                         └──► redlease-notify ──► on_lost callback
//!  Redis ──release message──► redlease-wait ──► the oldest waiting caller
//! ```
//!
//! # Errors
//!
//! [`Error`] is `#[non_exhaustive]`; busy is never an error. Use
//! [`Error::is_timeout`] and [`Error::is_connection_error`] to decide on retries. A
//! Redis failure, [`Error::Redis`], says what was done to which lock and which limit
//! ran out — `acquiring lock "jobs:7": no reply from redis within 1s` — or quotes
//! the server's error reply (`redis replied TRYAGAIN: …`); its
//! [`RedisFailure`] carries the [`Operation`], key and limit as fields, the error from
//! `redis` or `r2d2` as [`source`](std::error::Error::source). [`Error::Permission`]
//! names what a Redis ACL refuses; `build()` checks that before any lock is taken
//! (README: the minimal ACL rule). Bad input ([`Error::Config`],
//! [`Error::InvalidKey`]) never panics. Neither `Display` nor `Debug` ever shows a
//! URL's password.
//!
//! # Interoperability
//!
//! The token scheme is the wire format of redis-py's `Lock`, redsync, node-redlock and
//! redlock-rs, the reentrant scheme Redisson's `RLock`, so they and redlease exclude
//! (and Redisson and redlease wake) each other on the same key. A [`Semaphore`]
//! ([`LockClient::semaphore`]) is Redisson's `RPermitExpirableSemaphore`: N permits
//! shared with Redisson clients, each a lease held by a [`PermitGuard`]. A [`FairLock`]
//! ([`LockClient::fair_lock`]) is Redisson's `RFairLock`: one queue in arrival order for
//! redlease and Redisson waiters, whose calls return a [`LockGuard`]. A key holding another
//! type or another scheme's value is treated as held, never overwritten.
//! [`LockClientBuilder::replicas`] confirms acquisitions on replicas with `WAIT`.
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
//! All off by default; the default build is the whole library for one server
//! or a Redlock quorum. `tls-rustls` and `sentinel` forward to the `redis`
//! features of the same name.
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `tls-rustls` | `rediss://` URLs; `LockClientBuilder::tls` with `TlsCertificates` for a private CA and client certificates (mutual TLS) |
//! | `sentinel` | `LockClient::sentinel`: the master is looked up through Redis Sentinel at every new connection, and a failover followed (what it can do to a lock is in its docs) |
//! | `cluster` | `LockClient::cluster`: locks routed to the master of their key's slot, a fence counter per slot, `MOVED`/`ASK`/`TRYAGAIN` followed within the call (`crc16`) |
//! | `metrics` | counters, gauges and histograms through the `metrics` crate's facade (`redlease_acquisitions_total`, `redlease_wait_seconds`, `redlease_hold_seconds`, `redlease_leases_held`, `redlease_leases_lost_total`, `redlease_renewals_total`); none names a lock |
//! | `cli` | the `redlease` command-line tool (`src/bin/redlease.rs`; clap, humantime, nix, signal-hook, `serde_json`) |
//!
//! # MSRV
//!
//! Rust 1.88, raised only in a minor release.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unreachable_pub, clippy::allow_attributes, clippy::dbg_macro)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)
)]

// Layers, bottom to top; a module imports only from its own layer or below.
// leaves
mod cancel;
mod error;
mod failure;
mod metrics;
mod owner;
mod scripts;
#[cfg(feature = "cluster")]
mod slots;
mod time;
mod tls;
// connection, node
mod connection;
mod node;
mod resp;
#[cfg(feature = "sentinel")]
mod sentinel;
mod target;
// storage formats
mod scheme;
// a held lease's shared state
mod lease;
// where locks live
mod topology;
// background threads
mod notify;
mod renewal;
mod wait;
// facade
mod builder;
mod client;
mod fair;
mod guard;
mod inspect;
mod options;
mod permit;
mod rw_guard;
mod rwlock;
mod semaphore;

pub use builder::{
    DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT,
    DEFAULT_NODE_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_TTL, LockClientBuilder,
};
pub use cancel::CancelToken;
pub use client::LockClient;
pub use error::{Error, NodeFailure, Operation, RedisFailure, Result};
pub use fair::FairLock;
pub use guard::LockGuard;
pub use inspect::{HeldLock, Holder, LockFormat, LockInfo, MAX_PERMITS};
pub use lease::{LeaseLost, LossReason};
pub use metrics::Metrics;
pub use options::{LockOptions, Renewal};
pub use owner::{ClientTag, Owner, Session};
pub use permit::PermitGuard;
pub use rw_guard::{ReadGuard, WriteGuard};
pub use rwlock::ReadWriteLock;
pub use scheme::{Clock, DEFAULT_LEGACY_GRACE, LegacyTimestamp, Release, Scheme, TimestampUnit};
pub use semaphore::{Permits, Semaphore};
pub use time::{MAX_TTL, MIN_TTL};
#[cfg(feature = "tls-rustls")]
pub use tls::TlsCertificates;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
