//! The minimum hold of a lock call ([`LockOptions::min_hold`]): "at most once per
//! period" for jobs that a fleet of hosts runs from cron.
//!
//! A lease with a minimum hold `d` is released as usual once `d` has passed since
//! its acquisition. A release before that keeps the key instead (a compare on the
//! token, then a relative `PX` of what is left, see `TOKEN_KEEP`), and the guard
//! still reports [`Release::Released`](crate::Release::Released). The hold is
//! measured on this process's monotonic clock from the moment the acquire's reply
//! arrived, and reaches Redis only as a relative TTL, so no host's wall clock
//! enters it. So that a holder that dies inside the hold does not free the key
//! early either, the acquire writes a TTL of at least `d` and no renewal or
//! extend shortens the key below the hold's end.

use std::time::{Duration, Instant};

use crate::client::options::LockOptions;
use crate::error::{Error, Result};
use crate::scheme::Backend;
use crate::time::MAX_TTL;

impl LockOptions {
    /// Keep the lock at least `d` after its acquisition: a release (an
    /// [`unlock`](crate::LockGuard::unlock), or a guard dropped, also while
    /// unwinding) before `d` has passed keeps the key until then, if it still
    /// holds this lease's token, and
    /// passes it to no waiting caller. The release still reports
    /// [`Release::Released`](crate::Release::Released); [`inspect`](crate::LockClient::inspect)
    /// shows the lock as [`kept`](crate::LockInfo::kept).
    ///
    /// With [`try_lock`](crate::LockClient::try_lock) on every host of a fleet,
    /// a job runs at most once per `d` however long it takes. The acquire writes
    /// a TTL of at least `d` and renewals never shorten the key below the hold's
    /// end, so a holder that dies inside the hold keeps the lock until the hold
    /// ends too (as `lockAtLeastFor` does in `ShedLock`). Time is counted on this process's
    /// monotonic clock and reaches Redis as a relative TTL: no wall clock of any
    /// host enters it. Token locks only (on one server, Sentinel, a Cluster or a
    /// Redlock quorum). Defaults to none.
    ///
    /// # Errors
    /// The lock call returns [`Error::Config`] for a zero `d`, one longer than
    /// the call's `max_hold` or than what Redis `PX` accepts, and
    /// [`Error::Unsupported`] for any scheme or primitive but the token lock.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::Duration;
    /// use redlease::{LockClient, LockOptions};
    /// let client = LockClient::builder("redis://127.0.0.1/").build()?;
    /// // Run from cron every 15 minutes on every host: the job runs once.
    /// let opts = LockOptions::new().wait(Duration::ZERO).min_hold(Duration::from_secs(14 * 60));
    /// if let Some(guard) = client.lock_with("report", &opts)? {
    ///     // ... the job ...
    ///     guard.unlock()?; // the key stays until 14 minutes after the acquisition
    /// }
    /// # Ok(()) }
    /// ```
    pub fn min_hold(mut self, d: Duration) -> Self {
        self.min_hold = Some(d);
        self
    }

    /// The minimum hold set here, if any.
    pub fn get_min_hold(&self) -> Option<Duration> {
        self.min_hold
    }
}

/// Checks a call's minimum hold against its other options and the scheme that
/// would hold it.
pub(super) fn check_min_hold(
    min_hold: Option<Duration>,
    max_hold: Option<Duration>,
    backend: &dyn Backend,
) -> Result<Option<Duration>> {
    let Some(d) = min_hold else {
        return Ok(None);
    };
    if d.is_zero() {
        return Err(Error::config("min_hold", "must be above zero"));
    }
    if d > MAX_TTL {
        return Err(Error::config("min_hold", "exceeds what redis `PX` accepts"));
    }
    if max_hold.is_some_and(|max| d > max) {
        return Err(Error::config("min_hold", "must not exceed max_hold"));
    }
    let Some(by) = backend.refuses_min_hold() else {
        return Ok(Some(d));
    };
    Err(Error::Unsupported {
        what: "a minimum hold (min_hold)",
        by,
    })
}

/// The TTL an acquire writes for a lease of TTL `ttl` and minimum hold
/// `min_hold`: at least the hold, so that the key outlives a holder that dies
/// inside it.
pub(super) fn stored_ttl(ttl: Duration, min_hold: Option<Duration>) -> Duration {
    min_hold.map_or(ttl, |d| ttl.max(d))
}

/// The end of a minimum hold `min_hold` of a lease granted now, on the
/// monotonic clock. Counted from the reply (now), not from when the acquire was
/// sent: the server set the key in between, so the key then lives at least
/// `min_hold` after the server's acquisition, whatever the round trip took.
pub(super) fn hold_end(min_hold: Option<Duration>) -> Option<Instant> {
    min_hold.and_then(|d| Instant::now().checked_add(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_ttl_covers_the_minimum_hold() {
        let s = Duration::from_secs;
        assert_eq!(stored_ttl(s(30), None), s(30));
        assert_eq!(stored_ttl(s(30), Some(s(10))), s(30));
        assert_eq!(stored_ttl(s(30), Some(s(840))), s(840));
    }
}
