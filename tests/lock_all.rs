//! Several names, all or none: `lock_all` and `MultiGuard` against real servers
//! (one server, a Redis Cluster, a Redlock quorum), Redis read directly.
mod support;

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{CancelToken, Error, LockClient, LockOptions, LossReason, Release, Scheme};
use support::clients::{marked_on_any, polling_rarely, prefixed as client, redlock_pair};
use support::proxy::Proxy;
use support::{Masters, RedisServer, eventually, stress_factor};

/// Time enough for anything a loaded machine does.
const ROOMY: Duration = Duration::from_secs(20);

/// One increment as a plain read, yield, write: two holders at once lose one.
fn increment(counter: &AtomicU64) {
    let n = counter.load(Ordering::SeqCst);
    thread::yield_now();
    counter.store(n + 1, Ordering::SeqCst);
}

#[test]
fn lock_all_takes_every_name_and_unlock_releases_and_reports_each() {
    let server = RedisServer::start();
    let client = client(&server);
    let guard = client.lock_all(&["a", "b", "c"]).unwrap();
    assert_eq!(guard.keys(), ["lock:a", "lock:b", "lock:c"]);
    assert!(guard.is_held());
    guard.check().unwrap();
    assert_eq!(guard.fences(), None);
    for key in ["lock:a", "lock:b", "lock:c"] {
        let v = server.value(key).unwrap();
        assert!(v.starts_with("rl2:"), "{key} holds {v}");
        let pttl = server.pttl(key);
        assert!(pttl > 0, "{key} has no TTL");
    }
    // One of them expired early, one taken by someone else: each is reported.
    let _: () = server.query(redis::cmd("DEL").arg("lock:b"));
    let _: () = server.query(redis::cmd("SET").arg("lock:c").arg("someone-else"));
    let released: Vec<Release> = guard.unlock().into_iter().map(Result::unwrap).collect();
    assert_eq!(
        released,
        [Release::Released, Release::Expired, Release::Taken]
    );
    assert!(!server.exists("lock:a"));
    assert_eq!(server.value("lock:c").as_deref(), Some("someone-else"));
}

#[test]
fn unlock_is_one_call_and_wakes_another_clients_waiter_for_a_name() {
    let server = RedisServer::start();
    let ours = client(&server);
    let waiter = polling_rarely(&server);
    let names = ["w1", "w2", "w3", "w4"];
    let guard = ours.lock_all(&names).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.try_lock_for("w3", Duration::from_secs(25)).unwrap();
            (Instant::now(), got)
        });
        assert!(eventually(ROOMY, || server
            .value("lock:w3")
            .is_some_and(|v| v.ends_with('+'))));
        server.reset_stats();
        let released = Instant::now();
        let outcomes = guard.unlock();
        assert!(outcomes.into_iter().all(|r| r.unwrap().was_held()));
        // One script for the four names: one call, four deletes.
        assert_eq!(server.command_calls("evalsha"), 1);
        assert_eq!(server.command_calls("del"), 4);
        let (woke, got) = waiting.join().unwrap();
        assert!(got.is_some());
        let after = woke.duration_since(released);
        assert!(
            after < Duration::from_secs(10),
            "woke {after:?} after release"
        );
    });
}

#[test]
fn a_caller_of_the_same_client_waiting_for_a_name_gets_it_at_unlock() {
    let server = RedisServer::start();
    let ours = polling_rarely(&server);
    let guard = ours.lock_all(&["h1", "h2"]).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = ours.try_lock_for("h2", Duration::from_secs(25)).unwrap();
            (Instant::now(), got)
        });
        assert!(eventually(ROOMY, || server
            .value("lock:h2")
            .is_some_and(|v| v.ends_with('+'))));
        let released = Instant::now();
        assert!(guard.unlock().into_iter().all(|r| r.unwrap().was_held()));
        let (woke, got) = waiting.join().unwrap();
        let got = got.expect("handed the name, or woken for it");
        assert!(got.is_held());
        assert!(woke.duration_since(released) < Duration::from_secs(10));
        assert!(!server.exists("lock:h1"));
    });
}

