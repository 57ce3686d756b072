//! A fair lock's queue of mixed waiters for the interop tests: redlease
//! `FairLock` callers and Redisson clients (their own `lock()` loop, replayed
//! by [`RedissonFair`]), each queued in turn and recording when it held the
//! lock.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::{FairLock, Release};

use super::redisson::fair::{RedissonFair, prefix_name};
use super::{RedisServer, eventually};

/// One waiter's turn: who, when it had the lock, when it let it go.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    pub id: usize,
    pub took: Instant,
    pub released: Instant,
}

/// How many waits each Redisson waiter of a queue has ended, by id.
#[derive(Clone, Default)]
pub struct Waits(Arc<Mutex<std::collections::HashMap<usize, usize>>>);

impl Waits {
    /// How many waits waiter `id` has ended.
    pub fn of(&self, id: usize) -> usize {
        self.0.lock().get(&id).copied().unwrap_or(0)
    }

    fn ended(&self, id: usize) {
        *self.0.lock().entry(id).or_default() += 1;
    }
}

/// The turns of a queue's waiters, in the order they took the lock.
#[derive(Clone, Default)]
pub struct Turns(Arc<Mutex<Vec<Turn>>>);

impl Turns {
    /// The waiters' ids in the order they took the lock.
    pub fn order(&self) -> Vec<usize> {
        self.0.lock().iter().map(|t| t.id).collect()
    }

    /// Every turn, in order.
    pub fn all(&self) -> Vec<Turn> {
        self.0.lock().clone()
    }

    /// Waiter `id`'s turn, taken now: holds the lock `hold` (the section), then
    /// records the turn as ending.
    fn section(&self, id: usize, hold: Duration) {
        let took = Instant::now();
        thread::sleep(hold);
        self.0.lock().push(Turn {
            id,
            took,
            released: Instant::now(),
        });
    }

    /// The longest time from a release to the next waiter's turn, with the
    /// waiter that waited it (`first_release`: the holder's release before all).
    pub fn worst_gap(&self, first_release: Instant) -> (Duration, usize) {
        let mut before = first_release;
        let mut worst = (Duration::ZERO, usize::MAX);
        for t in self.all() {
            let gap = t.took.saturating_duration_since(before);
            if gap >= worst.0 {
                worst = (gap, t.id);
            }
            before = t.released;
        }
        worst
    }
}

/// The length of the queue of the fair lock `full` (with its prefix).
pub fn queue_len(server: &RedisServer, full: &str) -> usize {
    server.query(redis::cmd("LLEN").arg(prefix_name("redisson_lock_queue", full)))
}

/// Waits until the queue of `full` is `len` long: a waiter arrived.
pub fn await_queued(server: &RedisServer, full: &str, len: usize, bound: Duration, who: &str) {
    assert!(
        eventually(bound, || queue_len(server, full) == len),
        "{who} queued (queue {} long, {len} expected)",
        queue_len(server, full)
    );
}

/// Starts a thread that takes `lock` (waiting at most `bound`), holds it
/// `hold` and records its turn as `id`; returns once it is queued.
pub fn queue_ours(
    server: &RedisServer,
    full: &str,
    lock: &FairLock,
    id: usize,
    hold: Duration,
    turns: &Turns,
    bound: Duration,
) -> JoinHandle<()> {
    let (lock, turns) = (lock.clone(), turns.clone());
    start_queued(server, full, id, bound, move || {
        let guard = lock
            .try_lock_for(bound)
            .unwrap()
            .unwrap_or_else(|| panic!("waiter {id} (redlease) not acquired in {bound:?}"));
        turns.section(id, hold);
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    })
}

/// Starts a Redisson client's thread that calls `lock()` on `full`, holds it
/// `hold`, records its turn as `id` and calls `unlock()`; returns once it is
/// queued.
pub fn queue_redisson(
    server: &RedisServer,
    full: &str,
    id: usize,
    hold: Duration,
    turns: &Turns,
    bound: Duration,
) -> JoinHandle<()> {
    queue_redisson_counted(server, full, id, hold, turns, &Waits::default(), bound)
}

/// [`queue_redisson`], counting in `waits` each wait the waiter ends.
pub fn queue_redisson_counted(
    server: &RedisServer,
    full: &str,
    id: usize,
    hold: Duration,
    turns: &Turns,
    waits: &Waits,
    bound: Duration,
) -> JoinHandle<()> {
    let (mut java, mut listen) = (RedissonFair::new(server), server.conn());
    let (full_name, turns, waits) = (full.to_owned(), turns.clone(), waits.clone());
    start_queued(server, full, id, bound, move || {
        let ended = || waits.ended(id);
        if let Err(e) = java.lock_telling(&mut listen, &full_name, bound, ended) {
            panic!("waiter {id} (Redisson): {e}");
        }
        turns.section(id, hold);
        assert_eq!(java.unlock(&full_name), Some(1));
    })
}

/// Starts `waiter` (waiter `id`, which queues on `full`) on a thread of its
/// own; returns once the queue is one longer.
fn start_queued(
    server: &RedisServer,
    full: &str,
    id: usize,
    bound: Duration,
    waiter: impl FnOnce() + Send + 'static,
) -> JoinHandle<()> {
    let before = queue_len(server, full);
    let h = thread::spawn(waiter);
    await_queued(server, full, before + 1, bound, &format!("waiter {id}"));
    h
}
