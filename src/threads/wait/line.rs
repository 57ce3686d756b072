//! [`Lines`]: this client's callers waiting for each key, oldest first.
//!
//! The head of a key's line is its prober: the only caller of this client that
//! sends acquire attempts for the key while waiting, on a capped, jittered interval
//! (most other clients release without publishing, so a release message may never
//! come; a holder that always publishes, an election's leader, is not polled while
//! the key's channel is heard: the head waits for its message or its TTL's end).
//! Callers behind it send nothing: they wait for a release message, a lock
//! handed over by a releasing guard of this client, or their turn at the head.
//! A caller that leaves the head (acquired, gave up, cancelled) promotes the next.
//!
//! Callers that arrive together are told apart before anyone sends: each counts
//! itself in a bucket of keys on arrival, so a caller that finds company joins the
//! line instead of racing the others to Redis. Each bucket also counts the lines of
//! its keys, in the same word, so a caller alone (the common case) pays two atomic
//! operations and no lock, whatever other keys have callers waiting.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::Wake;

/// Buckets of keys for counting arrivals. A collision of two keys costs the slow
/// path (a wait slot that finds its line empty); with this many, 8 busy keys
/// collide with a chance under 1 %, and share a cache line with one of about 10 %.
const BUCKETS: usize = 4096;

/// The lines of one client, by channel.
pub(crate) struct Lines {
    map: Mutex<HashMap<String, Line>>,
    /// Per bucket of keys: callers inside an acquire (low 32 bits) and lines in
    /// `map` (high 32 bits, changed under its lock), so that one atomic operation
    /// tells an arriving caller whether it has company.
    buckets: Box<[AtomicU64]>,
    seq: AtomicU64,
}

/// One line in a bucket's word.
const LINE: u64 = 1 << 32;

/// A hold-off's bound per other client, before any turn was seen.
const YIELD: Duration = Duration::from_millis(20);
/// A hold-off's bound per other client otherwise: two turns (the mean time
/// between release messages), within these limits. Another client that stopped
/// waiting but still listens (a channel lingers subscribed) costs this at most.
const YIELD_TURNS: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(200));
/// Other clients counted at most in a hold-off's bound.
const MAX_OTHERS: u32 = 8;

/// One key's waiting callers.
#[derive(Default)]
struct Line {
    waiters: BTreeMap<u64, Sender<Wake>>,
    /// When the holder's TTL last seen runs out.
    holder_until: Option<Instant>,
    /// Release messages heard on the key's channel since the line was made.
    heard: u64,
    /// When the last one was heard, and the mean time between them (a turn).
    last_heard: Option<Instant>,
    turn: Option<Duration>,
    /// While set, this client lets other clients' waiters go first.
    hold_off: Option<HoldOff>,
}

/// A line's turn given away: after a real release that `others` other clients
/// heard, this client waits until each of them may have had a turn (it heard
/// `others` release messages after its own), or until `until` at the latest.
#[derive(Debug, Clone, Copy)]
struct HoldOff {
    until: Instant,
    others: u64,
    /// `heard` before the release was sent (its own message comes after).
    from: u64,
}

impl HoldOff {
    /// Whether it still holds, given the messages heard so far.
    fn holds(&self, heard: u64, now: Instant) -> bool {
        now < self.until && heard.saturating_sub(self.from) <= self.others
    }
}

/// A caller counted in its key's bucket until dropped (the end of its acquire).
pub(crate) struct Arrival<'a> {
    counter: &'a AtomicU64,
    crowded: bool,
}

impl Arrival<'_> {
    /// Whether other callers of this client were acquiring this key (or one of its
    /// bucket) or waiting for it when this one arrived.
    pub(crate) fn crowded(&self) -> bool {
        self.crowded
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            map: Mutex::default(),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            seq: AtomicU64::new(0),
        }
    }
}

