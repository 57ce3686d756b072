//! A polling caller's look before it tries: one `GET` a node (see
//! [`look`](crate::scheme::token::look)), and a round of `SET`s only when a
//! majority looks free.
//!
//! One server's waiter polls with one `SET … NX GET`, which writes nothing while
//! the lock is held. A quorum's round of `SET`s writes on every free node, and a
//! round that misses the majority must take its value back there: two commands
//! on each free node a poll, for a lock that was never within reach. The look
//! writes nothing, so a caller that cannot reach a majority costs each node what
//! a caller of one server costs it.

use std::time::Duration;

use super::Redlock;
use super::answers::remaining;
use super::ballot::Vote;
use crate::metrics::bump;
use crate::net::connection::Conn;
use crate::scheme::Keys;
use crate::scheme::token::look::{Look, look};
use crate::topology::Attempt;

impl Redlock {
    /// Looks at `keys`' lock on every node at once, waiting for each at most the
    /// node timeout of a lease of `ttl`. `Some(busy)` when so many nodes hold it
    /// that no majority can be free, with how long the holders have left when
    /// the look learned it; `None` (try now) otherwise, failures included: the
    /// round that follows counts them as an acquire does.
    ///
    /// A look counts as an attempt: it is the poll one server's waiter makes
    /// with its `SET`.
    pub(super) fn look(&self, keys: &Keys, ttl: Duration) -> Option<Attempt> {
        bump(&self.counters.attempts, 1);
        let key = keys.lock.clone();
        let (count, answers) = self.quorum.ask(
            self.quorum.node_wait(Some(ttl)),
            move |c: &mut Conn| look(c, &key),
            |_, _| {},
            |a| match a {
                Ok(Look::Free) => Vote::Yes,
                Ok(Look::Held(_)) => Vote::No,
                Err(_) => Vote::Failed,
            },
            |c| c.won() || c.refused(),
        );
        if !count.refused() {
            return None;
        }
        let held = answers
            .iter()
            .filter_map(|a| match a {
                Ok(Look::Held(r)) => Some(*r),
                _ => None,
            })
            .collect();
        Some(Attempt::Busy {
            remaining: remaining(&count, held),
            announces: false,
        })
    }
}
