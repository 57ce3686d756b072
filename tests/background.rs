//! `LockClientBuilder::release_in_background`: a dropped guard's release queued for
//! the I/O thread, which sends the queued releases together. The keys go, waiters
//! of other clients are woken, a later lock of the same name in the same client is
//! never reported busy because of it nor held twice, a shutdown counts what was
//! queued, and `unlock` still answers.

mod support;

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient, LockClientBuilder, LockOptions, Release};
use support::{RedisServer, eventually};

/// Room for a 200 ms stall of a loaded 2-core machine, several times over.
const SLACK: Duration = Duration::from_secs(5);

fn builder(url: &str) -> LockClientBuilder {
    LockClient::builder(url)
        .key_prefix("lock:")
        .release_in_background(true)
}

/// Keys matching `pattern` on the server (`SCAN`, all of them).
fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut conn = server.conn();
    let iter: redis::Iter<'_, String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter(&mut conn)
        .unwrap();
    iter.map(Result::unwrap).collect()
}

/// Clients subscribed to `key`'s release channel.
fn subscribers(server: &RedisServer, key: &str) -> i64 {
    let channel = format!("{{{key}}}:released");
    let reply: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
    reply.1
}

#[test]
fn ten_thousand_guards_dropped_in_the_background_leave_no_key_once_the_client_is_dropped() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let n = 10_000;
    let guards: Vec<_> = (0..n)
        .map(|i| client.try_lock(&format!("item:{i}")).unwrap().unwrap())
        .collect();
    assert_eq!(keys(&server, "lock:item:*").len(), n);
    let dropped = Instant::now();
    drop(guards);
    // Each drop only queued its release.
    let took = dropped.elapsed();
    assert!(took < SLACK, "dropping the guards took {took:?}");
    let began = Instant::now();
    drop(client);
    let took = began.elapsed();
    // The drop waits for the queued releases up to the read timeout (2 s).
    assert!(
        took < Duration::from_secs(2) + SLACK,
        "the drop took {took:?}"
    );
    let left = keys(&server, "lock:item:*");
    assert!(
        left.is_empty(),
        "{} keys left, e.g. {:?}",
        left.len(),
        left.first()
    );
}

#[test]
fn background_releases_count_as_releases() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    for i in 0..100 {
        drop(client.lock(&format!("m{i}")).unwrap());
    }
    assert!(eventually(SLACK, || client.metrics().released == 100));
    assert_eq!(client.metrics().release_errors, 0);
    assert!(eventually(SLACK, || keys(&server, "lock:m*").is_empty()));
}

#[test]
fn a_waiter_of_another_client_is_woken_by_a_background_release() {
    let server = RedisServer::start();
    let holder = builder(&server.url()).build().unwrap();
    // Polls only every 10 s, and the held lock lasts 30 s: a quick wake-up below
    // is the release message.
    let waiter = LockClient::builder(server.url())
        .key_prefix("lock:")
        .backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap();
    support::assert_woken(|| {
        let guard = holder.lock("k").unwrap();
        guard.extend(Duration::from_secs(30)).unwrap();
        let (before, woken) = (waiter.metrics().attempts, waiter.metrics().wakeups);
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                let g = waiter.try_lock_for("k", Duration::from_secs(20)).unwrap();
                let m = waiter.metrics();
                let got = g.map(|g| g.unlock().unwrap());
                (got, Instant::now(), m)
            });
            // Subscribed, and the attempt its subscription's confirmation makes sent.
            let queued = support::wait_for(Duration::from_secs(10), || {
                let attempts = waiter.metrics().attempts;
                (subscribers(&server, "lock:k") >= 1 && attempts >= before + 2).then_some(attempts)
            });
            let queued = queued.expect("the waiter did not queue");
            let released = Instant::now();
            drop(guard);
            let (got, at, m) = waiting.join().unwrap();
            assert_eq!(got, Some(Release::Released), "the waiter got the lock");
            let took = at.duration_since(released);
            assert!(took < SLACK, "{took:?}");
            support::WakeRound {
                queued,
                acquired: m.attempts,
                wakeups: m.wakeups - woken,
            }
        })
    });
}

#[test]
fn the_same_name_is_never_busy_right_after_a_background_drop_from_one_thread() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    for round in 0..2_000 {
        let guard = client.try_lock("again").unwrap();
        assert!(guard.is_some(), "reported busy in round {round}");
    }
    assert!(eventually(SLACK, || keys(&server, "lock:again").is_empty()));
}

#[test]
fn the_same_name_is_never_busy_right_after_a_background_drop_from_several_threads() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let threads = 4;
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        for t in 0..threads {
            let (client, barrier) = (&client, &barrier);
            s.spawn(move || {
                barrier.wait();
                for round in 0..500 {
                    let guard = client.try_lock(&format!("own:{t}")).unwrap();
                    assert!(guard.is_some(), "thread {t} busy in round {round}");
                }
            });
        }
    });
    assert!(eventually(SLACK, || keys(&server, "lock:own:*").is_empty()));
}

