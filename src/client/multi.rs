//! Several names, all or none: [`LockClient::lock_all`] and its family.
//!
//! Where the keys share a node (one server, or one Redis Cluster slot) one script
//! takes all of them or none (`scheme/token/all.rs`). Elsewhere (keys on several
//! cluster slots, a Redlock quorum) the keys are taken one by one in one canonical
//! order (sorted by key), each with one attempt, and the ones taken are released as
//! soon as one is found busy. Either way a caller that waits holds none of the
//! names: it waits, as a single `lock` would, for the release of the name it found
//! busy (bounded by that holder's TTL), then tries the whole set again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::guard::LockGuard;
use crate::client::multi_guard::MultiGuard;
use crate::client::options::LockOptions;
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::metrics::bump;
use crate::scheme::token::all::{ALL_SCRIPTS, AllReply, acquire_all_cmd, acquire_all_reply, found};
use crate::scheme::{Keys, Request, Scheme, Waiting, new_token};
use crate::threads::cancel::CancelToken;
use crate::threads::wait::{Next, WaitSlot};
use crate::topology::Attempt;

use super::LockClient;
use super::min_hold::stored_ttl;
use super::plan::Plan;

/// What one try at the whole set found.
enum Try {
    /// Every name is ours, in the order the names were given.
    Got(Vec<LockGuard>),
    /// The name at `index` (in the order given) is held, for at most `remaining`;
    /// none of the names is held by this call.
    Busy {
        index: usize,
        remaining: Option<Duration>,
    },
}

