//! A permit handed over as a [`Ticket`]: [`LockClient::adopt_permit`] and
//! [`LockClient::adopt_permits`], which take it over (its ids swapped for the
//! adopter's in one script, `scheme/semaphore/ticket.rs`). The tickets are made
//! by the permit guards (`held.rs`), and released and extended as a lock's
//! (`client/ticket.rs`).

use crate::client::LockClient;
use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::client::ticket::Ticket;
use crate::error::{Error, Result};
use crate::format::LockFormat;
use crate::primitives::held::{PermitGuard, PermitsGuard};
use crate::scheme::semaphore::ticket::{
    PERMIT_ADOPT_SCRIPTS, adopter_ids, permit_adopt_cmd, permit_ids,
};

impl LockClient {
    /// Takes over the permit a [`Ticket`] names (made by
    /// [`PermitGuard::ticket`] or [`into_ticket`](PermitGuard::into_ticket)):
    /// checks, in one script, that the semaphore's expiry set still holds the
    /// ticket's permit id with its lease not yet over, and puts a new id of this
    /// client in its place with the same expiry (the count of free permits is
    /// not touched, so no more permits are held than before). The guard
    /// returned is then this client's as if it had acquired the permit: renewed
    /// with the client's TTL, reporting its loss, given back (and the count
    /// published) when dropped. With
    /// [liveness](crate::LockClientBuilder::liveness) on, the permit is tied to
    /// this client's session and its new id names it.
    ///
    /// Because the id changes, a ticket can be adopted once: of two adopters of
    /// one ticket, exactly one gets a guard, and the other
    /// [`Error::LockLost`]; the old ticket no longer releases the permit
    /// either. The ids are read as hex, whatever their length. The ticket's key
    /// is used as it is, whatever this client's prefix. One round trip, bounded
    /// by the client's timeouts.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the permit was given back, released by id or
    /// its lease ended (adopted already, too): no guard, nothing written.
    /// [`Error::Invalid`] for a lock's ticket (see [`adopt`](Self::adopt)), or
    /// a ticket of several permits (see [`adopt_permits`](Self::adopt_permits));
    /// [`Error::Unsupported`] on a Redlock quorum; [`Error::Redis`] when the
    /// script could not be sent or got no answer in time (it may have landed:
    /// the new id is then given back in the background); [`Error::Shutdown`]
    /// when the client is [closed](Self::close).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// imports.ensure_permits(3)?;
    /// let ticket = imports.acquire()?.into_ticket()?;
    /// std::fs::write("/run/import.ticket", ticket.to_string())?;
    /// // ... later, in another process:
    /// let ticket: redlease::Ticket = std::fs::read_to_string("/run/import.ticket")?.parse()?;
    /// let permit = client.adopt_permit(&ticket)?;
    /// assert!(matches!(client.adopt_permit(&ticket), Err(redlease::Error::LockLost { .. })));
    /// permit.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn adopt_permit(&self, ticket: &Ticket) -> Result<PermitGuard> {
        if ticket.permits() != 1 {
            return Err(Error::Invalid {
                what: "ticket",
                reason: "a ticket of several permits is adopted with `LockClient::adopt_permits`",
            });
        }
        self.adopt_permit_lease(ticket).map(PermitGuard::from)
    }

    /// Takes over the permits a [`Ticket`] of a hold of several names (made by
    /// [`PermitsGuard::ticket`] or [`into_ticket`](PermitsGuard::into_ticket)),
    /// all or none, as [`adopt_permit`](Self::adopt_permit) takes one: every id
    /// must still be held within its lease, and each is swapped for a new id of
    /// this client with its expiry, in one script. The [`PermitsGuard`]
    /// returned renews and gives them back together. A ticket of one permit is
    /// taken too (a hold of one).
    ///
    /// # Errors
    /// As [`adopt_permit`](Self::adopt_permit): [`Error::LockLost`] when one of
    /// the permits is no longer held (nothing written).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let imports = client.semaphore("imports")?;
    /// imports.ensure_permits(8)?;
    /// let ticket = imports.acquire_many(3)?.into_ticket()?;
    /// let held = client.adopt_permits(&ticket)?;
    /// assert_eq!(held.permits(), 3);
    /// held.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn adopt_permits(&self, ticket: &Ticket) -> Result<PermitsGuard> {
        self.adopt_permit_lease(ticket).map(PermitsGuard::from)
    }

    /// The adoption of a permit ticket's ids, as a lease of the semaphore
    /// backend for its number of permits.
    fn adopt_permit_lease(&self, ticket: &Ticket) -> Result<LockGuard> {
        let invalid = |reason| Error::Invalid {
            what: "ticket",
            reason,
        };
        if ticket.format() != LockFormat::Semaphore {
            return Err(invalid(
                "a lock's ticket is adopted with `LockClient::adopt`",
            ));
        }
        let old = permit_ids(ticket.value()).ok_or(invalid("a permit id is not hex"))?;
        let value = adopter_ids(&self.inner.id, old.len());
        let new = permit_ids(&value).ok_or(invalid("a permit id is not hex"))?;
        let mut opts = LockOptions::new();
        opts.backend = Some(self.ticket_backend(ticket)?);
        let key = ticket.key();
        let cmd = move || permit_adopt_cmd(key, &old, &new);
        self.adopt_lease(ticket, &opts, value, (&PERMIT_ADOPT_SCRIPTS, cmd))
    }
}
