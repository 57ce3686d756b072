//! [`Ticket`]: a held lease's identity (its key, format and value), so that
//! another process can release it if its holder dies, and
//! [`LockClient::release_ticket`], that release.

use std::fmt;

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::metrics::bump;
use crate::scheme::{self, Announce, Keys, Release, Scheme};

/// A held lease's identity: its key, its format and the value its holder
/// stored, for a process that must release it if the holder dies without a word
/// (redlease's keeper: the holder is killed, the command it ran is ended, and the
/// lock should not wait for its TTL).
///
/// Made by [`LockGuard::ticket`] and
/// [`Leadership::ticket`](crate::Leadership::ticket), or rebuilt from its parts
/// with [`Ticket::new`]; used by [`LockClient::release_ticket`]. It holds no
/// server address and no password. Its value lets whoever has it release the
/// lock, so [`Debug`] does not show it: hand it over a pipe, never on a command
/// line or in an environment.
#[derive(Clone, PartialEq, Eq)]
pub struct Ticket {
    key: String,
    format: LockFormat,
    value: String,
}

impl Ticket {
    /// A ticket for the lock `key` (the full key, with the holder's prefix)
    /// held with `value` in `format`. Sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty key or value, or a format whose value is
    /// not one fixed string for the lease's whole life: only
    /// [`LockFormat::Token`] (a token lock, and a leadership) and
    /// [`LockFormat::Reentrant`] (Redisson's hash) are released by value.
    ///
    /// # Examples
    /// ```
    /// use redlease::{LockFormat, Ticket};
    ///
    /// let ticket = Ticket::new("lock:report", LockFormat::Token, "rl2:…")?;
    /// assert_eq!(ticket.key(), "lock:report");
    /// assert!(Ticket::new("lock:report", LockFormat::LegacyTimestamp, "1").is_err());
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn new(key: &str, format: LockFormat, value: &str) -> Result<Self> {
        let invalid = |reason| Error::Invalid {
            what: "ticket",
            reason,
        };
        if !matches!(format, LockFormat::Token | LockFormat::Reentrant) {
            return Err(invalid(
                "only token and reentrant locks are released by value",
            ));
        }
        if key.is_empty() || value.is_empty() {
            return Err(invalid("the key or the value is empty"));
        }
        Ok(Self {
            key: key.to_owned(),
            format,
            value: value.to_owned(),
        })
    }

    /// The lock key, with the holder's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How the lock is stored: [`LockFormat::Token`] or [`LockFormat::Reentrant`].
    pub fn format(&self) -> LockFormat {
        self.format
    }

    /// The value the holder stored (a token, a Redisson owner field).
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// This lease's [`Ticket`], for a process that is to release it if this
    /// one dies. Sends nothing.
    ///
    /// `None` when the lease cannot be released by value from elsewhere: a
    /// legacy timestamp lock (its value changes with every renewal), a fair
    /// lock (its queue is the holder's to tidy), a lease inside its
    /// [`min_hold`](crate::LockOptions::min_hold) (its key is to stay), or one
    /// already released.
    pub fn ticket(&self) -> Option<Ticket> {
        let lease = self.lease();
        let format = match lease.backend.label() {
            "token" | "election" => LockFormat::Token,
            "reentrant" => LockFormat::Reentrant,
            _ => return None,
        };
        if lease.min_hold_left(std::time::Instant::now()).is_some() {
            return None;
        }
        let held = lease.held.lock();
        if held.released {
            return None;
        }
        Ticket::new(&lease.key, format, &held.value).ok()
    }
}

impl LockClient {
    /// Releases the lock a [`Ticket`] names if it still holds the ticket's
    /// value: the compare-and-delete of the ticket's format (a token lock's
    /// marked value too), with the release message that wakes waiters. A lock
    /// that expired, or that someone else holds now, is left untouched
    /// ([`Release::Expired`], [`Release::Taken`]). The ticket's key is used as
    /// it is, whatever this client's prefix. One round trip, bounded by the
    /// client's timeouts.
    ///
    /// # Errors
    /// [`Error::Redis`] when the release could not be sent or got no answer in
    /// time (the lock then runs out with its TTL); [`Error::Shutdown`] when the
    /// client is [closed](Self::close).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let guard = client.lock("report")?;
    /// let ticket = guard.ticket().expect("a token lock has one");
    /// std::mem::forget(guard); // as if its holder had died
    /// assert!(client.release_ticket(&ticket)?.was_held());
    /// # Ok(()) }
    /// ```
    pub fn release_ticket(&self, ticket: &Ticket) -> Result<Release> {
        let hub = &self.inner.hub;
        if hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let scheme = match ticket.format {
            LockFormat::Reentrant => Scheme::Reentrant,
            _ => Scheme::Token,
        };
        let backend = scheme::backend(&scheme, &self.inner.id);
        let keys = Keys::new("", &ticket.key, &*backend)?;
        // Whoever waits for the key hears the release, marked value or not.
        let announce = Announce {
            channel: &keys.channel,
            always: true,
            keep: None,
        };
        let limits = hub.topology.subscriber(0).limits();
        let freed = hub
            .topology
            .release(&*backend, &keys.lock, announce, &ticket.value, &[])
            .map_err(|e| {
                bump(&hub.counters.release_errors, 1);
                e.during(Operation::Release, &keys.lock, limits)
            })?;
        if freed.outcome == Release::Released {
            bump(&hub.counters.released, 1);
        }
        Ok(freed.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_refused_for_a_format_released_otherwise() {
        for format in [
            LockFormat::LegacyTimestamp,
            LockFormat::Fair,
            LockFormat::Semaphore,
        ] {
            assert!(Ticket::new("k", format, "v").is_err(), "{format:?}");
        }
        assert!(Ticket::new("", LockFormat::Token, "v").is_err());
        assert!(Ticket::new("k", LockFormat::Token, "").is_err());
    }

    #[test]
    fn a_tickets_debug_does_not_show_its_value() {
        let ticket = Ticket::new("k", LockFormat::Reentrant, "secret-value").unwrap();
        let shown = format!("{ticket:?}");
        assert!(!shown.contains("secret-value"), "{shown}");
        assert!(shown.contains("Reentrant"), "{shown}");
    }
}
