//! [`Leadership`], the guard of a won campaign, and [`Leader`], what
//! [`Election::leader`](crate::Election::leader) reads.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::guard::LockGuard;
use crate::client::ticket::Ticket;
use crate::error::Result;
use crate::lease::LeaseLost;
use crate::owner::Owner;
use crate::scheme::Release;

/// Leadership of an election: this caller leads while it holds it. Resigns
/// when dropped (also while unwinding from a panic).
///
/// Made by [`Election::campaign`](crate::Election::campaign),
/// [`try_campaign`](crate::Election::try_campaign),
/// [`try_campaign_for`](crate::Election::try_campaign_for) and
/// [`campaign_with`](crate::Election::campaign_with). Its lease is renewed in
/// the background like a lock's. A leader paused or cut off past its lease may
/// still act for a moment before it notices ([`is_held`](Self::is_held),
/// [`lost`](Self::lost)): pass [`term`](Self::term) with every write, and have
/// the downstream system refuse a term lower than the highest it has seen.
#[must_use = "if unused the leadership is resigned immediately"]
#[clippy::has_significant_drop]
pub struct Leadership {
    guard: LockGuard,
    term: u64,
    name: Box<str>,
}

impl Leadership {
    pub(crate) fn new(guard: LockGuard, term: u64, name: &str) -> Self {
        Self {
            guard,
            term,
            name: name.into(),
        }
    }

    /// The term: strictly increasing per name over every leader ever (the
    /// lock's fencing token, at least the server's clock in µs).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The election's key: its name with the client's prefix.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// Whether we still lead: the lease is not known lost, and within
    /// [`valid_until`](Self::valid_until). A local check; never blocks.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// The instant (local monotonic clock) until which the lease is surely
    /// valid: the last confirmed acquire or renewal, plus the TTL, minus the
    /// drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// A channel that receives one [`LeaseLost`] if the leadership's lease is
    /// lost (as [`LockGuard::lost`]): stop acting as leader.
    pub fn lost(&self) -> &Receiver<LeaseLost> {
        self.guard.lost()
    }

    /// [`is_held`](Self::is_held) as a `Result`, for use with `?` right before
    /// a side effect that needs the leadership.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) once the lease is lost or
    /// past its validity.
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Makes the lease last `ttl` from now, if still ours. One round trip.
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.guard.extend(ttl)
    }

    /// Gives the leadership up and says what Redis found
    /// ([`Release::Expired`] or [`Release::Taken`] when it had ended first).
    /// The release message wakes the first waiting candidate of each client,
    /// and observers. One round trip, bounded by the client's timeouts.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when the release got no answer;
    /// the lease then ends with its TTL.
    pub fn resign(self) -> Result<Release> {
        self.guard.unlock()
    }

    /// The leadership's [`Ticket`], for a process that is to resign it if this
    /// one dies ([`LockClient::release_ticket`](crate::LockClient::release_ticket)
    /// resigns it: its release is a token lock's). `None` once resigned.
    /// Sends nothing.
    pub fn ticket(&self) -> Option<Ticket> {
        self.guard.ticket()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.key())
            .field("term", &self.term)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

/// The leader of an election as Redis shows it, from
/// [`Election::leader`](crate::Election::leader) and
/// [`Election::observe`](crate::Election::observe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    key: String,
    term: u64,
    ttl: Duration,
    owner: Owner,
}

impl Leader {
    pub(crate) fn new(key: &str, term: u64, ttl: Duration, owner: Owner) -> Self {
        Self {
            key: key.to_owned(),
            term,
            ttl,
            owner,
        }
    }

    /// The election's key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The leader's term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The time left on the leader's lease when it was read (renewals push it
    /// forward while the leader lives).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Who leads, from its client's session record: [`Owner::Alive`] with its
    /// host, pid, program and client id; [`Owner::Gone`] when the record has
    /// expired (its process is probably dead: the lease's TTL still decides
    /// when the next candidate may lead).
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}
