//! [`Ticket`]: a held lease's identity (its key, format, value and fence), so
//! that another process can release it if its holder dies, or adopt it (see
//! `adopt.rs`); its printable form (`rl-ticket:v1:…`); and
//! [`LockClient::release_ticket`], its release.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::client::options::check_ttl;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::metrics::bump;
use crate::scheme::semaphore::ticket::permit_ids;
use crate::scheme::{self, Announce, Extend, Keys, ManyBackend, Release, Scheme, SemaphoreBackend};

/// A held lease's identity: its key, its format, the value its holder stored
/// and its fence, for a process that must release it if the holder dies without
/// a word (redlease's keeper), or that takes it over: a later step of a job, or
/// another process ([`LockClient::adopt`]).
///
/// Made by [`LockGuard::ticket`] (the guard keeps the lease),
/// [`LockGuard::into_ticket`] (the guard lets go of it without releasing it),
/// [`PermitGuard::ticket`](crate::PermitGuard::ticket) and
/// [`into_ticket`](crate::PermitGuard::into_ticket) (a semaphore's permit, and
/// [`PermitsGuard`](crate::PermitsGuard)'s several) and
/// [`Leadership::ticket`](crate::Leadership::ticket), rebuilt from its parts
/// with [`Ticket::new`], or parsed from its printable form
/// ([`FromStr`](#impl-FromStr-for-Ticket)); used by
/// [`LockClient::release_ticket`], [`LockClient::extend_ticket`],
/// [`LockClient::adopt`] (a lock's) and
/// [`LockClient::adopt_permit`](crate::LockClient::adopt_permit) (a permit's).
///
/// # A capability
/// A ticket holds no server address and no password, but its value lets
/// whoever has it release or adopt the lock, as a lock token does. So
/// [`Debug`] does not show it, while [`Display`](fmt::Display) does (that is the
/// printable form's purpose): keep a printed ticket where only the steps that
/// need it can read it (a file of mode 0600, a pipe), never on a command line
/// or in an environment that others can list.
///
/// # Printable form
/// `rl-ticket:v1:<scheme>:<fence>:<key>:<value>`: `scheme` is `token`,
/// `reentrant` or `permit`, `fence` a decimal number or `-` for none, and `key`
/// (the full key) and `value` are percent-encoded: every byte but ASCII letters, digits
/// and `-._~` is `%` and two uppercase hex digits, so the form has no `:`,
/// space, quote or newline of its own and passes through shells and files as
/// one word.
///
/// # Examples
/// ```
/// use redlease::{LockFormat, Ticket};
///
/// let ticket = Ticket::new("lock:report", LockFormat::Token, "rl2:0123456789abcdef:1z")?
///     .with_fence(42);
/// let printed = ticket.to_string();
/// assert_eq!(
///     printed,
///     "rl-ticket:v1:token:42:lock%3Areport:rl2%3A0123456789abcdef%3A1z"
/// );
/// assert_eq!(printed.parse::<Ticket>()?, ticket);
/// assert!("rl-ticket:v2:token:-:k:v".parse::<Ticket>().is_err());
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Ticket {
    key: String,
    format: LockFormat,
    value: String,
    fence: Option<u64>,
}

/// The printable form's first fields.
const PRINTED_PREFIX: &str = "rl-ticket:v1:";

