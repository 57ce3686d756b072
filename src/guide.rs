//! The guide: redlease's long form, a chapter per module.
//!
//! Each chapter is a markdown file of the repository's `guide/` folder, included
//! here as the module's documentation (so it reads on GitHub too) and doctested
//! with the crate. This module holds no code.
//!
//! | chapter | what it covers |
//! | --- | --- |
//! | [`getting_started`] | install, the quick start, the examples, the tests, MSRV |
//! | [`guarantees`] | what redlease gives you, and what it does not promise |
//! | [`migrating`] | moving off `SETNX`/`GETSET` timestamp locks, key by key |
//! | [`redisson`] | the clients it shares locks with; Redisson's reentrant lock, lease semaphore, read-write lock and fair lock |
//! | [`redlock`] | a lock over a quorum of independent masters |
//! | [`crash_recovery`] | a dead holder's locks free in seconds: liveness, the keeper's release, releases at exit |
//! | [`fleets`] | a leader, once per period, several names at once, waiting until a name is free, releasing everything on shutdown, a lock across the steps of a job (tickets), a fan-in latch that fails when a worker dies |
//! | [`deployments`] | Redis Cluster, TLS, Sentinel, replica confirmation (`WAIT`), Redis ACL users |
//! | [`operations`] | who holds a lock, `redlease list`, metrics, the chaos soak |
//! | [`errors`] | what an `Err` says, and what it means |
//! | [`cli`] | the `redlease` command-line tool and its exit statuses |
//! | [`performance`] | each figure beside its floor |

#[doc = include_str!("../guide/getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("../guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../guide/migrating.md")]
pub mod migrating {}

#[doc = include_str!("../guide/redisson.md")]
pub mod redisson {}

#[doc = include_str!("../guide/redlock.md")]
pub mod redlock {}

#[doc = include_str!("../guide/crash_recovery.md")]
pub mod crash_recovery {}

#[doc = include_str!("../guide/fleets.md")]
pub mod fleets {}

#[doc = include_str!("../guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("../guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../guide/errors.md")]
pub mod errors {}

#[doc = include_str!("../guide/cli.md")]
pub mod cli {}

#[doc = include_str!("../guide/performance.md")]
pub mod performance {}