#[test]
fn dropping_the_guard_releases_every_name() {
    let server = RedisServer::start();
    let client = client(&server);
    let names = vec!["x".to_string(), "y".to_string()];
    drop(client.lock_all(&names).unwrap());
    assert!(!server.exists("lock:x") && !server.exists("lock:y"));
    // Taken again at once by another client: nothing was left behind.
    let other = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    assert!(other.try_lock_all(&names).unwrap().is_some());
}

#[test]
fn a_busy_name_leaves_every_other_name_unset() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server), client(&server));
    let held = theirs.lock("b").unwrap();
    assert!(ours.try_lock_all(&["a", "b", "c"]).unwrap().is_none());
    assert!(!server.exists("lock:a"));
    assert!(!server.exists("lock:c"));
    let waited = ours
        .try_lock_all_for(&["a", "b", "c"], Duration::from_millis(300))
        .unwrap();
    assert!(waited.is_none());
    assert!(!server.exists("lock:a") && !server.exists("lock:c"));
    drop(held);
    assert!(ours.try_lock_all(&["a", "b", "c"]).unwrap().is_some());
}

#[test]
fn a_waiting_lock_all_holds_none_and_wakes_on_the_release_of_the_busy_name() {
    let server = RedisServer::start();
    let ours = polling_rarely(&server);
    let theirs = client(&server);
    let other = client(&server);
    let holder = theirs
        .lock_with("b", &LockOptions::new().ttl(Duration::from_secs(30)))
        .unwrap()
        .unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = ours
                .try_lock_all_for(&["a", "b", "c"], Duration::from_secs(25))
                .unwrap();
            (Instant::now(), got)
        });
        // The waiter found `b` busy and marked its holder's token.
        assert!(eventually(ROOMY, || server
            .value("lock:b")
            .is_some_and(|v| v.ends_with('+'))));
        // While it waits, it holds none: another client takes and releases each
        // other name, and Redis never shows them set by the waiter.
        for round in 0..3 {
            for name in ["a", "c"] {
                assert!(!server.exists(&format!("lock:{name}")), "round {round}");
                let g = other.try_lock(name).unwrap().expect("a free name");
                assert_eq!(g.unlock().unwrap(), Release::Released);
            }
        }
        assert!(!waiting.is_finished());
        let released = Instant::now();
        assert!(holder.unlock().unwrap().was_held());
        let (woke, got) = waiting.join().unwrap();
        let guard = got.expect("acquired once `b` was released");
        // Woken by the release message: the 30 s holder TTL and the 30 s polling
        // step are both far off.
        let after = woke.duration_since(released);
        assert!(
            after < Duration::from_secs(10),
            "woke {after:?} after release"
        );
        assert!(guard.is_held());
        for key in guard.keys() {
            assert!(server.exists(key));
        }
    });
}

