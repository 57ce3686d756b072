//! The waiter thread's subscriptions: asking for the channels its waiters need,
//! confirming them to the callers, and leaving those nobody waits on any more.

use std::time::Instant;

use super::{LINGER, RESUBSCRIBE, Wake, Worker};
use crate::threads::wait::listen::Listener;

impl Worker {
    pub(super) fn subscribe_pending(&mut self, ps: &mut Listener<'_>) -> redis::RedisResult<()> {
        let now = Instant::now();
        let pending: Vec<String> = self
            .chans
            .iter()
            .filter(|(_, c)| !c.confirmed && !c.idle())
            .filter(|(_, c)| c.requested.is_none_or(|t| now - t >= RESUBSCRIBE))
            .map(|(name, _)| name.clone())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        // One channel per command: each has exactly one reply, so a reply read
        // is always the confirmation of the command just sent (classic); a shard
        // subscription is confirmed later, among the messages.
        let confirmed = self.replies(ps, |ps, _| {
            let mut confirmed = Vec::new();
            for name in &pending {
                if ps.subscribe(name)? {
                    confirmed.push(name.clone());
                }
            }
            Ok(confirmed)
        })?;
        for name in &pending {
            if let Some(chan) = self.chans.get_mut(name) {
                chan.requested = Some(now);
            }
        }
        self.confirm(confirmed);
        Ok(())
    }

    /// Marks `names` subscribed: their waiters try again (a release before the
    /// subscription may have been missed) and callers may skip the handshake.
    pub(super) fn confirm(&mut self, mut names: Vec<String>) {
        names.retain(|name| self.chans.contains_key(name));
        // Counted before the retries: a caller's client is not quiet from then on.
        self.shared
            .subscribed_mut(|s| s.extend(names.iter().cloned()));
        for name in &names {
            if let Some(chan) = self.chans.get_mut(name) {
                chan.confirmed = true;
                chan.requested = None;
                for tx in chan.queue.values().chain(chan.watchers.values()) {
                    let _ = tx.send(Wake::Retry);
                }
            }
        }
    }

    /// The server ended a shard subscription (its slot moved): its waiters poll,
    /// and it is asked for again after [`RESUBSCRIBE`].
    pub(super) fn dropped(&mut self, name: &str) {
        let Some(chan) = self.chans.get_mut(name) else {
            return;
        };
        if chan.confirmed {
            chan.confirmed = false;
            chan.requested = Some(Instant::now());
            self.shared.subscribed_mut(|s| s.remove(name));
            for tx in chan.queue.values().chain(chan.watchers.values()) {
                let _ = tx.send(Wake::Retry);
            }
        }
    }

    pub(super) fn unsubscribe_idle(&mut self, ps: &mut Listener<'_>) -> redis::RedisResult<()> {
        let now = Instant::now();
        let idle: Vec<String> = self
            .chans
            .iter()
            .filter(|(_, c)| c.idle() && c.idle_since.is_some_and(|t| now - t >= LINGER))
            .map(|(name, _)| name.clone())
            .collect();
        if idle.is_empty() {
            return Ok(());
        }
        let mut confirmed = Vec::new();
        // Out of the shared view first: a caller that still sees it has queued
        // already, and is told to retry once the thread has resubscribed.
        self.shared.subscribed_mut(|subscribed| {
            for name in idle {
                subscribed.remove(&name);
                if self.chans.remove(&name).is_some_and(|c| c.confirmed) {
                    confirmed.push(name);
                }
            }
        });
        self.replies(ps, |ps, _| {
            confirmed.iter().try_for_each(|name| ps.unsubscribe(name))
        })
    }
}
