//! One name out of several: `lock_any` and `AnyGuard` against real servers (one
//! server, a Redis Cluster, a Redlock quorum), Redis read directly.
mod support;

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{CancelToken, Error, LockOptions, Scheme};
use support::clients::{marked_on_any, polling_rarely, prefixed as client, redlock_pair};
use support::{Masters, RedisServer, eventually, stress_factor};

/// Time enough for anything a loaded machine does.
const ROOMY: Duration = Duration::from_secs(20);

fn value(server: &RedisServer, key: &str) -> Option<String> {
    server.query(redis::cmd("GET").arg(key))
}

fn slots(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{{slots}}:{i}")).collect()
}

#[test]
fn try_lock_any_takes_a_free_name_and_says_which() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server), client(&server));
    let names = slots(4);
    let held: Vec<_> = names[..3].iter().map(|n| theirs.lock(n).unwrap()).collect();
    let got = ours
        .try_lock_any(&names)
        .unwrap()
        .expect("one name is free");
    assert_eq!(got.index(), 3);
    assert_eq!(got.name(), "{slots}:3");
    assert_eq!(got.key(), "lock:{slots}:3");
    assert!(got.is_held());
    let stored = value(&server, "lock:{slots}:3").unwrap();
    assert!(stored.starts_with("rl2:"), "{stored}");
    let pttl: i64 = server.query(redis::cmd("PTTL").arg("lock:{slots}:3"));
    assert!(pttl > 0);
    // Every name held: no guard, nothing written, the holders' values as they were.
    let before: Vec<_> = names
        .iter()
        .map(|n| value(&server, &format!("lock:{n}")))
        .collect();
    assert!(ours.try_lock_any(&names).unwrap().is_none());
    let after: Vec<_> = names
        .iter()
        .map(|n| value(&server, &format!("lock:{n}")))
        .collect();
    assert_eq!(before, after);
    assert!(got.unlock().unwrap().was_held());
    assert_eq!(value(&server, "lock:{slots}:3"), None);
    drop(held);
}

#[test]
fn fences_are_per_name_and_rise_with_each_holder() {
    let server = RedisServer::start();
    let ours = client(&server);
    let names = slots(3);
    let fenced = LockOptions::new().fencing(true).wait(Duration::ZERO);
    let mut last = [0u64; 3];
    for _ in 0..30 {
        let g = ours.lock_any_with(&names, &fenced).unwrap().unwrap();
        let f = g.fence().expect("fenced");
        assert!(f > last[g.index()], "fence of {} did not rise", g.name());
        last[g.index()] = f;
        // Taken from the prefix's counter in the script that set the key.
        let counter: u64 = server.query(redis::cmd("GET").arg("lock:redlease:fence"));
        assert_eq!(counter, f);
        assert!(g.unlock().unwrap().was_held());
    }
}

#[test]
fn tries_start_at_a_random_name_so_callers_spread() {
    let server = RedisServer::start();
    let ours = client(&server);
    let names = slots(8);
    let taken: BTreeSet<usize> = (0..40)
        .map(|_| {
            let g = ours.try_lock_any(&names).unwrap().unwrap();
            g.index()
        })
        .collect();
    // All free each time: from a fixed start every try would take the first.
    assert!(taken.len() >= 3, "took only {taken:?}");
}

#[test]
fn workers_never_share_a_slot_and_every_slot_is_used() {
    let server = RedisServer::start();
    let names = slots(3);
    let workers = 8;
    let rounds = 15 * stress_factor();
    let busy: Vec<AtomicBool> = (0..3).map(|_| AtomicBool::new(false)).collect();
    // A plain read, yield, write per slot: two holders of a slot at once lose one.
    let used: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
    let start = Barrier::new(workers);
    thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let client = client(&server);
                start.wait();
                for _ in 0..rounds {
                    let g = client.try_lock_any_for(&names, ROOMY).unwrap().unwrap();
                    let i = g.index();
                    assert!(
                        !busy[i].swap(true, Ordering::SeqCst),
                        "two holders of slot {i}"
                    );
                    let n = used[i].load(Ordering::SeqCst);
                    thread::yield_now();
                    used[i].store(n + 1, Ordering::SeqCst);
                    busy[i].store(false, Ordering::SeqCst);
                    assert!(g.unlock().unwrap().was_held());
                }
            });
        }
    });
    let total: u64 = used.iter().map(|u| u.load(Ordering::SeqCst)).sum();
    assert_eq!(total, (workers * rounds) as u64);
    for (i, u) in used.iter().enumerate() {
        assert!(u.load(Ordering::SeqCst) > 0, "slot {i} never used");
    }
}

#[test]
fn a_waiter_takes_the_name_released_woken_by_its_message() {
    let server = RedisServer::start();
    let (ours, theirs) = (polling_rarely(&server), client(&server));
    let names = slots(3);
    let mut held: Vec<_> = names
        .iter()
        .map(|n| Some(theirs.lock(n).unwrap()))
        .collect();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let t = Instant::now();
            let g = ours.lock_any(&names).unwrap();
            (g.index(), t.elapsed())
        });
        // It found all three busy and marked each holder, so each release publishes.
        assert!(eventually(ROOMY, || names.iter().all(|n| {
            value(&server, &format!("lock:{n}")).is_some_and(|v| v.ends_with('+'))
        })));
        drop(held[1].take());
        let (index, waited) = waiting.join().unwrap();
        assert_eq!(index, 1);
        // Its polling step is 30 s and the holders' TTLs 30 s: the message woke it.
        assert!(waited < ROOMY, "waited {waited:?}");
    });
}