impl LockClient {
    /// Acquires the locks on all of `names`, waiting as long as it takes: all of
    /// them or none.
    ///
    /// On one server, and in a Redis Cluster when the names share a slot (a hash
    /// tag: `{order:7}:a`, `{order:7}:b`), one script takes every key or none, so
    /// Redis never holds part of the set. Elsewhere (several slots, a Redlock
    /// quorum) the keys are taken one by one in the order of their keys, and those
    /// taken are released when one is busy. While it waits the call holds none of
    /// the names: it waits for the release of the name it found busy (or that
    /// holder's TTL), then tries the whole set again.
    ///
    /// Token locks only. Each name gets a lease of its own, renewed in the
    /// background, with a fence of its own when fencing is on.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty list, an empty name or a name given twice;
    /// [`Error::WrongFormat`] when a name's key holds another type than a token
    /// lock's string (found on the one-script path); [`Error::Unsupported`] for a
    /// scheme other than [`Scheme::Token`] or replica confirmation; otherwise as
    /// [`lock`](Self::lock) (an acquire whose reply was lost is undone in the
    /// background for every name).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// let both = client.lock_all(&["account:1", "account:2"])?;
    /// // ... move money between the two accounts ...
    /// for released in both.unlock() {
    ///     assert!(released?.was_held());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<MultiGuard> {
        let got = self.acquire_all(names, &LockOptions::default(), None, false)?;
        // Without a deadline the wait ends only in a guard or an error.
        got.ok_or(Error::Shutdown)
    }

    /// Makes one attempt to acquire all of `names`; never waits.
    ///
    /// Returns `Ok(None)` when any of them is held by someone else (none is then
    /// held by this call).
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub fn try_lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<Option<MultiGuard>> {
        self.acquire_all(names, &LockOptions::default(), None, true)
    }

    /// Acquires all of `names`, waiting at most `wait`.
    ///
    /// Returns `Ok(None)` when the wait ran out with one of them still held.
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub fn try_lock_all_for<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: Duration,
    ) -> Result<Option<MultiGuard>> {
        let deadline = Instant::now().checked_add(wait);
        self.acquire_all(names, &LockOptions::default(), deadline, false)
    }

    /// Acquires all of `names` with per-call options (TTL, fencing, renewal,
    /// wait or deadline, cancel, `on_lost` for each name).
    ///
    /// Waits per [`LockOptions::wait`] / [`LockOptions::deadline`] (no bound when
    /// neither is set, and then never returns `Ok(None)`), and can be cancelled
    /// through [`LockOptions::cancel`].
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all); [`Error::Config`] for an out-of-range
    /// option; [`Error::Cancelled`] when the wait was cancelled.
    pub fn lock_all_with<S: AsRef<str>>(
        &self,
        names: &[S],
        opts: &LockOptions,
    ) -> Result<Option<MultiGuard>> {
        let deadline = opts.deadline_from(Instant::now());
        let once = deadline.is_some_and(|d| d <= Instant::now());
        self.acquire_all(names, opts, deadline, once)
    }

    fn acquire_all<S: AsRef<str>>(
        &self,
        names: &[S],
        opts: &LockOptions,
        deadline: Option<Instant>,
        once: bool,
    ) -> Result<Option<MultiGuard>> {
        let plan = self.plan(opts)?;
        let keys = self.all_keys(names, &plan)?;
        let scheme = opts.scheme.as_ref().unwrap_or(&self.inner.settings.scheme);
        if *scheme != Scheme::Token || opts.backend.is_some() {
            return Err(Error::Unsupported {
                what: "several names of this scheme",
                by: "lock_all (token locks only)",
            });
        }
        if plan.replicas.is_some() {
            return Err(Error::Unsupported {
                what: "several names with replica confirmation",
                by: "lock_all",
            });
        }
        let hub = &*self.inner.hub;
        let locks: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
        let one_step = hub.topology.one_step(&locks);
        // The canonical order of the one-by-one path: two callers naming the same
        // keys in any order try them in the same order.
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|a, b| keys[*a].lock.cmp(&keys[*b].lock));
        let waiters = self.inner.waiters.as_ref();
        let cancel = opts.cancel.as_ref();
        // The wait for the name found busy last, with its index: kept across tries
        // so a release wake-up it took is used, not passed on.
        let mut slot: Option<(usize, WaitSlot<'_>)> = None;
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
            // Releases of these names this client queued land first (see
            // `LockClientBuilder::release_in_background`).
            let by = Instant::now() + hub.topology.read_timeout();
            for k in &keys {
                hub.queued.settle(&k.lock, by);
            }
            let tried = if one_step {
                self.try_at_once(&plan, &keys, will_wait)
            } else {
                self.try_in_order(&plan, &keys, &order, will_wait)
            };
            let (index, remaining) = match tried.map_err(|e| {
                let limits = hub.topology.subscriber(0).limits();
                e.during(Operation::Acquire, &keys[0].lock, limits)
            })? {
                Try::Got(guards) => {
                    if let Some((_, s)) = slot.as_mut() {
                        s.acquired();
                    }
                    return Ok(Some(MultiGuard::new(guards)));
                }
                Try::Busy { index, remaining } => (index, remaining),
            };
            if !will_wait || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            // Holding none of the names, wait for the one found busy: a release
            // message on its channel, or its holder's TTL, or a polling step.
            if slot.as_ref().is_none_or(|(i, _)| *i != index) {
                let busy = &keys[index];
                let waiter = waiters.and_then(|w| w.for_channel(&busy.channel));
                // No hand-off offer (`want` is `None`): a lock handed over would
                // be one name held while waiting for the rest.
                slot = Some((index, WaitSlot::new(hub, waiter, busy, cancel, None)));
            }
            let next = slot.as_mut().map_or(Ok(Next::Attempt), |(_, s)| {
                s.pause(remaining, false, deadline)
            })?;
            match next {
                Next::Attempt => {}
                Next::GaveUp => return Ok(None),
                // Never sent to a wait without an offer; given back if ever.
                Next::Handed(h) => {
                    let busy = keys[index].clone();
                    drop(self.guard_for(&plan, busy, h.value, h.sent, h.fence));
                }
                Next::Transferred(state) => drop(self.take_over(state)),
            }
            if !one_step {
                // Callers walking the same keys from a release at once would
                // collide again on the first of them: a small jitter apart.
                let (min, _) = hub.backoff;
                std::thread::sleep(Duration::from_micros(fastrand::u64(
                    0..=u64::try_from(min.as_micros()).unwrap_or(0).min(5_000),
                )));
            }
        }
    }

    /// Checks `names` (not empty, no name empty, none twice) and derives their keys.
    pub(super) fn all_keys<S: AsRef<str>>(&self, names: &[S], plan: &Plan) -> Result<Vec<Keys>> {
        if names.is_empty() {
            return Err(Error::Invalid {
                what: "lock names",
                reason: "the list is empty",
            });
        }
        let prefix = &self.inner.settings.key_prefix;
        let keys = names
            .iter()
            .map(|n| Keys::new(prefix, n.as_ref(), &*plan.backend))
            .collect::<Result<Vec<Keys>>>()?;
        let mut seen = HashSet::with_capacity(keys.len());
        if !keys.iter().all(|k| seen.insert(k.lock.as_str())) {
            return Err(Error::Invalid {
                what: "lock names",
                reason: "a name is given twice",
            });
        }
        Ok(keys)
    }

    /// One script on the keys' node: every key set, or none.
    fn try_at_once(&self, plan: &Plan, keys: &[Keys], mark: bool) -> Result<Try> {
        let hub = &*self.inner.hub;
        let tag = self.inner.id.tag();
        let values: Vec<String> = keys.iter().map(|_| new_token(tag)).collect();
        let locks: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
        let fences: Vec<String> = if plan.fence {
            keys.iter().map(|k| hub.topology.fence_of(k)).collect()
        } else {
            Vec::new()
        };
        let cmd = acquire_all_cmd(
            &locks,
            &fences,
            &values,
            stored_ttl(plan.ttl, plan.min_hold),
            mark,
        );
        bump(&hub.counters.attempts, 1);
        let sent = Instant::now();
        let reply = hub
            .topology
            .query(&keys[0].lock, &ALL_SCRIPTS, &cmd)
            .and_then(|v| Ok(acquire_all_reply(&v, keys.len(), plan.fence)?));
        let fences = match reply {
            Ok(AllReply::Acquired(fences)) => fences,
            Ok(AllReply::Busy { index, remaining }) => return Ok(Try::Busy { index, remaining }),
            Ok(AllReply::Other { index, kind }) => {
                return Err(Error::wrong_format(
                    &keys[index].lock,
                    LockFormat::Token,
                    found(&kind),
                ));
            }
            Err(e) => {
                // The script may have run and its reply been lost: take our tokens
                // out again, off the caller's time, until they would expire anyway.
                let until = sent + stored_ttl(plan.ttl, plan.min_hold);
                for (k, v) in keys.iter().zip(values) {
                    let backend = Arc::clone(&plan.backend);
                    hub.topology.release_later(backend, k.clone(), v, until);
                }
                return Err(e);
            }
        };
        // One grant, one validity: past it every name is given back.
        if self.late(plan, &keys[0], &values[0], sent) {
            for (k, v) in keys.iter().zip(&values).skip(1) {
                let until = Instant::now() + stored_ttl(plan.ttl, plan.min_hold);
                let backend = Arc::clone(&plan.backend);
                hub.topology
                    .release_later(backend, k.clone(), v.clone(), until);
            }
            return Ok(Try::Busy {
                index: 0,
                remaining: None,
            });
        }
        let guards = keys
            .iter()
            .zip(values)
            .zip(fences)
            .map(|((k, v), f)| self.guard_for(plan, k.clone(), v, sent, f))
            .collect();
        Ok(Try::Got(guards))
    }

    /// One attempt per key in `order`; on the first busy key, the ones taken are
    /// released (compare-and-delete: only our own values) before returning.
    fn try_in_order(
        &self,
        plan: &Plan,
        keys: &[Keys],
        order: &[usize],
        will_wait: bool,
    ) -> Result<Try> {
        let hub = &*self.inner.hub;
        let mut taken: Vec<(usize, LockGuard)> = Vec::with_capacity(keys.len());
        for &i in order {
            let req = Request {
                ttl: stored_ttl(plan.ttl, plan.min_hold),
                fence: plan.fence,
                // A caller that will wait marks the holder, so its release publishes.
                wait: if will_wait {
                    Waiting::First
                } else {
                    Waiting::No
                },
                replicas: None,
                return_by: None,
                began: Instant::now(),
            };
            // An error or a busy key drops `taken`: each guard releases its name.
            let remaining = match hub.topology.acquire(&plan.backend, &keys[i], req)? {
                Attempt::Acquired { value, sent, .. }
                    if self.late(plan, &keys[i], &value, sent) =>
                {
                    None
                }
                Attempt::Acquired { value, sent, fence } => {
                    let guard = self.guard_for(plan, keys[i].clone(), value, sent, fence);
                    taken.push((i, guard));
                    continue;
                }
                Attempt::Busy { remaining, .. } => remaining,
            };
            return Ok(Try::Busy {
                index: i,
                remaining,
            });
        }
        taken.sort_by_key(|(i, _)| *i);
        Ok(Try::Got(taken.into_iter().map(|(_, g)| g).collect()))
    }
}