impl Ticket {
    /// A ticket for the lock `key` (the full key, with the holder's prefix)
    /// held with `value` in `format`. Sends nothing.
    ///
    /// For a permit ([`LockFormat::Semaphore`]), `key` is the semaphore's (of
    /// its count) and `value` the permit id: an even number of hex digits, or
    /// several such ids joined by commas for a hold of several permits.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty key or value, a permit's value that is
    /// not hex ids, or a format whose value is not one fixed string for the
    /// lease's whole life: only [`LockFormat::Token`] (a token lock, and a
    /// leadership), [`LockFormat::Reentrant`] (Redisson's hash) and
    /// [`LockFormat::Semaphore`] (a permit) are released by value.
    ///
    /// # Examples
    /// ```
    /// use redlease::{LockFormat, Ticket};
    ///
    /// let ticket = Ticket::new("lock:report", LockFormat::Token, "rl2:…")?;
    /// assert_eq!(ticket.key(), "lock:report");
    /// assert!(Ticket::new("lock:report", LockFormat::LegacyTimestamp, "1").is_err());
    /// let permit = Ticket::new("imports", LockFormat::Semaphore, "0123456789abcdef")?;
    /// assert!(permit.to_string().starts_with("rl-ticket:v1:permit:-:imports:"));
    /// assert!(Ticket::new("imports", LockFormat::Semaphore, "not hex").is_err());
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn new(key: &str, format: LockFormat, value: &str) -> Result<Self> {
        let invalid = |reason| Error::Invalid {
            what: "ticket",
            reason,
        };
        if !matches!(
            format,
            LockFormat::Token | LockFormat::Reentrant | LockFormat::Semaphore
        ) {
            return Err(invalid(
                "only token and reentrant locks and permits are released by value",
            ));
        }
        if key.is_empty() || value.is_empty() {
            return Err(invalid("the key or the value is empty"));
        }
        if format == LockFormat::Semaphore && permit_ids(value).is_none() {
            return Err(invalid(
                "a permit's value is its ids: even-length hex, joined by commas",
            ));
        }
        Ok(Self {
            key: key.to_owned(),
            format,
            value: value.to_owned(),
            fence: None,
        })
    }

    /// The same ticket, carrying the fencing token taken with the lease: an
    /// adopter's guard reports it as its [`fence`](LockGuard::fence). Sends nothing.
    #[must_use]
    pub fn with_fence(mut self, fence: u64) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The fencing token taken with the lease, when it was fenced.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The lock key, with the holder's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How the lease is stored: [`LockFormat::Token`],
    /// [`LockFormat::Reentrant`] or [`LockFormat::Semaphore`] (a permit).
    pub fn format(&self) -> LockFormat {
        self.format
    }

