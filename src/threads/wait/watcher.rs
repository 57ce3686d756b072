//! [`Watcher`]: a caller that waits for a name to be free and never acquires it
//! (`LockClient::wait_free`). It hears every release message on the channels it
//! listens on, as the waiters' queue does, but takes none from them: a watcher
//! beside callers waiting for the lock delays none of them. It joins no line, so
//! it is no key's prober either; it polls on its own step.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::backoff::{backoff_cap, jitter};
use super::{Command, Hub, Waiter, Waiters, Wake};
use crate::threads::cancel::{CancelToken, Watch};

/// What ended a [`Watcher::sleep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A release message, a confirmed subscription (a release before it may have
    /// been missed) or a lost connection: look again now.
    Something,
    /// The client was closed.
    Shutdown,
    /// Nothing came before the time given.
    Nothing,
}

/// One caller's watch over a few release channels.
pub(crate) struct Watcher<'a> {
    hub: &'a Hub,
    waiters: Option<&'a Waiters>,
    seq: u64,
    tx: Sender<Wake>,
    rx: Receiver<Wake>,
    /// The channels listened on, each with the waiter thread that hears it.
    channels: Vec<(String, &'a Waiter)>,
    backoff_step: u32,
    _watches: [Option<Watch>; 2],
}

impl<'a> Watcher<'a> {
    /// A watcher listening on nothing yet; `waiters` is `None` when the client
    /// has no pub/sub (it then only polls). `cancel` wakes its sleep when it
    /// fires ([`Heard::Something`]: the caller looks at the token).
    pub(crate) fn new(
        hub: &'a Hub,
        waiters: Option<&'a Waiters>,
        cancel: Option<&CancelToken>,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let watches = [
            Some(hub.shutdown.watch(&tx, Wake::Shutdown)),
            cancel.map(|c| c.watch(&tx, Wake::Cancelled)),
        ];
        Self {
            hub,
            waiters,
            seq: hub.lines.next_seq(),
            tx,
            rx,
            channels: Vec::new(),
            backoff_step: 0,
            _watches: watches,
        }
    }

    /// Listens on exactly `channels` from now on: leaves those no longer named,
    /// and asks the waiter thread for the new ones (waking it, so it subscribes
    /// at once). Their confirmation wakes the watcher, so that a release sent
    /// between the caller's last look and the subscription is not missed.
    /// Whether it listens on a channel it did not before.
    pub(crate) fn listen(&mut self, channels: &[String]) -> bool {
        let Some(waiters) = self.waiters else {
            return false;
        };
        let mut added = false;
        let mut kept = Vec::with_capacity(channels.len());
        for (name, w) in std::mem::take(&mut self.channels) {
            if channels.contains(&name) {
                kept.push((name, w));
            } else {
                let _ = w.tx.send(Command::Unwatch {
                    channel: name,
                    seq: self.seq,
                });
            }
        }
        self.channels = kept;
        for name in channels {
            if self.channels.iter().any(|(c, _)| c == name) {
                continue;
            }
            let Some(w) = waiters.for_channel(name) else {
                continue;
            };
            let cmd = Command::Watch {
                channel: name.clone(),
                seq: self.seq,
                tx: self.tx.clone(),
            };
            if w.tx.send(cmd).is_ok() {
                if !w.shared.subscribed.read().contains(name) {
                    kick(self.hub, w);
                }
                self.channels.push((name.clone(), w));
                added = true;
            }
        }
        added
    }

    /// Whether the client has pub/sub: releases can wake this watcher.
    pub(crate) fn listening(&self) -> bool {
        self.waiters.is_some()
    }

    /// Whether a release on every channel it listens on would wake it now: each is
    /// subscribed, on a connection that is up. `false` when it listens on none.
    pub(crate) fn hears(&self) -> bool {
        !self.channels.is_empty()
            && self.channels.iter().all(|(name, w)| {
                w.shared.healthy.load(Ordering::Acquire)
                    && w.shared.subscribed.read().contains(name)
            })
    }

