//! A lease handed over as a [`Ticket`]: [`LockGuard::into_ticket`], which lets
//! go of it without releasing it, and [`LockClient::adopt`], which takes it over
//! (the token swapped for the adopter's, or a reentrant hold moved to the
//! adopting thread's owner field, in one script: `scheme/token/ticket.rs`,
//! `scheme/reentrant/ticket.rs`); and the adoption every format shares, which a
//! permit's (`primitives/semaphore/ticket.rs`) calls too.

use std::time::{Duration, Instant};

use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::client::ticket::Ticket;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::scheme::reentrant::ticket::{
    REENTRANT_ADOPT_SCRIPTS, adopter_field, reentrant_adopt_cmd,
};
use crate::scheme::token::new_token;
use crate::scheme::token::ticket::{ADOPT_SCRIPTS, Adopted, adopt_cmd, adopted};
use crate::scheme::{Keys, Scheme};
use crate::time::in_time;
use crate::topology::Scripts;

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
    /// key still holds the ticket's value and how long it has left, and stores
    /// a value of this client in its place (keeping that time). The guard
    /// returned is then this client's as if it had acquired the lock: renewed
    /// by its renewal thread with the client's TTL, reporting its loss,
    /// released when dropped; its fence is the ticket's, its validity what the
    /// lock had left from when the script was sent, less the drift allowance.
    /// With [liveness](crate::LockClientBuilder::liveness) on, the lease is tied
    /// to this client's session and its value names it.
    ///
    /// - A token lock (fenced or not, leaderships included): the ticket's token
    ///   (marked by a waiter or not) is swapped for a new token of this client.
    /// - A reentrant (Redisson-format) lock: the hash must hold the ticket's
    ///   owner field alone, counting one hold; that hold moves to the calling
    ///   thread's owner field (`<client uuid>:<thread id>`), so this thread may
    ///   lock the key again (nested, carrying the ticket's fence) while the
    ///   guard lives. A ticket whose owner
    ///   counts nested holds is refused ([`Error::Invalid`], nothing moved): one
    ///   guard releases one hold, and the others' guards are its holder's. A
    ///   ticket of the calling thread's own hold (let go of with
    ///   [`into_ticket`](LockGuard::into_ticket) on this thread, of this client)
    ///   is refused too: this thread holds it already, and adopting it would
    ///   make two guards of one hold; adopt it on another thread, or release it
    ///   with [`release_ticket`](Self::release_ticket).
    ///
    /// Because the value changes, a ticket can be adopted once: of two adopters
    /// of one ticket, exactly one gets a guard, and the other
    /// [`Error::LockLost`]; the old ticket no longer releases the lock either.
    /// The ticket's key is used as it is, whatever this client's prefix. One
    /// round trip, bounded by the client's timeouts. A permit's ticket is
    /// adopted by [`adopt_permit`](Self::adopt_permit).
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock expired, was released, or holds another
    /// value (taken over, or adopted already): no guard, nothing written.
    /// [`Error::Invalid`] for a permit's ticket, a reentrant one with nested
    /// holds or of this thread's own hold; [`Error::Unsupported`] on a Redlock
    /// quorum (a ticket names one server's key); [`Error::Redis`] when the
    /// script could not be sent or got no answer in time (it may have landed: a
    /// token lock's new value is then removed in the background, and the lock is
    /// free again; a reentrant hold is left to its TTL, as a lost acquire's
    /// is); [`Error::Shutdown`] when the client is [closed](Self::close).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use redlease::{LockOptions, Scheme};
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let ticket = client.lock("report")?.into_ticket()?;
    /// let guard = client.adopt(&ticket)?;
    /// assert!(matches!(client.adopt(&ticket), Err(redlease::Error::LockLost { .. })));
    /// guard.unlock()?;
    ///
    /// // A Redisson-format lock, handed to another thread.
    /// let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    /// let ticket = client.lock_with("report", &reentrant)?.expect("waits").into_ticket()?;
    /// let guard = std::thread::scope(|s| s.spawn(|| client.adopt(&ticket)).join())
    ///     .expect("no panic")?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn adopt(&self, ticket: &Ticket) -> Result<LockGuard> {
        let invalid = |reason| Error::Invalid {
            what: "ticket",
            reason,
        };
        match ticket.format() {
            LockFormat::Token => {
                let token = new_token(self.inner.id.tag());
                let cmd = adopt_cmd(ticket.key(), ticket.value(), &token);
                let opts = LockOptions::new().scheme(Scheme::Token);
                self.adopt_lease(ticket, &opts, token, (&ADOPT_SCRIPTS, || cmd))
            }
            LockFormat::Reentrant => {
                let field = adopter_field(&self.inner.id);
                if field == ticket.value() {
                    return Err(invalid(
                        "the ticket names this thread's own reentrant hold: adopt it on another thread",
                    ));
                }
                let cmd = reentrant_adopt_cmd(ticket.key(), ticket.value(), &field);
                let opts = LockOptions::new().scheme(Scheme::Reentrant);
                self.adopt_lease(ticket, &opts, field, (&REENTRANT_ADOPT_SCRIPTS, || cmd))
            }
            _ => Err(invalid(
                "a permit's ticket is adopted with `LockClient::adopt_permit`",
            )),
        }
    }

    /// The adoption every format shares: the command `cmd` makes (right before
    /// it is sent), a call of one of `scripts`, checks the ticket's lease and
    /// puts `value` (this client's) in its place, answering as [`adopted`]
    /// reads; the lease is then stored by the backend `opts` names, and its
    /// guard returned.
    pub(crate) fn adopt_lease(
        &self,
        ticket: &Ticket,
        opts: &LockOptions,
        value: String,
        (scripts, cmd): (Scripts, impl FnOnce() -> redis::Cmd),
    ) -> Result<LockGuard> {
        let hub = &self.inner.hub;
        if hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        hub.topology.holds("an adopted ticket")?;
        let mut plan = self.plan(opts)?;
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
        // A reentrant hold moved to this thread is not taken back later: the
        // thread may lock the key again meanwhile (as after a lost acquire).
        let give_back = !plan.backend.reentrant();
        let cmd = cmd();
        let sent = Instant::now();
        let reply = match hub.topology.query(&keys.lock, scripts, &cmd) {
            Ok(reply) => reply,
            Err(e) => {
                // The swap may have landed: nobody would renew or release it.
                if give_back {
                    let until = Instant::now() + plan.ttl.max(Duration::from_secs(1));
                    let backend = std::sync::Arc::clone(&plan.backend);
                    hub.topology
                        .release_later(backend, keys.clone(), value, until);
                }
                let limits = hub.topology.subscriber(0).limits();
                return Err(e.during(Operation::Acquire, &keys.lock, limits));
            }
        };
        let left = match adopted(&reply) {
            Adopted::Left(ms) => Duration::from_millis(ms),
            Adopted::Gone | Adopted::Taken => return Err(lost()),
            Adopted::Nested => {
                return Err(Error::Invalid {
                    what: "ticket",
                    reason: "its reentrant owner holds the lock more than once (nested): one guard cannot carry the holds",
                });
            }
        };
        if !in_time(sent, left) {
            // Swapped, but with too little left to be ours: given back.
            if give_back {
                let backend = std::sync::Arc::clone(&plan.backend);
                hub.topology
                    .release_later(backend, keys, value, Instant::now() + left);
            }
            return Err(lost());
        }
        plan.backend.adopted(&keys.lock, &value, ticket.fence());
        let guard = self.guard_left(&plan, keys, value, (sent, left), ticket.fence());
        let guard = guard.release_in_background(plan.background);
        self.unless_stopped(Some(guard))?.ok_or(Error::Shutdown)
    }
}
