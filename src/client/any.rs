//! One name out of several: [`LockClient::lock_any`] and its family.
//!
//! A try looks for the first free name of the list from a random offset (so a
//! fleet taking one of N spreads over the N rather than piling onto the first).
//! Where the names share a node (one server, or one Redis Cluster slot) one
//! script looks at every key and takes the first free one (`scheme/token/any.rs`);
//! on a cluster whose names fall in several slots, one such script per slot, in
//! the order of the slots' first names from the offset; on a Redlock quorum,
//! one quorum attempt per name. When every name is held the caller waits, holding
//! nothing, for a release message on any of the names' channels (one
//! [`Watcher`] over all of them), a polling step, or the soonest end of a
//! holder's TTL, then tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::any_guard::AnyGuard;
use crate::client::guard::LockGuard;
use crate::client::options::LockOptions;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::metrics::bump;
use crate::scheme::token::all::found;
use crate::scheme::token::any::{ANY_SCRIPTS, AnyReply, acquire_any_cmd, acquire_any_reply};
use crate::scheme::{Keys, Request, Scheme, Waiting, new_token};
use crate::threads::cancel::CancelToken;
use crate::threads::wait::{Heard, Watcher};
use crate::topology::Attempt;

use super::LockClient;
use super::min_hold::stored_ttl;
use super::plan::Plan;

/// What one try over the names found.
enum Found {
    /// The name at this index (in the order given) is ours.
    Got(usize, LockGuard),
    /// Every name is held; the soonest holder's TTL ends within this.
    Busy(Option<Duration>),
}

impl LockClient {
    /// Acquires the lock on one of `names`, whichever is free first, waiting as
    /// long as it takes; the guard says which ([`AnyGuard::index`],
    /// [`AnyGuard::name`]).
    ///
    /// Each try looks at the names from a random offset, so callers taking one of
    /// N slots spread over them. On one server, and in a Redis Cluster when the
    /// names share a slot (a hash tag: `{import}:0`, `{import}:1`), one script
    /// looks at every name and takes the first free one: one round trip. In a
    /// cluster whose names fall in several slots, one script per slot, until one
    /// has a free name; on a Redlock quorum, one quorum attempt per name. When all
    /// are held the call holds nothing and waits for a release of any of them
    /// (the release messages of every name's channel, a polling step for holders
    /// that do not publish, never past the soonest holder's TTL), then tries again.
    ///
    /// Token locks only. The name taken gets a lease renewed in the background,
    /// with that name's own fence when fencing is on.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty list, an empty name or a name given twice;
    /// [`Error::WrongFormat`] when a name's key holds another type than a token
    /// lock's string (found on the one-script path); [`Error::Unsupported`] for a
    /// scheme other than [`Scheme::Token`] or replica confirmation; otherwise as
    /// [`lock`](Self::lock).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let slots = ["{importer}:0", "{importer}:1", "{importer}:2"];
    /// let slot = client.lock_any(&slots)?;
    /// println!("importing shard {} of {}", slot.index(), slots.len());
    /// # Ok(()) }
    /// ```
    pub fn lock_any<S: AsRef<str>>(&self, names: &[S]) -> Result<AnyGuard> {
        let got = self.acquire_any(names, &LockOptions::default(), None, false)?;
        // Without a deadline the wait ends only in a guard or an error.
        got.ok_or(Error::Shutdown)
    }

    /// Makes one try at the names; never waits. `Ok(None)` when every one of
    /// them is held by someone else.
    ///
    /// # Errors
    /// As [`lock_any`](Self::lock_any).
    pub fn try_lock_any<S: AsRef<str>>(&self, names: &[S]) -> Result<Option<AnyGuard>> {
        self.acquire_any(names, &LockOptions::default(), None, true)
    }

