//! A lease handed over as a [`Ticket`]: [`LockGuard::into_ticket`], which lets
//! go of it without releasing it, and [`LockClient::adopt`], which takes it over
//! (the token swapped for the adopter's in one script, see
//! `scheme/token/ticket.rs`).

use std::time::{Duration, Instant};

use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::client::ticket::Ticket;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::scheme::token::new_token;
use crate::scheme::token::ticket::{ADOPT_SCRIPTS, Adopted, adopt_cmd, adopted};
use crate::scheme::{Keys, Scheme};
use crate::time::in_time;

use super::LockClient;

impl LockGuard {
    /// Lets go of the lease without releasing it, and returns its [`Ticket`]:
    /// the lock stays held until its TTL runs out, unless a process (this one,
    /// a later step of the job, another host) [adopts](LockClient::adopt) the
    /// ticket first, or [releases](LockClient::release_ticket) it. Nothing is
    /// sent; the renewal thread stops renewing the lease, and the guard reports
    /// no loss for it.
    ///
    /// The lease has what is left of its TTL (the last renewal's): extend it
    /// first ([`extend`](Self::extend)) for a longer hand-over.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a lease that cannot be handed over by value (see
    /// [`ticket`](Self::ticket): a legacy timestamp or fair lock, or one inside
    /// its minimum hold; `ticket()` says so beforehand);
    /// [`Error::LockLost`] for a lease no longer held. In both cases the guard
    /// is dropped, which releases what it still holds. [`Error::Shutdown`] when
    /// the client's [`shutdown`](LockClient::shutdown) released the lease first.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let ticket = client.lock("nightly-report")?.into_ticket()?;
    /// std::fs::write("/run/report.ticket", ticket.to_string())?;
    /// // ... later, in another process:
    /// let ticket: redlease::Ticket = std::fs::read_to_string("/run/report.ticket")?.parse()?;
    /// let guard = client.adopt(&ticket)?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn into_ticket(mut self) -> Result<Ticket> {
        let Some(ticket) = self.ticket() else {
            return Err(Error::Invalid {
                what: "lock guard",
                reason: "this lease cannot be handed over as a ticket (see `LockGuard::ticket`)",
            });
        };
        if !self.is_held() {
            return Err(Error::LockLost {
                key: self.key().into(),
            });
        }
        // The guard's drop sends nothing from here on, and the lease marked
        // released is dropped by the renewal thread unrenewed.
        let (_, state) = self.take_release().ok_or(Error::Shutdown)?;
        match state.take_value() {
            Some(_) => Ok(ticket),
            None => Err(Error::Shutdown),
        }
    }
}

impl LockClient {
    /// Takes over the lease a [`Ticket`] names: checks, in one script, that its
    /// key still holds the ticket's value (marked by a waiter or not) and how long
    /// it has left, and stores a new value of this client in its place (keeping
    /// that time). The guard returned is then this client's as if it had
    /// acquired the lock: renewed by its renewal thread with the client's TTL,
    /// reporting its loss, released when dropped; its fence is the ticket's, its
    /// validity what the lock had left from when the script was sent, less the
    /// drift allowance. With [liveness](crate::LockClientBuilder::liveness) on,
    /// the lease is tied to this client's session and its value names it.
    ///
    /// Because the value changes, a ticket can be adopted once: of two adopters
    /// of one ticket, exactly one gets a guard, and the other
    /// [`Error::LockLost`]; the old ticket no longer releases the lock either.
    /// The ticket's key is used as it is, whatever this client's prefix. One
    /// round trip, bounded by the client's timeouts.
    ///
    /// Token locks only (fenced or not, leaderships included): a reentrant lock's
    /// owner field names its holder's thread, and a lease held by several threads
    /// of one Redisson client has no one owner to move.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock expired, was released, or holds another
    /// value (taken over, or adopted already): no guard, nothing written.
    /// [`Error::Invalid`] for a reentrant ticket; [`Error::Unsupported`] on a
    /// Redlock quorum (a ticket names one server's key); [`Error::Redis`] when
    /// the script could not be sent or got no answer in time (it may have
    /// landed: the new value is then removed in the background, and the lock is
    /// free again); [`Error::Shutdown`] when the client is
    /// [closed](Self::close).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let ticket = client.lock("report")?.into_ticket()?;
    /// let guard = client.adopt(&ticket)?;
    /// assert!(matches!(client.adopt(&ticket), Err(redlease::Error::LockLost { .. })));
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn adopt(&self, ticket: &Ticket) -> Result<LockGuard> {
        let hub = &self.inner.hub;
        if hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        if ticket.format() != LockFormat::Token {
            return Err(Error::Invalid {
                what: "ticket",
                reason: "only a token lock's ticket can be adopted",
            });
        }
        hub.topology.holds("an adopted ticket")?;
        let mut plan = self.plan(&LockOptions::new().scheme(Scheme::Token))?;
        // A minimum hold counts from an acquisition, which this is not.
        plan.min_hold = None;
        let keys = Keys::new("", ticket.key(), &*plan.backend)?;
        let lost = || Error::LockLost {
            key: ticket.key().into(),
        };
        // The new value names this client's session: its record must exist
        // before, or a waiter could take the session for a dead one.
        if let Some(live) = &self.inner.liveness {
            live.wait_ready(Instant::now() + 2 * hub.topology.read_timeout());
        }
        let token = new_token(self.inner.id.tag());
        let cmd = adopt_cmd(&keys.lock, ticket.value(), &token);
        let sent = Instant::now();
        let reply = match hub.topology.query(&keys.lock, &ADOPT_SCRIPTS, &cmd) {
            Ok(reply) => reply,
            Err(e) => {
                // The swap may have landed: nobody would renew or release it.
                let until = Instant::now() + plan.ttl.max(Duration::from_secs(1));
                let backend = std::sync::Arc::clone(&plan.backend);
                hub.topology
                    .release_later(backend, keys.clone(), token, until);
                let limits = hub.topology.subscriber(0).limits();
                return Err(e.during(Operation::Acquire, &keys.lock, limits));
            }
        };
        let left = match adopted(&reply) {
            Adopted::Left(ms) => Duration::from_millis(ms),
            Adopted::Gone | Adopted::Taken => return Err(lost()),
        };
        if !in_time(sent, left) {
            // Swapped, but with too little left to be ours: given back.
            let backend = std::sync::Arc::clone(&plan.backend);
            hub.topology
                .release_later(backend, keys, token, Instant::now() + left);
            return Err(lost());
        }
        let guard = self.guard_left(&plan, keys, token, (sent, left), ticket.fence());
        let guard = guard.release_in_background(plan.background);
        self.unless_stopped(Some(guard))?.ok_or(Error::Shutdown)
    }
}
