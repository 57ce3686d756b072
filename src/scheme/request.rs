//! What an acquire attempt asks for, and where a release announces itself.

use std::time::{Duration, Instant};

use super::Replicas;

/// What one acquire attempt asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// The lease's TTL.
    pub(crate) ttl: Duration,
    /// Whether to take a fencing token.
    pub(crate) fence: bool,
    /// Whether the caller waits if the lock is busy.
    pub(crate) wait: Waiting,
    /// Replicas that must acknowledge the write (`WAIT`, in the same round trip).
    pub(crate) replicas: Option<Replicas>,
    /// When the caller's call must return by, if it has a bound: the caller's
    /// deadline or, if later, one read timeout after the call began. An attempt
    /// made near it waits for its reply until then (but at least [`REPLY_FLOOR`]).
    pub(crate) return_by: Option<Instant>,
    /// When the caller's call began: how long it has waited so far, for a
    /// format that bounds how long a caller defers to another (a read-write
    /// lock's reader behind a waiting writer's mark).
    pub(crate) began: Instant,
}

/// Whether the caller of an acquire attempt waits if the lock is busy.
///
/// A caller that waits marks a redlease holder's token, so that its release
/// publishes the message that wakes the caller, and needs the holder's remaining
/// TTL (it bounds the wait) unless it knows it already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// It returns at once (`try_lock`, a deadline already past).
    No,
    /// It waits, and needs the holder's remaining TTL: its first attempt, or the
    /// holder's TTL last seen has run out.
    First,
    /// Its first attempt, in a client with no channel subscribed and no other
    /// caller for the key: when busy, it subscribes and tries again, and that try
    /// names and marks the holder. This one need not ask who holds the lock: it is
    /// the floor's own `SET NX PX`.
    FirstAlone,
    /// It waits, and knows how long the holder has left.
    Poll,
}

impl Waiting {
    /// The attempt of a caller that `waits` when the lock is busy or not, and
    /// `knows_remaining` the holder's TTL or not (`None`: no busy reply yet, its
    /// first attempt). `alone`, asked for a first attempt only: no other caller of
    /// its client acquires this key, and none waits for any key.
    pub(crate) fn of(
        waits: bool,
        knows_remaining: Option<bool>,
        alone: impl FnOnce() -> bool,
    ) -> Self {
        match (waits, knows_remaining) {
            (false, _) => Waiting::No,
            (true, Some(true)) => Waiting::Poll,
            (true, None) if alone() => Waiting::FirstAlone,
            (true, _) => Waiting::First,
        }
    }

    /// Whether the attempt needs the holder's remaining TTL.
    pub(crate) fn first(self) -> bool {
        matches!(self, Waiting::First | Waiting::FirstAlone)
    }
}

/// Where a release announces itself, and whether it must.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announce<'a> {
    /// The key's release channel.
    pub(crate) channel: &'a str,
    /// Publish even when no waiter marked the value: callers of the releasing
    /// client wait for the key (they may not have marked the current value), or
    /// the value is no redlease token.
    pub(crate) always: bool,
    /// Keep the key this much longer instead of deleting it: a minimum hold
    /// ([`LockOptions::min_hold`](crate::LockOptions::min_hold)) that has not
    /// ended. The release then compares the token and sets this `PTTL` (marking
    /// the value kept); the lock is not free, and the message it publishes (as
    /// a release would) only makes waiters read the key's new `PTTL`.
    pub(crate) keep: Option<Duration>,
}

impl<'a> Announce<'a> {
    /// On `channel`, whatever the value says.
    pub(crate) fn always(channel: &'a str) -> Self {
        Self {
            channel,
            always: true,
            keep: None,
        }
    }
}

/// The shortest wait for a reply an attempt gets near the end of its caller's wait,
/// so that a merely slow server does not turn a busy lock into a timeout.
pub(crate) const REPLY_FLOOR: Duration = Duration::from_millis(200);
