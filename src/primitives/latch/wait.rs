//! The latch's waits: woken by Redisson's channel and by the earliest end of a
//! participant's lease, never by a timer faster than the participant liveness.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use super::Latch;
use crate::error::{Error, Result};
use crate::owner::{ClientTag, Owner};
use crate::scheme::latch::{self as wire, channel};
use crate::threads::wait::Wake;

/// Looked at again this long after a lease's `PTTL` ends, so that the key is
/// surely gone by then.
const SLACK: Duration = Duration::from_millis(20);

/// What a look at the latch found.
enum State {
    /// The count reached zero (or the latch expired: Redisson reads 0).
    Done,
    /// A participant listed is gone: its owner.
    Died(Owner),
    /// Still counting: the earliest end of a live lease, when one has a TTL.
    Pending(Option<Duration>),
}

impl Latch {
    /// Waits until the count reaches zero.
    ///
    /// Wakes on Redisson's channel (through the client's pub/sub connection)
    /// and when the earliest participant lease would end, and at least once per
    /// participant liveness; never more often than the leases' `PTTL` says.
    ///
    /// # Errors
    /// [`Error::ParticipantDied`] as soon as a participant that joined is gone
    /// without counting down (at most the participant liveness after its last
    /// renewal, and a look); [`Error::Shutdown`] when the client is closed;
    /// Redis failures.
    pub fn wait(&self) -> Result<()> {
        self.wait_deadline(None).map(drop)
    }

    /// Waits at most `wait` for the count to reach zero: `Ok(true)` done,
    /// `Ok(false)` the time ran out first (Redisson's `await(time, unit)`).
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    pub fn wait_for(&self, wait: Duration) -> Result<bool> {
        self.wait_deadline(Instant::now().checked_add(wait))
    }

    /// Waits until `deadline` at most for the count to reach zero, as
    /// [`wait_for`](Self::wait_for).
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    pub fn wait_until(&self, deadline: Instant) -> Result<bool> {
        self.wait_deadline(Some(deadline))
    }

    fn wait_deadline(&self, deadline: Option<Instant>) -> Result<bool> {
        // Subscribed before the first look, so that no message after it is
        // missed (one before the confirmation: the confirmation wakes us).
        let wakes = self.client.subscribe(&[channel(&self.key)]);
        let never = crossbeam_channel::never();
        let rx: &Receiver<Wake> = wakes.as_ref().map_or(&never, |(_, rx)| rx);
        loop {
            let next = match self.state()? {
                State::Done => return Ok(true),
                State::Died(who) => {
                    return Err(Error::ParticipantDied {
                        key: self.key.clone(),
                        who: Box::new(who),
                    });
                }
                State::Pending(next) => next,
            };
            let now = Instant::now();
            let mut nap = next.map_or(self.liveness, |d| d + SLACK).min(self.liveness);
            if let Some(deadline) = deadline {
                if now >= deadline {
                    return Ok(false);
                }
                nap = nap.min(deadline - now);
            }
            select! {
                recv(rx) -> woke => match woke {
                    Ok(Wake::Shutdown) => return Err(Error::Shutdown),
                    Ok(_) => while rx.try_recv().is_ok() {},
                    // The client's waiter threads stopped: the next look
                    // finds the client closed, or Redis answers.
                    Err(_) => {
                        if self.client.inner.hub.shutdown.is_cancelled() {
                            return Err(Error::Shutdown);
                        }
                    }
                },
                default(nap) => {}
            }
        }
    }

    /// Reads the count and the participants, then each lease's `PTTL`. A lease
    /// found gone is checked against a second read: a participant counts down
    /// (and leaves the list) before it gives its lease back, so one still listed
    /// after its lease is gone did not count down.
    fn state(&self) -> Result<State> {
        let look = self.look()?;
        if finished(&look) {
            return Ok(State::Done);
        }
        let mut next: Option<Duration> = None;
        for (lease, token) in &look.participants {
            let mut cmd = redis::cmd("PTTL");
            cmd.arg(lease);
            let pttl = wire::int(&self.query(lease, &cmd)?)?.unwrap_or(-2);
            if pttl == -2 {
                let again = self.look()?;
                if finished(&again) {
                    return Ok(State::Done);
                }
                if again
                    .participants
                    .iter()
                    .any(|(l, t)| l == lease && t == token)
                {
                    return Ok(State::Died(self.owner(token)));
                }
            } else if let Ok(ms) = u64::try_from(pttl) {
                let ends = Duration::from_millis(ms);
                next = Some(next.map_or(ends, |n| n.min(ends)));
            }
        }
        Ok(State::Pending(next))
    }

    fn look(&self) -> Result<wire::Look> {
        let reply = self.query(&self.key, &wire::look_cmd(&self.key))?;
        Ok(wire::look(&reply)?)
    }

    /// Who the lease `token` named: its client's session record while it is
    /// there, else its tag; [`Owner::None`] for a token naming no client.
    fn owner(&self, token: &str) -> Owner {
        let Some(tag) = ClientTag::of_token(token) else {
            return Owner::None;
        };
        let record = tag.session_key(&self.client.inner.settings.key_prefix);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&record);
        let fields = self
            .query(&record, &cmd)
            .ok()
            .and_then(|r| redis::from_redis_value_ref::<HashMap<String, String>>(&r).ok());
        fields.map_or(Owner::Gone(tag), |f| Owner::from_record(tag, &f))
    }
}

/// Whether the latch is done: the record says so, or the count is gone or at
/// zero (Redisson's `getCount() == 0`).
fn finished(look: &wire::Look) -> bool {
    look.done || look.count.is_none_or(|c| c <= 0)
}