#[test]
fn threads_taking_one_name_in_turn_never_hold_it_together() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let (threads, rounds) = (4, 250 * support::stress_factor());
    let inside = AtomicBool::new(false);
    let taken = AtomicUsize::new(0);
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        for _ in 0..threads {
            let (client, server) = (&client, &server);
            let (inside, taken, barrier) = (&inside, &taken, &barrier);
            s.spawn(move || {
                let mut conn = server.conn();
                barrier.wait();
                for _ in 0..rounds {
                    let guard = client.lock("shared").unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    // A plain read and write, exact only under the lock.
                    let n: u64 = redis::cmd("GET")
                        .arg("count")
                        .query::<Option<u64>>(&mut conn)
                        .unwrap()
                        .unwrap_or(0);
                    let () = redis::cmd("SET")
                        .arg("count")
                        .arg(n + 1)
                        .query(&mut conn)
                        .unwrap();
                    taken.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    drop(guard);
                }
            });
        }
    });
    let total = threads * rounds;
    assert_eq!(taken.load(Ordering::SeqCst), total);
    let count: u64 = server.query(redis::cmd("GET").arg("count"));
    assert_eq!(count, total as u64);
    // The same, alternating with try_lock from one more thread.
    assert!(eventually(SLACK, || keys(&server, "lock:shared").is_empty()));
}

#[test]
fn a_dropped_guard_reports_no_loss() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let guard = client.lock("quiet").unwrap();
    let lost = guard.lost().clone();
    let called = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&called);
    let opts = LockOptions::new().on_lost(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let with_callback = client.lock_with("called", &opts).unwrap().unwrap();
    drop(guard);
    drop(with_callback);
    // The same names again: after the queued releases' answers.
    drop(client.try_lock("quiet").unwrap().expect("not busy"));
    drop(client.try_lock("called").unwrap().expect("not busy"));
    let client_gone = Instant::now();
    // Joins the thread that runs the callbacks.
    drop(client);
    assert!(client_gone.elapsed() < SLACK);
    assert_eq!(called.load(Ordering::SeqCst), 0, "a loss was reported");
    // Disconnected once the lease is dropped, never a loss message.
    assert!(matches!(
        lost.recv_timeout(SLACK),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn shutdown_counts_the_releases_queued_before_it_as_released() {
    let server = RedisServer::start();
    // A pause below is far shorter than the read timeout: the queued releases are
    // answered once the server runs again, not failed. Waits poll every 10 s.
    let client = builder(&server.url())
        .read_timeout(Duration::from_secs(20))
        .backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap();
    let other = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    let n = 50;
    let guards: Vec<_> = (0..n)
        .map(|i| client.lock(&format!("queued:{i}")).unwrap())
        .collect();
    let gate = other.lock("gate").unwrap();
    let report = thread::scope(|s| {
        // A caller waiting for a lock another client holds: woken with
        // `Error::Shutdown` once the shutdown has begun.
        let before = client.metrics().attempts;
        let waiting = s.spawn(|| client.try_lock_for("gate", Duration::from_secs(60)));
        let queued = eventually(SLACK, || {
            subscribers(&server, "lock:gate") >= 1 && client.metrics().attempts >= before + 2
        });
        assert!(queued, "the waiter did not queue");
        // None of the releases can land before the shutdown begins.
        server.pause();
        drop(guards);
        let stopping = s.spawn(|| client.shutdown(Instant::now() + Duration::from_secs(30)));
        let woken = waiting.join().unwrap();
        server.resume();
        assert!(matches!(woken, Err(Error::Shutdown)), "{woken:?}");
        stopping.join().unwrap()
    });
    assert_eq!(report.released, n, "{report:?}");
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.already_gone, 0, "{report:?}");
    assert!(keys(&server, "lock:queued:*").is_empty());
    drop(gate);
}

#[test]
fn unlock_in_background_mode_still_answers_what_redis_found() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let guard = client.lock("typed").unwrap();
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(keys(&server, "lock:typed").is_empty());
    let guard = client.lock("typed").unwrap();
    let () = server.query(redis::cmd("DEL").arg("lock:typed"));
    assert_eq!(guard.unlock().unwrap(), Release::Expired);
}

#[test]
fn a_lock_asks_for_a_background_release_on_its_own() {
    let server = RedisServer::start();
    // Without the client-wide option; a release waited for on a stopped server
    // would take the read timeout, 20 s.
    let client = LockClient::builder(server.url())
        .key_prefix("lock:")
        .read_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let opts = LockOptions::new().release_in_background(true);
    let guard = client.lock_with("own", &opts).unwrap().unwrap();
    server.pause();
    let dropped = Instant::now();
    drop(guard);
    let took = dropped.elapsed();
    server.resume();
    assert!(took < SLACK, "the drop waited {took:?}");
    assert!(eventually(SLACK, || keys(&server, "lock:own").is_empty()));
    assert!(eventually(SLACK, || client.metrics().released == 1));
}

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_client_releases_in_the_background_on_each_master() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let client = LockClient::cluster(cluster.urls())
        .key_prefix("lock:")
        .release_in_background(true)
        .build()
        .unwrap();
    for round in 0..200 {
        let guard = client.try_lock("again").unwrap();
        assert!(guard.is_some(), "reported busy in round {round}");
    }
    let guards: Vec<_> = (0..300)
        .map(|i| client.try_lock(&format!("c{i}")).unwrap().unwrap())
        .collect();
    drop(guards);
    assert!(eventually(SLACK, || client.metrics().released == 500));
    drop(client);
    for node in &cluster.nodes {
        assert!(keys(node, "lock:c*").is_empty());
        assert!(keys(node, "lock:again").is_empty());
    }
}