    /// Acquires one of `names`, waiting at most `wait`; `Ok(None)` when the
    /// wait ran out with every one of them still held.
    ///
    /// # Errors
    /// As [`lock_any`](Self::lock_any).
    pub fn try_lock_any_for<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: Duration,
    ) -> Result<Option<AnyGuard>> {
        let deadline = Instant::now().checked_add(wait);
        self.acquire_any(names, &LockOptions::default(), deadline, false)
    }

    /// Acquires one of `names` with per-call options (TTL, fencing, renewal,
    /// wait or deadline, cancel, `on_lost`).
    ///
    /// Waits per [`LockOptions::wait`] / [`LockOptions::deadline`] (no bound when
    /// neither is set, and then never returns `Ok(None)`); can be cancelled
    /// through [`LockOptions::cancel`].
    ///
    /// # Errors
    /// As [`lock_any`](Self::lock_any); [`Error::Config`] for an out-of-range
    /// option; [`Error::Cancelled`] when the wait was cancelled.
    pub fn lock_any_with<S: AsRef<str>>(
        &self,
        names: &[S],
        opts: &LockOptions,
    ) -> Result<Option<AnyGuard>> {
        let deadline = opts.deadline_from(Instant::now());
        let once = deadline.is_some_and(|d| d <= Instant::now());
        self.acquire_any(names, opts, deadline, once)
    }

    fn acquire_any<S: AsRef<str>>(
        &self,
        names: &[S],
        opts: &LockOptions,
        deadline: Option<Instant>,
        once: bool,
    ) -> Result<Option<AnyGuard>> {
        let plan = self.plan(opts)?;
        let keys = self.all_keys(names, &plan)?;
        let scheme = opts.scheme.as_ref().unwrap_or(&self.inner.settings.scheme);
        if *scheme != Scheme::Token || opts.backend.is_some() {
            return Err(Error::Unsupported {
                what: "one of several names of this scheme",
                by: "lock_any (token locks only)",
            });
        }
        if plan.replicas.is_some() {
            return Err(Error::Unsupported {
                what: "one of several names with replica confirmation",
                by: "lock_any",
            });
        }
        let hub = &*self.inner.hub;
        let cancel = opts.cancel.as_ref();
        let channels: Vec<String> = keys.iter().map(|k| k.channel.clone()).collect();
        let mut watcher = Watcher::new(hub, self.inner.waiters.as_ref(), cancel);
        loop {
            if hub.shutdown.is_cancelled() {
                return Err(Error::Shutdown);
            }
            if cancel.is_some_and(CancelToken::is_cancelled) {
                return Err(Error::Cancelled {
                    key: keys[0].lock.as_str().into(),
                });
            }
            let will_wait = !once && deadline.is_none_or(|d| d > Instant::now());
            let start = fastrand::usize(..keys.len());
            let tried = self.try_any(&plan, &keys, start, will_wait).map_err(|e| {
                let limits = hub.topology.subscriber(0).limits();
                e.during(Operation::Acquire, &keys[0].lock, limits)
            })?;
            let remaining = match tried {
                Found::Got(i, guard) => {
                    let name = names[i].as_ref().to_owned();
                    return Ok(Some(AnyGuard::new(i, name, guard)));
                }
                Found::Busy(remaining) => remaining,
            };
            if !will_wait || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            // Listening from now on: when the channels are new, their
            // confirmation wakes the watcher, and the next try covers a release
            // between this try and the subscription.
            watcher.listen(&channels);
            let step = if watcher.hears() {
                watcher.longest_step()
            } else {
                watcher.step()
            };
            // A holder that never publishes is waited out by its TTL at most.
            let step = remaining.map_or(step, |r| step.min(r + Duration::from_millis(1)));
            let until = Instant::now() + step;
            if watcher.sleep(deadline.map_or(until, |d| d.min(until))) == Heard::Shutdown {
                return Err(Error::Shutdown);
            }
        }
    }

    /// One try over `keys` from `start`: one script per node (slot) where the
    /// topology runs scripts, else one quorum attempt per key.
    fn try_any(&self, plan: &Plan, keys: &[Keys], start: usize, mark: bool) -> Result<Found> {
        let topology = &self.inner.hub.topology;
        // Releases of these names this client queued land first (see
        // `LockClientBuilder::release_in_background`).
        let by = Instant::now() + topology.read_timeout();
        for k in keys {
            self.inner.hub.queued.settle(&k.lock, by);
        }
        let n = keys.len();
        let order = (start..n).chain(0..start);
        let mut soonest: Option<Duration> = None;
        let mut note = |r: Option<Duration>| {
            soonest = match (soonest, r) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        if !topology.one_step(&[keys[0].lock.as_str()]) {
            for i in order {
                match self.try_one(plan, &keys[i], mark)? {
                    Found::Got(_, guard) => return Ok(Found::Got(i, guard)),
                    Found::Busy(r) => note(r),
                }
            }
            return Ok(Found::Busy(soonest));
        }
        // The names grouped by slot, each group in the order from `start`.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in order {
            let lock = keys[i].lock.as_str();
            match groups
                .iter_mut()
                .find(|g| topology.one_step(&[keys[g[0]].lock.as_str(), lock]))
            {
                Some(g) => g.push(i),
                None => groups.push(vec![i]),
            }
        }
        for group in groups {
            match self.try_group(plan, keys, &group, mark)? {
                Found::Got(j, guard) => return Ok(Found::Got(group[j], guard)),
                Found::Busy(r) => note(r),
            }
        }
        Ok(Found::Busy(soonest))
    }

    /// One script over the keys `group` (sharing a node) from its first.
    fn try_group(&self, plan: &Plan, keys: &[Keys], group: &[usize], mark: bool) -> Result<Found> {
        let hub = &*self.inner.hub;
        let value = new_token(self.inner.id.tag());
        let locks: Vec<&str> = group.iter().map(|&i| keys[i].lock.as_str()).collect();
        let fences: Vec<String> = if plan.fence {
            group
                .iter()
                .map(|&i| hub.topology.fence_of(&keys[i]))
                .collect()
        } else {
            Vec::new()
        };
        let ttl = stored_ttl(plan.ttl, plan.min_hold);
        let cmd = acquire_any_cmd(&locks, &fences, &value, ttl, mark, 0);
        bump(&hub.counters.attempts, 1);
        let sent = Instant::now();
        let reply = hub
            .topology
            .query(locks[0], &ANY_SCRIPTS, &cmd)
            .and_then(|v| Ok(acquire_any_reply(&v, group.len(), plan.fence)?));
        match reply {
            Ok(AnyReply::Acquired { index, fence }) => {
                let k = &keys[group[index]];
                if self.late(plan, k, &value, sent) {
                    return Ok(Found::Busy(None));
                }
                let guard = self.guard_for(plan, k.clone(), value, sent, fence);
                Ok(Found::Got(index, guard))
            }
            Ok(AnyReply::Busy { remaining }) => Ok(Found::Busy(remaining)),
            Ok(AnyReply::Other { index, kind }) => Err(Error::wrong_format(
                &keys[group[index]].lock,
                LockFormat::Token,
                found(&kind),
            )),
            Err(e) => {
                // The script may have run and its reply been lost: our token may
                // be under any one of the keys. Take it out again, off the
                // caller's time, until it would expire anyway.
                for &i in group {
                    let backend = Arc::clone(&plan.backend);
                    let until = sent + ttl;
                    hub.topology
                        .release_later(backend, keys[i].clone(), value.clone(), until);
                }
                Err(e)
            }
        }
    }

    /// One attempt at one key through the topology (a quorum's vote).
    fn try_one(&self, plan: &Plan, keys: &Keys, mark: bool) -> Result<Found> {
        let req = Request {
            ttl: stored_ttl(plan.ttl, plan.min_hold),
            fence: plan.fence,
            // A caller that will wait marks the holder, so its release publishes.
            wait: if mark { Waiting::First } else { Waiting::No },
            replicas: None,
            return_by: None,
            // Only a read-write lock's read reads it; `lock_any` takes tokens.
            began: std::time::Instant::now(),
        };
        match self.inner.hub.topology.acquire(&plan.backend, keys, req)? {
            Attempt::Acquired { value, sent, .. } if self.late(plan, keys, &value, sent) => {
                Ok(Found::Busy(None))
            }
            Attempt::Acquired { value, sent, fence } => {
                let guard = self.guard_for(plan, keys.clone(), value, sent, fence);
                Ok(Found::Got(0, guard))
            }
            Attempt::Busy { remaining, .. } => Ok(Found::Busy(remaining)),
        }
    }
}