impl Lines {
    /// Counts a caller in for `channel`'s key.
    /// Another caller arriving, or a line, in the bucket makes a crowd (a key of
    /// the same bucket costs the slow path: a wait slot that finds its line empty).
    pub(crate) fn arrive(&self, channel: &str) -> Arrival<'_> {
        let counter = &self.buckets[bucket(channel)];
        let before = counter.fetch_add(1, Ordering::AcqRel);
        Arrival {
            counter,
            crowded: before > 0,
        }
    }

    /// Whether callers of this client are acquiring or waiting for `channel`'s key
    /// (or a key of its bucket): one atomic load.
    pub(crate) fn busy(&self, channel: &str) -> bool {
        self.buckets[bucket(channel)].load(Ordering::Acquire) != 0
    }

    /// Takes `channel`'s line out of the map, and out of its bucket's count.
    fn remove(&self, map: &mut HashMap<String, Line>, channel: &str) {
        if map.remove(channel).is_some() {
            self.buckets[bucket(channel)].fetch_sub(LINE, Ordering::AcqRel);
        }
    }

    /// A number that orders callers by arrival.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Puts caller `seq` in `channel`'s line; whether it is the head.
    pub(crate) fn join(&self, channel: &str, seq: u64, tx: &Sender<Wake>) -> bool {
        let mut map = self.map.lock();
        let line = map.entry(channel.to_owned()).or_insert_with(|| {
            self.buckets[bucket(channel)].fetch_add(LINE, Ordering::AcqRel);
            Line::default()
        });
        line.waiters.insert(seq, tx.clone());
        line.waiters
            .first_key_value()
            .is_some_and(|(s, _)| *s == seq)
    }

    /// Whether caller `seq` heads `channel`'s line.
    pub(crate) fn is_head(&self, channel: &str, seq: u64) -> bool {
        self.map
            .lock()
            .get(channel)
            .and_then(|l| l.waiters.first_key_value())
            .is_some_and(|(s, _)| *s == seq)
    }

    /// Records how long the holder has left, as a busy reply said; returns when the
    /// holder's TTL last seen runs out.
    pub(crate) fn note_holder(
        &self,
        channel: &str,
        remaining: Option<Duration>,
    ) -> Option<Instant> {
        let mut map = self.map.lock();
        let line = map.get_mut(channel)?;
        if let Some(r) = remaining {
            line.holder_until = Instant::now().checked_add(r);
        }
        line.holder_until
    }

    /// Release messages heard so far on `channel`, if this client has a line for it.
    pub(crate) fn heard(&self, channel: &str) -> Option<u64> {
        self.map.lock().get(channel).map(|l| l.heard)
    }

    /// Counts a release message heard on `channel` (the waiter thread, before it
    /// wakes anyone with it).
    pub(crate) fn hear(&self, channel: &str) {
        if let Some(line) = self.map.lock().get_mut(channel) {
            line.heard += 1;
            let now = Instant::now();
            if let Some(last) = line.last_heard {
                let gap = now - last;
                line.turn = Some(line.turn.map_or(gap, |t| (t * 7 + gap) / 8));
            }
            line.last_heard = Some(now);
        }
    }

    /// Gives the key's turn away after a real release that `others` other clients
    /// heard: the head tries again once it has heard a release by each of them
    /// (`from` is [`heard`](Self::heard) before the release was sent), or after
    /// two turns per other client at the latest.
    pub(crate) fn hold_off(&self, channel: &str, others: u64, from: Option<u64>) {
        let mut map = self.map.lock();
        let Some(line) = map.get_mut(channel) else {
            return;
        };
        let per_other = line
            .turn
            .map_or(YIELD, |t| (t * 2).clamp(YIELD_TURNS.0, YIELD_TURNS.1));
        let n = u32::try_from(others).unwrap_or(MAX_OTHERS).min(MAX_OTHERS);
        line.hold_off = Instant::now()
            .checked_add(per_other * n)
            .map(|until| HoldOff {
                until,
                others,
                from: from.map_or(line.heard, |f| f.min(line.heard)),
            });
    }

    /// Until when the head of `channel`'s line must not try, if it must wait.
    pub(crate) fn held_off(&self, channel: &str) -> Option<Instant> {
        let map = self.map.lock();
        let line = map.get(channel)?;
        let hold = line.hold_off?;
        hold.holds(line.heard, Instant::now()).then_some(hold.until)
    }

    /// Takes caller `seq` out of `channel`'s line. If it was the head, the next
    /// caller becomes the prober: told to try at once (`now`), or to start its
    /// polling (the leaver took the lock, so trying now would find it busy).
    pub(crate) fn leave(&self, channel: &str, seq: u64, now: bool) {
        let mut map = self.map.lock();
        let Some(line) = map.get_mut(channel) else {
            return;
        };
        let was_head = line
            .waiters
            .first_key_value()
            .is_some_and(|(s, _)| *s == seq);
        line.waiters.remove(&seq);
        if line.waiters.is_empty() {
            self.remove(&mut map, channel);
            return;
        }
        if was_head {
            // A head that is gone (its receiver dropped) leaves too: try the next.
            while let Some((next, tx)) = line.waiters.first_key_value() {
                if tx.send(Wake::Probe { now }).is_ok() {
                    break;
                }
                let next = *next;
                line.waiters.remove(&next);
            }
            if line.waiters.is_empty() {
                self.remove(&mut map, channel);
            }
        }
    }
}