    /// The value the holder stored (a token, a Redisson owner field, a permit
    /// id or ids joined by commas).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// How many permits a permit's ticket holds (its ids); 1 for a lock's.
    pub fn permits(&self) -> usize {
        match self.format {
            LockFormat::Semaphore => self.value.split(',').count(),
            _ => 1,
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("format", &self.format)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// The printable form, value included: see [`Ticket`]'s "A capability".
impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.format {
            LockFormat::Reentrant => "reentrant",
            LockFormat::Semaphore => "permit",
            _ => "token",
        };
        f.write_str(PRINTED_PREFIX)?;
        f.write_str(scheme)?;
        match self.fence {
            Some(fence) => write!(f, ":{fence}:")?,
            None => f.write_str(":-:")?,
        }
        encode(f, &self.key)?;
        f.write_str(":")?;
        encode(f, &self.value)
    }
}

/// Parses the printable form (surrounding whitespace, such as the newline a
/// file ends with, is ignored).
///
/// # Errors
/// [`Error::Invalid`] (`what`: `ticket`) saying what is wrong: not a ticket,
/// another version, an unknown scheme, a fence that is not a number, a bad
/// percent-encoding, an empty key or value.
impl FromStr for Ticket {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let invalid = |reason| Error::Invalid {
            what: "ticket",
            reason,
        };
        let text = text.trim();
        let rest = match text.strip_prefix(PRINTED_PREFIX) {
            Some(rest) => rest,
            None if text.starts_with("rl-ticket:") => {
                return Err(invalid("another version than `rl-ticket:v1:`"));
            }
            None => return Err(invalid("not a ticket: it does not start with `rl-ticket:`")),
        };
        let fields: Vec<&str> = rest.split(':').collect();
        let [scheme, fence, key, value] = fields[..] else {
            return Err(invalid(
                "expected `rl-ticket:v1:<scheme>:<fence>:<key>:<value>`",
            ));
        };
        let format = match scheme {
            "token" => LockFormat::Token,
            "reentrant" => LockFormat::Reentrant,
            "permit" => LockFormat::Semaphore,
            _ => return Err(invalid("unknown scheme: `token`, `reentrant` or `permit`")),
        };
        let fence = match fence {
            "-" => None,
            n if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => Some(
                n.parse()
                    .map_err(|_| invalid("the fence is beyond 64 bits"))?,
            ),
            _ => return Err(invalid("the fence is not a number or `-`")),
        };
        let key = decode(key).ok_or(invalid("the key's percent-encoding is bad"))?;
        let value = decode(value).ok_or(invalid("the value's percent-encoding is bad"))?;
        let ticket = Self::new(&key, format, &value)?;
        Ok(Self { fence, ..ticket })
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
    ///
    /// A reentrant lock's ticket names its owner field, which all the nested
    /// holds of one thread share: it releases one hold, and is adopted only
    /// while that thread holds the lock once (see [`LockClient::adopt`]).
    pub fn ticket(&self) -> Option<Ticket> {
        let lease = self.lease();
        let format = match lease.backend.label() {
            "token" | "election" => LockFormat::Token,
            "reentrant" => LockFormat::Reentrant,
            "semaphore" => LockFormat::Semaphore,
            _ => return None,
        };
        if lease.min_hold_left(std::time::Instant::now()).is_some() {
            return None;
        }
        let held = lease.held.lock();
        if held.released {
            return None;
        }
        let ticket = Ticket::new(&lease.key, format, &held.value).ok()?;
        Some(match self.fence() {
            Some(fence) => ticket.with_fence(fence),
            None => ticket,
        })
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
        let backend = self.ticket_backend(ticket)?;
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

impl LockClient {
    /// The backend a ticket's lease is stored by: the reentrant scheme's, a
    /// permit's (one, or several as one hold) or the token's. [`Error::Shutdown`]
    /// once the client is closed.
    pub(crate) fn ticket_backend(&self, ticket: &Ticket) -> Result<Arc<dyn scheme::Backend>> {
        if self.inner.hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let id = &self.inner.id;
        let scheme = match (ticket.format, u32::try_from(ticket.permits())) {
            (LockFormat::Reentrant, _) => Scheme::Reentrant,
            (LockFormat::Semaphore, Ok(1)) => return Ok(Arc::new(SemaphoreBackend::new(id))),
            (LockFormat::Semaphore, n) => {
                return Ok(Arc::new(ManyBackend::new(id, n.unwrap_or(u32::MAX))));
            }
            _ => Scheme::Token,
        };
        Ok(scheme::backend(&scheme, &self.inner.id))
    }
}

/// Whether `b` stands for itself in the printable form.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Writes `text` percent-encoded: every byte but [`plain`] ones as `%XX`.
fn encode(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    for b in text.bytes() {
        if plain(b) {
            f.write_char(char::from(b))?;
        } else {
            write!(f, "%{b:02X}")?;
        }
    }
    Ok(())
}

/// The text `encoded` stands for; `None` for a byte that is neither [`plain`]
/// nor `%` and two hex digits, or bytes that are not UTF-8.
fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = encoded.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if plain(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

impl LockClient {
    /// Sets the remaining time of the lock a [`Ticket`] names to `ttl` from now,
    /// if it still holds the ticket's value: the compare-and-extend of the
    /// ticket's format, which leaves the value (and so the ticket) as it is. For
    /// a lease nobody renews (one let go of with [`LockGuard::into_ticket`])
    /// between the steps of a job. One round trip, bounded by the client's
    /// timeouts.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock expired or holds another value (nothing
    /// is changed); [`Error::Config`] for a TTL out of range; [`Error::Redis`]
    /// when the extend could not be sent or got no answer in time (it may have
    /// landed); [`Error::Shutdown`] when the client is [closed](Self::close).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::Duration;
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let ticket = client.lock("report")?.into_ticket()?;
    /// client.extend_ticket(&ticket, Duration::from_secs(600))?;
    /// # Ok(()) }
    /// ```
    pub fn extend_ticket(&self, ticket: &Ticket, ttl: Duration) -> Result<()> {
        check_ttl("ttl", ttl)?;
        let hub = &self.inner.hub;
        let backend = self.ticket_backend(ticket)?;
        let (_, _, outcome) = hub
            .topology
            .extend(&*backend, &ticket.key, &ticket.value, &[], ttl);
        let limits = hub.topology.subscriber(0).limits();
        match outcome.map_err(|e| e.during(Operation::Extend, &ticket.key, limits))? {
            Extend::Extended => Ok(()),
            _ => Err(Error::LockLost {
                key: ticket.key.as_str().into(),
            }),
        }
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
    fn a_permit_ticket_carries_hex_ids_and_prints_and_parses_back() {
        let one = "0123456789abcdef0123456789abcdef";
        let ticket = Ticket::new("sem:{jobs}", LockFormat::Semaphore, one).unwrap();
        assert_eq!(ticket.permits(), 1);
        let printed = ticket.to_string();
        assert_eq!(
            printed,
            format!("rl-ticket:v1:permit:-:sem%3A%7Bjobs%7D:{one}")
        );
        assert_eq!(printed.parse::<Ticket>().unwrap(), ticket);
        // Longer ids, and several as one hold.
        let many = format!("{one}00ff,{one}");
        let ticket = Ticket::new("jobs", LockFormat::Semaphore, &many).unwrap();
        assert_eq!(ticket.permits(), 2);
        assert_eq!(ticket.to_string().parse::<Ticket>().unwrap(), ticket);
        for bad in ["abc", "xy", "00,", "0123 4567"] {
            assert!(
                Ticket::new("k", LockFormat::Semaphore, bad).is_err(),
                "{bad}"
            );
        }
        assert!("rl-ticket:v1:permit:-:k:zz".parse::<Ticket>().is_err());
    }

    #[test]
    fn a_tickets_debug_does_not_show_its_value() {
        let ticket = Ticket::new("k", LockFormat::Reentrant, "secret-value").unwrap();
        let shown = format!("{ticket:?}");
        assert!(!shown.contains("secret-value"), "{shown}");
        assert!(shown.contains("Reentrant"), "{shown}");
    }

    #[test]
    fn a_ticket_prints_and_parses_back() {
        let odd = "lock:{a b}:\u{e9}%\n\"'";
        for fence in [None, Some(0), Some(u64::MAX)] {
            for format in [LockFormat::Token, LockFormat::Reentrant] {
                let mut ticket = Ticket::new(odd, format, "rl2:0123456789abcdef:1z+").unwrap();
                ticket.fence = fence;
                let printed = ticket.to_string();
                assert!(
                    printed.bytes().all(|b| plain(b) || b == b':' || b == b'%'),
                    "{printed}"
                );
                assert_eq!(printed.matches(':').count(), 5, "{printed}");
                let back: Ticket = format!(" {printed}\n").parse().unwrap();
                assert_eq!(back, ticket);
                assert_eq!(back.value(), "rl2:0123456789abcdef:1z+");
            }
        }
    }

    #[test]
    fn a_bad_printed_ticket_says_what_is_wrong() {
        let reason = |text: &str| match text.parse::<Ticket>() {
            Err(Error::Invalid { what, reason }) => {
                assert_eq!(what, "ticket");
                reason
            }
            other => panic!("{text}: {other:?}"),
        };
        assert!(reason("").contains("not a ticket"));
        assert!(reason("rl2:0123:1z").contains("not a ticket"));
        assert!(reason("rl-ticket:v2:token:-:k:v").contains("version"));
        assert!(reason("rl-ticket:v1:token:-:k").contains("expected"));
        assert!(reason("rl-ticket:v1:token:-:k:v:w").contains("expected"));
        assert!(reason("rl-ticket:v1:fair:-:k:v").contains("scheme"));
        assert!(reason("rl-ticket:v1:token:x1:k:v").contains("fence"));
        assert!(reason("rl-ticket:v1:token:99999999999999999999:k:v").contains("64 bits"));
        assert!(reason("rl-ticket:v1:token:-:k%4:v").contains("key"));
        assert!(reason("rl-ticket:v1:token:-:k:v%ZZ").contains("value"));
        assert!(reason("rl-ticket:v1:token:-:k:a b").contains("value"));
        assert!(reason("rl-ticket:v1:token:-:k:%FF").contains("value"));
        assert!(reason("rl-ticket:v1:token:-::v").contains("empty"));
    }

    #[test]
    fn a_tickets_debug_shows_its_fence_but_not_its_value() {
        let ticket = Ticket::new("k", LockFormat::Token, "secret-value")
            .unwrap()
            .with_fence(7);
        let shown = format!("{ticket:?}");
        assert!(
            !shown.contains("secret-value") && shown.contains('7'),
            "{shown}"
        );
    }
}