#[test]
fn a_holder_that_never_publishes_is_waited_out_by_its_ttl() {
    let server = RedisServer::start();
    let ours = polling_rarely(&server);
    let names = slots(2);
    // Another client's plain values: no release message will come.
    for (n, ttl) in names.iter().zip([60_000, 1_500]) {
        let _: () = server.query(
            redis::cmd("SET")
                .arg(format!("lock:{n}"))
                .arg("x")
                .arg("PX")
                .arg(ttl),
        );
    }
    let t = Instant::now();
    let g = ours
        .try_lock_any_for(&names, ROOMY)
        .unwrap()
        .expect("after the TTL");
    assert_eq!(g.index(), 1);
    assert!(t.elapsed() < ROOMY, "waited {:?}", t.elapsed());
}

#[test]
fn the_wait_ends_at_its_deadline_or_when_cancelled() {
    let server = RedisServer::start();
    let (ours, theirs) = (polling_rarely(&server), client(&server));
    let names = slots(2);
    let _held: Vec<_> = names.iter().map(|n| theirs.lock(n).unwrap()).collect();
    let t = Instant::now();
    assert!(
        ours.try_lock_any_for(&names, Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(t.elapsed() < ROOMY);
    let cancel = CancelToken::new();
    let opts = LockOptions::new().cancel(cancel.clone());
    thread::scope(|s| {
        let waiting = s.spawn(|| ours.lock_any_with(&names, &opts));
        assert!(eventually(ROOMY, || value(&server, "lock:{slots}:0")
            .is_some_and(|v| v.ends_with('+'))));
        let t = Instant::now();
        cancel.cancel();
        let res = waiting.join().unwrap();
        assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
        assert!(t.elapsed() < ROOMY);
    });
}

#[test]
fn bad_lists_and_other_schemes_are_refused() {
    let server = RedisServer::start();
    let ours = client(&server);
    let empty: [&str; 0] = [];
    assert!(matches!(
        ours.try_lock_any(&empty),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        ours.try_lock_any(&["a", "a"]),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        ours.try_lock_any(&["a", ""]),
        Err(Error::Invalid { .. })
    ));
    let _: () = server.query(redis::cmd("HSET").arg("lock:h").arg("f").arg("1"));
    let res = ours.try_lock_any(&["a", "h"]);
    assert!(matches!(res, Err(Error::WrongFormat { .. })), "{res:?}");
    assert_eq!(value(&server, "lock:a"), None);
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    let res = ours.lock_any_with(&["a", "b"], &reentrant);
    assert!(matches!(res, Err(Error::Unsupported { .. })), "{res:?}");
}

#[test]
fn redlock_walks_the_names_with_a_quorum_vote_each() {
    let masters = Masters::start(3);
    let (ours, theirs) = redlock_pair(&masters);
    let on_majority = |key: &str| {
        masters
            .servers
            .iter()
            .filter(|m| value(m, key).is_some())
            .count()
            >= 2
    };
    let names = ["r0", "r1", "r2"];
    let h0 = theirs.lock("r0").unwrap();
    let h2 = theirs.lock("r2").unwrap();
    let g = ours.try_lock_any(&names).unwrap().expect("r1 is free");
    assert_eq!(g.name(), "r1");
    assert!(on_majority("lock:r1"));
    assert!(ours.try_lock_any(&["r0", "r2"]).unwrap().is_none());
    // Fences cannot be given by a quorum: refused as for `lock`.
    let fenced = LockOptions::new().fencing(true);
    let res = ours.lock_any_with(&names, &fenced);
    assert!(matches!(res, Err(Error::Config { .. })), "{res:?}");
    thread::scope(|s| {
        let waiting = s.spawn(|| ours.try_lock_any_for(&["r0", "r2"], ROOMY).unwrap());
        assert!(eventually(ROOMY, || marked_on_any(&masters, "lock:r2")));
        drop(h2);
        let got = waiting.join().unwrap().expect("taken after the release");
        assert_eq!(got.name(), "r2");
    });
    drop(h0);
}

#[cfg(feature = "cluster")]
mod cluster {
    use super::*;
    use support::clients::cluster_pair;
    use support::cluster::Cluster;

    #[test]
    fn names_on_one_slot_take_one_script_and_on_several_slots_one_per_slot() {
        let cluster = Cluster::start(3, 0);
        let (ours, theirs) = cluster_pair(&cluster);
        let at = |key: &str| value(&cluster.nodes[cluster.owner(cluster.slot(key))], key);
        let tagged = slots(3);
        let fenced = LockOptions::new().fencing(true).wait(Duration::ZERO);
        let held0 = theirs.lock(&tagged[0]).unwrap();
        let g = ours.lock_any_with(&tagged, &fenced).unwrap().unwrap();
        assert_ne!(g.index(), 0);
        assert!(g.fence().is_some());
        assert!(at(g.key()).is_some());
        drop((g, held0));
        // Names on several slots, most likely on several masters.
        let spread = ["alpha", "beta", "gamma", "delta"];
        let slot_set: BTreeSet<u16> = spread
            .iter()
            .map(|n| cluster.slot(&format!("lock:{n}")))
            .collect();
        assert!(slot_set.len() > 1);
        let mut held: Vec<_> = spread[..3]
            .iter()
            .map(|n| Some(theirs.lock(n).unwrap()))
            .collect();
        let g = ours.try_lock_any(&spread).unwrap().expect("delta is free");
        assert_eq!(g.name(), "delta");
        assert!(at("lock:delta").is_some());
        thread::scope(|s| {
            let waiting = s.spawn(|| ours.try_lock_any_for(&spread[..3], ROOMY).unwrap());
            assert!(eventually(ROOMY, || at("lock:beta").is_some_and(|v| v.ends_with('+'))));
            drop(held[1].take());
            let got = waiting.join().unwrap().expect("taken after the release");
            assert_eq!(got.name(), "beta");
        });
    }
}