#[test]
fn a_redlock_client_releases_on_the_dropping_thread() {
    let masters = support::Masters::start(3);
    let urls = masters.urls();
    let client = LockClient::redlock(urls.iter().map(String::as_str))
        .key_prefix("lock:")
        .release_in_background(true)
        .build()
        .unwrap();
    for round in 0..50 {
        let guard = client.try_lock("quorum").unwrap();
        assert!(guard.is_some(), "reported busy in round {round}");
        drop(guard);
        // The quorum's release was waited for, up to a majority's answers.
        let freed = masters
            .servers
            .iter()
            .filter(|s| keys(s, "lock:quorum").is_empty())
            .count();
        assert!(freed >= 2, "round {round}: {freed} nodes freed");
    }
    let freed = || {
        masters
            .servers
            .iter()
            .all(|s| keys(s, "lock:quorum").is_empty())
    };
    assert!(eventually(SLACK, freed));
}

#[test]
fn a_guard_dropped_after_its_client_still_releases() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let guard = client.lock("late").unwrap();
    drop(client);
    let dropped = Instant::now();
    drop(guard);
    assert!(dropped.elapsed() < SLACK);
    assert!(eventually(SLACK, || keys(&server, "lock:late").is_empty()));
}

#[test]
fn a_lock_of_a_name_whose_release_is_still_queued_takes_the_lease_back_with_no_round_trip() {
    let server = RedisServer::start();
    let client = builder(&server.url())
        .read_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // A round is conclusive when the I/O thread took `other`'s release alone and
    // is waiting on the paused server while `k`'s is queued behind it; otherwise
    // (both taken in one write, a stall) it is played again.
    let took_back = (0..8).any(|round| {
        let (k, o) = (format!("k{round}"), format!("o{round}"));
        let guard = client.lock(&k).unwrap();
        let token = server.value(&format!("lock:{k}")).unwrap();
        let other = client.lock(&o).unwrap();
        let (handoffs, released) = (client.metrics().handoffs, client.metrics().released);
        server.pause();
        drop(other);
        drop(guard);
        // Taken back, it answers while the server is paused: nothing was sent.
        let again = client.try_lock(&k);
        let back = client.metrics().handoffs == handoffs + 1;
        server.resume();
        let again = match again {
            Ok(Some(again)) if back => again,
            // Its release was on the wire already: the lock waited for it.
            Ok(other) => {
                drop(other);
                return false;
            }
            Err(_) => return false,
        };
        assert!(again.is_held());
        // `other`'s release is answered; `k`'s was never sent: its token stays.
        assert!(eventually(SLACK, || client.metrics().released > released + 1));
        assert_eq!(server.value(&format!("lock:{k}")), Some(token));
        assert_eq!(again.unlock().unwrap(), Release::Released);
        assert!(server.value(&format!("lock:{k}")).is_none());
        true
    });
    assert!(
        took_back,
        "no lock took a queued release's lease back in 8 rounds"
    );
}

/// A thread that takes and drops one name in a tight loop leaves another
/// client's waiter its turn: the lease is taken back a few times in a row at
/// most (as a streak of local hand-offs is), then released for real.
#[test]
fn a_tight_loop_of_dropped_guards_leaves_another_clients_waiter_its_turn() {
    let server = RedisServer::start();
    let looping = builder(&server.url()).build().unwrap();
    let waiter = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    for round in 0..3 {
        let stop = AtomicBool::new(false);
        let acquired = looping.metrics().acquired;
        thread::scope(|s| {
            let looper = s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) && n < 50_000_000 {
                    drop(looping.lock("k").unwrap());
                    n += 1;
                }
            });
            assert!(eventually(SLACK, || looping.metrics().acquired > acquired + 100));
            let at = Instant::now();
            let got = waiter.try_lock_for("k", Duration::from_secs(10)).unwrap();
            let took = at.elapsed();
            stop.store(true, Ordering::SeqCst);
            let had = got.map(|g| g.unlock().unwrap());
            looper.join().unwrap();
            assert_eq!(
                had,
                Some(Release::Released),
                "round {round}: no turn in {took:?}"
            );
        });
    }
    // The loop took leases back (what could have kept the waiter out).
    assert!(looping.metrics().handoffs > 0, "{:?}", looping.metrics());
}
