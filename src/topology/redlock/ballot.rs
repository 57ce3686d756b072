//! Counting a quorum's answers: the majority rule every Redlock call follows
//! ([`Count`]), and the [`Ballot`] that combines one renewal tick's answers from
//! every node without a thread of its own.
//!
//! A renewal tick asks every node at once; each node's I/O thread counts its
//! replies into the tick's ballot as soon as it has them. A lease is decided by
//! the reply that settles it — the one that makes a majority, or the one after
//! which no majority is possible — on whichever node thread brings it, and its
//! answer goes to the renewal thread at once. So a frozen node delays no lease a
//! majority has answered for, and the renewal thread never waits on anyone.

use std::time::Instant;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::lease::LossReason;
use crate::topology::Renewed;
use crate::topology::io::batch::{Flight, Reply};

/// The majority of `n` nodes.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// How one node's answer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// Granted: acquired, released, extended.
    Yes,
    /// A definite no: held by someone else, or gone.
    No,
    /// An error or no answer: either may be true.
    Failed,
}

/// The answers of `n` nodes to one question, so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count {
    pub(crate) n: usize,
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
}

impl Count {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            n,
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    pub(crate) fn add(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Failed => self.failed += 1,
        }
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.n)
    }

    /// Nodes that have not answered yet.
    pub(crate) fn pending(&self) -> usize {
        self.n - self.yes - self.no - self.failed
    }

    /// A majority said yes.
    pub(crate) fn won(&self) -> bool {
        self.yes >= self.quorum()
    }

    /// A majority can no longer say yes.
    pub(crate) fn lost(&self) -> bool {
        self.yes + self.pending() < self.quorum()
    }

    /// So many said no that no majority can have said yes, whatever the failures
    /// hide: the answer is a definite no.
    pub(crate) fn refused(&self) -> bool {
        self.no + self.quorum() > self.n
    }

    /// An acquire may stop listening: won, or lost with enough answers to call it
    /// busy (`yes + no` a majority: someone else may hold a majority). A failure
    /// waits for every node (or the node timeout), so its error names them all.
    pub(crate) fn acquire_settled(&self) -> bool {
        self.won() || (self.lost() && self.answered_live())
    }

    /// The nodes that answered yes or no are a majority.
    pub(crate) fn answered_live(&self) -> bool {
        self.yes + self.no >= self.quorum()
    }

    /// The nodes that failed or have not answered are a majority: after a
    /// delete, our value may still be on a majority of nodes.
    pub(crate) fn may_hold(&self) -> bool {
        self.failed + self.pending() >= self.quorum()
    }
}

/// One renewal tick of leases held on a quorum, counted as the nodes answer.
pub(crate) struct Ballot {
    nodes: usize,
    /// Taken before any node was asked: validity counts from here.
    sent: Instant,
    done: Sender<Vec<(u64, Renewed)>>,
    seats: Mutex<Vec<Seat>>,
}

/// One lease's place in the ballot; its mutex is held until it is decided.
struct Seat {
    flight: Option<Flight>,
    count: Count,
    taken: bool,
}

impl Ballot {
    /// A ballot over `nodes` nodes for `flights` (mutexes held), whose renewals are
    /// sent after `sent`; answers go to `done`.
    pub(crate) fn new(
        nodes: usize,
        sent: Instant,
        flights: Vec<Flight>,
        done: Sender<Vec<(u64, Renewed)>>,
    ) -> Self {
        let seats = flights
            .into_iter()
            .map(|f| Seat {
                flight: Some(f),
                count: Count::new(nodes),
                taken: false,
            })
            .collect();
        Self {
            nodes,
            sent,
            done,
            seats: Mutex::new(seats),
        }
    }

    /// Counts one node's replies, one per lease in order, and answers every lease
    /// they settle. Each node counts exactly once.
    pub(crate) fn count(&self, replies: &[Reply]) {
        let mut answers = Vec::new();
        {
            let mut seats = self.seats.lock();
            for (seat, reply) in seats.iter_mut().zip(replies) {
                if seat.flight.is_none() {
                    continue;
                }
                seat.count.add(match reply {
                    Reply::Extended => Vote::Yes,
                    Reply::Gone | Reply::Taken => Vote::No,
                    Reply::Error | Reply::Unanswered => Vote::Failed,
                });
                seat.taken |= *reply == Reply::Taken;
                if let Some(outcome) = verdict(&seat.count, seat.taken, self.sent) {
                    let Some(flight) = seat.flight.take() else {
                        continue;
                    };
                    answers.push((flight.id, settle(&flight, outcome)));
                    // Dropping the flight lets the lease's release or extend run.
                }
            }
        }
        if !answers.is_empty() {
            // The renewal thread may be gone (client dropped): nobody to tell.
            let _ = self.done.send(answers);
        }
    }
}

