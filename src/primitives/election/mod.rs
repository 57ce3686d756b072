//! [`Election`]: leader election on a name, built on the token lock with
//! fencing on. The wire side (the acquire that records the term and announces
//! it) is in `scheme/election.rs`.
//!
//! A campaign is a fenced acquire of the name through the client's one loop
//! (it waits as `lock` waits, woken by the release message), whose script also
//! records `<term> <token>` beside the key and announces the new leader on the
//! name's elected channel. The term is the fence: strictly increasing per name
//! over every leader ever.
//!
//! Layout: this file is [`Election`] and its campaign calls;
//! `leadership.rs` the guard [`Leadership`] and what [`Election::leader`]
//! returns, [`Leader`]; `read.rs` [`Election::leader`] itself, the one-step
//! read of the key and its term record; `observe.rs` [`Observer`], the thread
//! behind [`Election::observe`].

mod leadership;
mod observe;
mod read;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::client::options::{LockOptions, Wait};
use crate::error::{Error, Result};
use crate::format::LockFormat;
use crate::primitives::family::acquire_family;
use crate::primitives::handle::Handle;
use crate::scheme::{Backend, ElectionBackend, Scheme};

pub use leadership::{Leader, Leadership};
pub use observe::{OBSERVE_POLL, Observer};

impl LockClient {
    /// A handle on the election `name` (under the client's key prefix): who
    /// leads it, campaigns to lead it, and a stream of its leaders. Sends
    /// nothing.
    ///
    /// An election is a token lock taken with a fencing token: the leader holds
    /// the name's lock (renewed in the background, given up on
    /// [`resign`](Leadership::resign) or drop) and its fence is its
    /// [term](Leadership::term). A Redis Cluster serves it like any lock.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::Unsupported`] on a
    /// Redlock client (a quorum of independent masters gives no fencing token,
    /// so no term).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let election = client.election("scheduler")?;
    /// let leadership = election.campaign()?; // waits until we lead
    /// let term = leadership.term();           // pass it with every write
    /// # let _ = term;
    /// leadership.resign()?;                   // the next candidate leads at once
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Result<Election> {
        if self.inner.hub.topology.check(&Scheme::Token, true).is_err() {
            return Err(Error::Unsupported {
                what: "leader election",
                by: "redlock (a quorum of independent masters gives no fencing token to be the term)",
            });
        }
        Ok(Election {
            handle: Handle::new(self, name, LockFormat::Token)?,
            backend: Arc::new(ElectionBackend::new(
                self.inner.id.tag(),
                self.inner.id.broken(),
            )),
        })
    }
}

/// Leader election on one name, across processes.
///
/// Made by [`LockClient::election`]. Cheap to clone. At most one
/// [`Leadership`] of a name is valid at a time (as far as the lock's lease
/// holds: see [`Leadership::is_held`]); each has a term higher than every
/// earlier leader's.
#[derive(Clone)]
pub struct Election {
    handle: Handle,
    /// Its leases' backend: the fenced token acquire that records the term.
    backend: Arc<dyn Backend>,
}

impl Election {
    /// The election's name, as passed to [`LockClient::election`].
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The election's key: its name with the client's prefix.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    acquire_family! {
        fn campaign, try_campaign, try_campaign_for, try_campaign_until, campaign_with;
        take: run(), line: InLine, guard: Leadership,
        what: "the leadership", busy: "someone else leads", gave_up: "",
        handle: election = "election(\"scheduler\")";
        /// it campaigns until this caller leads. It waits for the leader's
        /// release message (a resign wakes the first waiting candidate at
        /// once) or its lease's end, as [`LockClient::lock`] waits. A leader
        /// always publishes its release, so the wait sends nothing to Redis
        /// while the client hears the name's channel, but one try when the
        /// leader's TTL last read runs out; it polls, as a lock's wait does,
        /// while the client does not hear the channel or the name is held by
        /// something else than a leader (a plain lock of the name).
        ///
        /// # Errors
        /// [`Error::WrongFormat`] when the name holds another format (a hash, a
        /// semaphore's count; a plain lock of the name is waited for);
        /// [`Error::Redis`] when Redis fails or does not answer in time;
        /// [`Error::Shutdown`] when the client is [closed](LockClient::close).
        waits;
        /// [`Error::Config`] for fencing off or a scheme other than
        /// [`Scheme::Token`] (an election is a fenced token lock);
        /// [`Error::Unsupported`] for a [`min_hold`](LockOptions::min_hold) (a
        /// resign hands the leadership on at once); [`Error::Cancelled`].
        options;
    }

    /// A stream of the leaders: the current one at once, then each change
    /// (`None` when nobody leads), from a thread of its own (`redlease-watch`)
    /// woken by the name's release and elected messages, reading again at
    /// least every [`OBSERVE_POLL`](crate::OBSERVE_POLL) in case a message was
    /// missed (on a Redis 7 cluster, whose messages are sharded, it polls). The
    /// channel holds one value, always the latest: a slow reader skips
    /// leaders, never reads a stale one after a newer one. The thread stops,
    /// and the channel disconnects, when the client is closed or dropped, or
    /// when the [`Observer`] is dropped, within one poll interval.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the thread could not be started.
    pub fn observe(&self) -> Result<Observer> {
        Observer::spawn(self)
    }

    fn run(&self, opts: &LockOptions, wait: Wait) -> Result<Option<Leadership>> {
        if opts.fencing == Some(false) {
            return Err(Error::config(
                "fencing",
                "an election always takes a fence: it is the term",
            ));
        }
        if opts.scheme.as_ref().is_some_and(|s| *s != Scheme::Token) {
            return Err(Error::config("scheme", "an election is a token lock"));
        }
        // A kept key (`<token>~`) would name no leader and no term until it
        // expired: `leader()` and observers would fail on it.
        if opts.min_hold.is_some() {
            return Err(Error::Unsupported {
                what: "a minimum hold (min_hold)",
                by: "an election (a resign hands the leadership on at once)",
            });
        }
        // A key of another format (a hash, a count) would read as busy forever.
        self.read()?;
        // The election's backend, not the client's scheme: its acquire records
        // the term.
        let mut opts = opts.clone().fencing(true);
        opts.scheme = None;
        opts.backend = Some(Arc::clone(&self.backend));
        let Some(guard) = self.handle.client.acquire(self.name(), &opts, wait)? else {
            return Ok(None);
        };
        let term = guard.fence().ok_or(Error::Shutdown)?;
        Ok(Some(Leadership::new(guard, term, self.name())))
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.debug(f, "Election")
    }
}