/// Two callers (a client each) take `names`, one in the order given and one in
/// the reverse order, `rounds` times each, incrementing a counter under the set:
/// both complete within a bound, and no increment is lost.
fn opposite_orders_complete(clients: &[LockClient; 2], names: &[&str], rounds: usize) {
    let counter = AtomicU64::new(0);
    let barrier = Barrier::new(2);
    let began = Instant::now();
    thread::scope(|s| {
        for (t, c) in clients.iter().enumerate() {
            let (counter, barrier) = (&counter, &barrier);
            let mut names = names.to_vec();
            if t == 1 {
                names.reverse();
            }
            s.spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    let g = c
                        .try_lock_all_for(&names, ROOMY)
                        .unwrap()
                        .expect("no deadlock");
                    increment(counter);
                    assert!(g.unlock().into_iter().all(|r| r.unwrap().was_held()));
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 2 * rounds as u64);
    let took = began.elapsed();
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn a_cancelled_wait_returns_cancelled_and_holds_none() {
    let server = RedisServer::start();
    let (ours, theirs) = (polling_rarely(&server), client(&server));
    let held = theirs.lock("k2").unwrap();
    let cancel = CancelToken::new();
    let opts = LockOptions::new().cancel(cancel.clone());
    thread::scope(|s| {
        let waiting = s.spawn(|| ours.lock_all_with(&["k1", "k2"], &opts));
        assert!(eventually(ROOMY, || server
            .value("lock:k2")
            .is_some_and(|v| v.ends_with('+'))));
        let cancelled = Instant::now();
        cancel.cancel();
        let got = waiting.join().unwrap();
        assert!(matches!(got, Err(Error::Cancelled { .. })), "{got:?}");
        assert!(cancelled.elapsed() < Duration::from_secs(10));
    });
    assert!(!server.exists("lock:k1"));
    drop(held);
}

#[test]
fn callers_naming_the_same_names_in_opposite_orders_both_complete() {
    let server = RedisServer::start();
    let clients = [client(&server), client(&server)];
    opposite_orders_complete(&clients, &["p", "q", "r", "s"], 30 * stress_factor());
}

#[test]
fn fences_are_one_per_name_and_strictly_increasing() {
    let server = RedisServer::start();
    let client = client(&server);
    let fenced = LockOptions::new().fencing(true);
    let first = client
        .lock_all_with(&["f1", "f2", "f3"], &fenced)
        .unwrap()
        .unwrap();
    let a = first.fences().expect("fencing is on");
    assert_eq!(a.len(), 3);
    assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");
    drop(first);
    // A single lock of one of the names after them gets a higher fence.
    let single = client.lock_with("f2", &fenced).unwrap().unwrap();
    let mid = single.fence().unwrap();
    assert!(mid > a[2]);
    drop(single);
    let second = client
        .lock_all_with(&["f3", "f1"], &fenced)
        .unwrap()
        .unwrap();
    let b = second.fences().unwrap();
    assert!(b[0] > mid && b[1] > b[0], "{b:?}");
}

#[test]
fn renewal_keeps_every_name_past_its_ttl() {
    let server = RedisServer::start();
    let client = client(&server);
    let opts = LockOptions::new().ttl(Duration::from_secs(1));
    let guard = client.lock_all_with(&["r1", "r2"], &opts).unwrap().unwrap();
    let first: Vec<Option<String>> = guard.keys().iter().map(|k| server.value(k)).collect();
    // Well past the TTL (a timing test: 3 TTLs, renewals every third of one).
    thread::sleep(Duration::from_secs(3));
    assert!(guard.is_held());
    let now: Vec<Option<String>> = guard.keys().iter().map(|k| server.value(k)).collect();
    assert_eq!(first, now);
    assert!(guard.unlock().into_iter().all(|r| r.unwrap().was_held()));
}

#[test]
fn lost_fires_when_one_name_is_deleted() {
    let server = RedisServer::start();
    let client = client(&server);
    let opts = LockOptions::new().ttl(Duration::from_secs(2));
    let guard = client
        .lock_all_with(&["l1", "l2", "l3"], &opts)
        .unwrap()
        .unwrap();
    let lost = guard.lost().clone();
    assert!(lost.try_recv().is_err());
    let _: () = server.query(redis::cmd("DEL").arg("lock:l2"));
    let msg = lost.recv_timeout(ROOMY).expect("a loss message");
    assert_eq!(msg.key, "lock:l2");
    assert_eq!(msg.reason, LossReason::Expired);
    assert!(!guard.is_held());
    assert!(matches!(guard.check(), Err(Error::LockLost { key }) if &*key == "lock:l2"));
    let released: Vec<Release> = guard.unlock().into_iter().map(Result::unwrap).collect();
    assert_eq!(released[1], Release::Expired);
    assert!(released[0].was_held() && released[2].was_held());
}

#[test]
fn bad_input_is_a_typed_error() {
    let server = RedisServer::start();
    let client = client(&server);
    let none: [&str; 0] = [];
    assert!(matches!(
        client.try_lock_all(&none),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        client.try_lock_all(&["a", ""]),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        client.try_lock_all(&["a", "b", "a"]),
        Err(Error::Invalid { .. })
    ));
    let _: () = server.query(redis::cmd("HSET").arg("lock:h").arg("f").arg("1"));
    match client.try_lock_all(&["a", "h"]) {
        Err(Error::WrongFormat { key, .. }) => assert_eq!(&*key, "lock:h"),
        other => panic!("expected WrongFormat, got {other:?}"),
    }
    assert!(!server.exists("lock:a"));
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    assert!(matches!(
        client.lock_all_with(&["a", "b"], &reentrant),
        Err(Error::Unsupported { .. })
    ));
    // Nothing was written by any of them.
    assert!(!server.exists("lock:a") && !server.exists("lock:b"));
}

#[test]
fn a_lock_all_whose_reply_is_lost_leaves_none_of_its_names_held() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let read = Duration::from_millis(200);
    let client = LockClient::builder(proxy.url())
        .key_prefix("lock:")
        .connect_timeout(Duration::from_secs(3))
        .read_timeout(read)
        .write_timeout(read)
        .build()
        .unwrap();
    // The script is loaded first (straight on the server, by a client whose reads
    // a loaded machine's stall does not outlast), so the delayed call is the
    // script itself, not a NOSCRIPT.
    let other = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    drop(other.lock_all(&["warm"]).unwrap());
    server.reset_stats();
    proxy.delay(read * 2);
    match client.try_lock_all(&["a", "b", "c"]) {
        Err(e) => assert!(e.is_timeout(), "{e:?}"),
        Ok(got) => panic!("a reply later than the read timeout gave {got:?}"),
    }
    proxy.delay(Duration::ZERO);
    // The script reached Redis and set the three keys; they are taken out again.
    assert!(eventually(ROOMY, || server.command_calls("set") >= 3));
    assert!(eventually(ROOMY, || ["a", "b", "c"]
        .iter()
        .all(|n| !server.exists(&format!("lock:{n}")))));
    assert!(other.try_lock_all(&["a", "b", "c"]).unwrap().is_some());
}

#[test]
fn a_lock_user_takes_waits_and_reads_lock_all_names_without_type_and_without_exists_takes_nothing()
{
    use support::acl::{LOCK_RULE, VALKEY_RULE, lock_rule, set_user, without};
    let server = RedisServer::start();
    let user = |name: &str| {
        let url = format!("redis://{name}:pw-lock-all@127.0.0.1:{}/", server.port());
        LockClient::builder(url.as_str())
            .key_prefix("lock:")
            .fencing(true)
            .build()
            .unwrap()
    };
    // The documented rule, which has no `+type`: free names are counted by one
    // `EXISTS`, a busy one read with `GET`.
    set_user(&server, "plain", "pw-lock-all", &lock_rule(&server));
    let plain = user("plain");
    let guard = plain.try_lock_all(&["a", "b"]).unwrap().unwrap();
    assert_eq!(guard.fences().unwrap().len(), 2);
    assert!(plain.try_lock_all(&["c", "b"]).unwrap().is_none());
    assert!(!server.exists("lock:c"));
    let other = user("plain");
    thread::scope(|s| {
        let waiting = s.spawn(|| other.try_lock_all_for(&["c", "b"], ROOMY).unwrap());
        // It found `b` busy and marked the holder's token: it waits for the release.
        assert!(eventually(ROOMY, || server
            .value("lock:b")
            .is_some_and(|v| v.ends_with('+'))));
        assert!(guard.unlock().into_iter().all(|r| r.unwrap().was_held()));
        let got = waiting.join().unwrap().expect("taken after the release");
        assert_eq!(got.keys(), ["lock:c", "lock:b"]);
    });
    // A name of another type is named as such, its type unread (`TYPE` refused).
    let _: () = server.query(redis::cmd("HSET").arg("lock:h").arg("f").arg("1"));
    match plain.try_lock_all(&["d", "h"]) {
        Err(Error::WrongFormat { key, .. }) => assert_eq!(&*key, "lock:h"),
        other => panic!("expected WrongFormat, got {other:?}"),
    }
    assert!(!server.exists("lock:d"));
    // Without `+exists` the call fails with the refusal, and writes nothing.
    set_user(
        &server,
        "no-exists",
        "pw-lock-all",
        &[
            &without(LOCK_RULE, &["+exists"])[..],
            if server.has_conditional_commands() {
                &[VALKEY_RULE][..]
            } else {
                &[][..]
            },
        ]
        .concat(),
    );
    let blind = user("no-exists");
    assert!(matches!(
        blind.try_lock_all(&["e", "f"]),
        Err(Error::Redis(_))
    ));
    assert!(eventually(ROOMY, || !server.exists("lock:e")
        && !server.exists("lock:f")));
}

#[test]
fn redlock_takes_all_names_or_none_on_every_master() {
    let masters = Masters::start(3);
    let (ours, theirs) = redlock_pair(&masters);
    // Each name is a vote of its own: held on a majority of the masters.
    let on_majority = |key: &str| masters.servers.iter().filter(|m| m.exists(key)).count() >= 2;
    let guard = ours.lock_all(&["m1", "m2"]).unwrap();
    assert!(on_majority("lock:m1") && on_majority("lock:m2"));
    assert!(guard.unlock().into_iter().all(|r| r.unwrap().was_held()));
    let held = theirs.lock("m2").unwrap();
    assert!(ours.try_lock_all(&["m1", "m2", "m3"]).unwrap().is_none());
    // `m1` was taken before `m2` was found busy, and given back on every master.
    assert!(eventually(ROOMY, || masters
        .servers
        .iter()
        .all(|m| !m.exists("lock:m1") && !m.exists("lock:m3"))));
    thread::scope(|s| {
        let waiting = s.spawn(|| ours.try_lock_all_for(&["m3", "m2", "m1"], ROOMY).unwrap());
        // It found `m2` busy, marked its holder's token, and waits.
        assert!(eventually(ROOMY, || marked_on_any(&masters, "lock:m2")));
        drop(held);
        let got = waiting.join().unwrap().expect("taken after the release");
        assert_eq!(got.keys(), ["lock:m3", "lock:m2", "lock:m1"]);
    });
    // Taken one by one in key order: opposite orders neither deadlock nor spin.
    opposite_orders_complete(&[ours, theirs], &["o1", "o2", "o3"], 10 * stress_factor());
}

#[cfg(feature = "cluster")]
mod cluster {
    use super::*;
    use support::clients::cluster_pair;
    use support::cluster::Cluster;

    fn exists_in(cluster: &Cluster, key: &str) -> bool {
        let node = &cluster.nodes[cluster.owner(cluster.slot(key))];
        node.exists(key)
    }

    #[test]
    fn names_on_one_slot_are_taken_in_one_step_and_on_several_slots_one_by_one() {
        let cluster = Cluster::start(3, 0);
        let (ours, theirs) = cluster_pair(&cluster);
        // One slot (a hash tag), fenced: one script on that slot's master.
        let tagged = ["{order}:a", "{order}:b", "{order}:c"];
        let fenced = LockOptions::new().fencing(true);
        let g = ours.lock_all_with(&tagged, &fenced).unwrap().unwrap();
        let f = g.fences().unwrap();
        assert!(f.windows(2).all(|w| w[0] < w[1]));
        // Released in one script on the slot's master.
        assert!(g.unlock().into_iter().all(|r| r.unwrap().was_held()));
        for n in tagged {
            assert!(!exists_in(&cluster, &format!("lock:{n}")), "{n} left held");
        }
        let held = theirs.lock("{order}:b").unwrap();
        assert!(ours.try_lock_all(&tagged).unwrap().is_none());
        assert!(!exists_in(&cluster, "lock:{order}:a"));
        assert!(!exists_in(&cluster, "lock:{order}:c"));
        drop(held);
        // Several slots, most likely on several masters.
        let spread = ["alpha", "beta", "gamma", "delta"];
        let slots: std::collections::BTreeSet<u16> = spread
            .iter()
            .map(|n| cluster.slot(&format!("lock:{n}")))
            .collect();
        assert!(slots.len() > 1);
        let g = ours.lock_all_with(&spread, &fenced).unwrap().unwrap();
        assert_eq!(g.fences().unwrap().len(), 4);
        for n in spread {
            assert!(exists_in(&cluster, &format!("lock:{n}")));
        }
        drop(g);
        let held = theirs.lock("gamma").unwrap();
        assert!(ours.try_lock_all(&spread).unwrap().is_none());
        for n in ["alpha", "beta", "delta"] {
            assert!(!exists_in(&cluster, &format!("lock:{n}")), "{n} left held");
        }
        thread::scope(|s| {
            let waiting = s.spawn(|| ours.try_lock_all_for(&spread, ROOMY).unwrap());
            assert!(eventually(ROOMY, || {
                cluster.nodes[cluster.owner(cluster.slot("lock:gamma"))]
                    .value("lock:gamma")
                    .is_some_and(|v| v.ends_with('+'))
            }));
            drop(held);
            assert!(waiting.join().unwrap().is_some());
        });
        opposite_orders_complete(&[ours, theirs], &spread, 10 * stress_factor());
    }
}