impl std::fmt::Debug for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ballot")
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// What a lease's count says, once it says anything: extended by a majority, or
/// not, and then why — a majority found the key gone or someone else's, or too
/// many nodes failed to tell.
fn verdict(count: &Count, taken: bool, sent: Instant) -> Option<Renewed> {
    if count.won() {
        return Some(Renewed::Extended { sent });
    }
    if !count.lost() {
        return None;
    }
    let reason = match (count.refused(), taken) {
        (true, true) => LossReason::Taken,
        (true, false) => LossReason::Expired,
        (false, _) => LossReason::Unreachable,
    };
    Some(Renewed::Lost(reason))
}

/// Applies a decided outcome to its lease, the lease's mutex held. A majority that
/// answered after the lease's validity ended is too late to count: the lease had a
/// moment without the lock, and its loss is reported by the renewal thread.
fn settle(flight: &Flight, outcome: Renewed) -> Renewed {
    let Renewed::Extended { sent } = outcome else {
        return outcome;
    };
    let state = &flight.state;
    if state.is_lost() || Instant::now() >= state.valid_until() {
        return Renewed::Failed;
    }
    state.renewed(sent, flight.ttl);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(n: usize, votes: &[Vote]) -> Count {
        let mut c = Count::new(n);
        for &v in votes {
            c.add(v);
        }
        c
    }

    use Vote::{Failed as F, No as N, Yes as Y};

    #[test]
    fn a_quorum_is_a_strict_majority() {
        let q: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(q, [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn a_majority_of_yes_wins_before_everyone_answered() {
        assert!(count(5, &[Y, Y, Y]).won());
        assert!(!count(5, &[Y, Y]).won());
        assert!(count(3, &[Y, F, Y]).won());
    }

    #[test]
    fn the_vote_is_lost_once_no_majority_is_possible() {
        assert!(!count(5, &[Y, N, F]).lost(), "two may still say yes");
        assert!(count(5, &[Y, N, F, N]).lost());
        assert!(count(5, &[F, F, F]).lost());
    }

    #[test]
    fn refusal_needs_a_majority_of_definite_noes() {
        assert!(count(5, &[N, N, N]).refused());
        assert!(!count(5, &[N, N, F, F, Y]).refused());
        assert!(count(4, &[N, N]).refused(), "two of four: no majority left");
    }

    #[test]
    fn an_acquire_settles_early_as_won_or_busy_only_when_more_answers_cannot_change_it() {
        // Two busy and a failure of five: the last two could be busy (busy) or
        // failed (failure) — wait for them.
        let c = count(5, &[N, N, F]);
        assert!(c.lost() && !c.acquire_settled());
        assert!(count(5, &[N, N, F, N]).acquire_settled(), "busy");
        assert!(
            !count(5, &[F, F, F]).acquire_settled(),
            "failures wait for all"
        );
        assert!(count(5, &[Y, Y, Y]).acquire_settled(), "won");
        assert!(
            !count(5, &[Y, N, N, Y]).acquire_settled(),
            "the last may say yes"
        );
        assert!(count(5, &[Y, N, N, N]).acquire_settled(), "busy: four live");
    }

    #[test]
    fn a_release_may_still_hold_only_while_a_majority_failed_or_is_silent() {
        // Two masters of five dead, the three live ones answered.
        assert!(!count(5, &[Y, Y, N, F, F]).may_hold());
        assert!(!count(5, &[Y, N, N, F, F]).may_hold());
        assert!(count(5, &[Y, Y, F, F, F]).may_hold(), "three failed");
        assert!(count(5, &[Y, Y, F, F]).may_hold(), "one not answered");
    }

    #[test]
    fn a_renewal_verdict_names_why_the_majority_was_missed() {
        let at = Instant::now();
        assert_eq!(
            verdict(&count(3, &[Y, Y]), false, at),
            Some(Renewed::Extended { sent: at })
        );
        assert_eq!(verdict(&count(3, &[Y, F]), false, at), None);
        assert_eq!(
            verdict(&count(3, &[N, N]), true, at),
            Some(Renewed::Lost(LossReason::Taken))
        );
        assert_eq!(
            verdict(&count(3, &[N, Y, N]), false, at),
            Some(Renewed::Lost(LossReason::Expired))
        );
        assert_eq!(
            verdict(&count(5, &[Y, F, N, F]), false, at),
            Some(Renewed::Lost(LossReason::Unreachable))
        );
    }
}