/// The bucket of a key: FNV-1a over its bytes (keys are short; this runs on every
/// acquire, where `SipHash` would cost more than the rest of the bookkeeping).
fn bucket(channel: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in channel.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h as usize % BUCKETS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_to_join_heads_the_line_and_the_next_is_promoted_when_it_leaves() {
        let lines = Lines::default();
        let (a_tx, a_rx) = crossbeam_channel::unbounded();
        let (b_tx, b_rx) = crossbeam_channel::unbounded();
        assert!(lines.join("c", 1, &a_tx));
        assert!(!lines.join("c", 2, &b_tx));
        assert!(lines.is_head("c", 1) && !lines.is_head("c", 2));
        lines.leave("c", 1, false);
        assert!(matches!(b_rx.try_recv(), Ok(Wake::Probe { now: false })));
        assert!(a_rx.try_recv().is_err());
        assert!(lines.is_head("c", 2));
        lines.leave("c", 2, true);
        assert!(!lines.map.lock().contains_key("c"));
        assert_eq!(lines.buckets[bucket("c")].load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_turn_given_away_comes_back_after_a_release_by_each_other_client() {
        let lines = Lines::default();
        let (tx, _rx) = crossbeam_channel::unbounded();
        lines.join("c", 1, &tx);
        lines.hear("c");
        let from = lines.heard("c");
        assert_eq!(from, Some(1));
        // Three other clients heard our release; our own message comes first.
        lines.hold_off("c", 3, from);
        for _ in 0..3 {
            lines.hear("c");
            assert!(lines.held_off("c").is_some());
        }
        lines.hear("c");
        assert!(
            lines.held_off("c").is_none(),
            "each of the three had a turn"
        );
        // Two turns per other client bound a hold-off: messages came here far
        // faster than 1 ms apart, so the bound is 3 ms at most.
        lines.hold_off("c", 3, lines.heard("c"));
        let until = lines.held_off("c").expect("held off");
        assert!(until <= Instant::now() + Duration::from_millis(3));
    }

    #[test]
    fn a_lone_caller_is_not_crowded_and_a_second_one_is() {
        let lines = Lines::default();
        let first = lines.arrive("k");
        assert!(!first.crowded());
        assert!(lines.arrive("k").crowded());
        drop(first);
        assert!(!lines.arrive("k").crowded());
        let (tx, _rx) = crossbeam_channel::unbounded();
        lines.join("k", 7, &tx);
        assert!(
            lines.arrive("k").crowded(),
            "a waiting caller makes a crowd"
        );
        lines.leave("k", 7, false);
        assert!(!lines.arrive("k").crowded(), "its line is gone");
        assert_ne!(bucket("k"), bucket("other"));
        lines.join("other", 8, &tx);
        assert!(
            !lines.arrive("k").crowded(),
            "a line for another key is no crowd"
        );
    }
}