    /// Sleeps until a release message, a change of the subscriptions, the
    /// client's shutdown, or `until`. Every message that came meanwhile is
    /// taken with the first: one look answers them all, so a name released
    /// and taken again many times a second costs one look per wake-up, not
    /// one per release.
    pub(crate) fn sleep(&self, until: Instant) -> Heard {
        let Ok(first) = self.rx.recv_deadline(until) else {
            return Heard::Nothing;
        };
        let mut heard = Heard::Something;
        for wake in std::iter::once(first).chain(self.rx.try_iter()) {
            if matches!(wake, Wake::Shutdown) {
                heard = Heard::Shutdown;
            }
        }
        heard
    }

    /// The next polling step: exponential from the client's shortest backoff to
    /// its longest, jittered within the top quarter of the step, as a waiting
    /// caller's.
    pub(crate) fn step(&mut self) -> Duration {
        let (min, max) = self.hub.backoff;
        let step = backoff_cap(min, max, self.backoff_step);
        self.backoff_step = self.backoff_step.saturating_add(1);
        jitter(step.saturating_sub(step / 4), step)
    }

    /// The client's longest polling step.
    pub(crate) fn longest_step(&self) -> Duration {
        self.hub.backoff.1
    }

    /// Starts the steps from the shortest again (the holder changed).
    pub(crate) fn restart_steps(&mut self) {
        self.backoff_step = 0;
    }
}

impl Drop for Watcher<'_> {
    fn drop(&mut self) {
        for (channel, w) in self.channels.drain(..) {
            let _ = w.tx.send(Command::Unwatch {
                channel,
                seq: self.seq,
            });
        }
    }
}

/// A watch over a few release channels that borrows nothing from the client:
/// what an election's observer keeps for as long as it lives, so that every
/// observer of a client listens through the client's waiter threads (one pub/sub
/// connection per subscriber node), not a connection of its own. Dropping it
/// leaves the channels.
pub(crate) struct Subscription {
    seq: u64,
    channels: Vec<(String, Sender<Command>)>,
}

impl Subscription {
    /// Watches `channels` on the waiter threads of `waiters`, waking each thread
    /// that has not subscribed them yet. The receiver gets a [`Wake`] per release
    /// message and per change of the subscriptions (a confirmation: a message
    /// before it may have been missed), and disconnects once every waiter
    /// thread watched stopped (the client was dropped). `None` when no waiter
    /// thread serves the channels.
    pub(crate) fn new(
        hub: &Hub,
        waiters: &Waiters,
        channels: &[String],
    ) -> Option<(Self, Receiver<Wake>)> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let seq = hub.lines.next_seq();
        let mut watched = Vec::with_capacity(channels.len());
        for name in channels {
            let Some(w) = waiters.for_channel(name) else {
                continue;
            };
            let cmd = Command::Watch {
                channel: name.clone(),
                seq,
                tx: tx.clone(),
            };
            if w.tx.send(cmd).is_ok() {
                if !w.shared.subscribed.read().contains(name) {
                    kick(hub, w);
                }
                watched.push((name.clone(), w.tx.clone()));
            }
        }
        // Only the waiter threads hold senders now.
        drop(tx);
        (!watched.is_empty()).then_some((
            Self {
                seq,
                channels: watched,
            },
            rx,
        ))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        for (channel, tx) in self.channels.drain(..) {
            let _ = tx.send(Command::Unwatch {
                channel,
                seq: self.seq,
            });
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

/// Wakes `w` out of its socket read so it subscribes now (see `WaitSlot::kick`):
/// one `PUBLISH` on its own channel, by the first caller since it last looked.
fn kick(hub: &Hub, w: &Waiter) {
    if w.shared.kicked.swap(true, Ordering::AcqRel) {
        return;
    }
    let node = w.shared.node.load(Ordering::Acquire);
    let _ = hub.topology.publish(node, &w.kick, "");
}
