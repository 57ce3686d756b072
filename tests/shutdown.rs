//! `LockClient::shutdown`: every lease the client's guards hold released before the
//! process goes (owner-checked, within a deadline), waiters woken, new calls
//! refused, and what the guards say and send afterwards; on one server, through a
//! silent proxy, on a paused server, on a cluster and on a Redlock quorum.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{
    Error, LockClient, LockClientBuilder, LockGuard, LockOptions, LossReason, Scheme,
    ShutdownReport,
};
use support::proxy::Proxy;
use support::{Masters, RedisServer, eventually};

/// Room for a 200 ms stall of a loaded 2-core machine, several times over.
const SLACK: Duration = Duration::from_secs(1);

fn builder(url: &str) -> LockClientBuilder {
    LockClient::builder(url).key_prefix("lock:")
}

fn report(released: usize, already_gone: usize, failed: usize) -> ShutdownReport {
    let mut r = ShutdownReport::default();
    r.released = released;
    r.already_gone = already_gone;
    r.failed = failed;
    r
}

fn in_secs(n: u64) -> Instant {
    Instant::now() + Duration::from_secs(n)
}

/// What a lease's `lost()` receiver got, at once.
fn told(lost: &crossbeam_channel::Receiver<redlease::LeaseLost>) -> Option<LossReason> {
    lost.try_recv().ok().map(|m| m.reason)
}

#[test]
fn shutdown_releases_every_kind_of_lease_and_counts_them() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let other = builder(&server.url()).build().unwrap();
    let tokens: Vec<LockGuard> = (0..3)
        .map(|i| client.lock(&format!("token{i}")).unwrap())
        .collect();
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    let outer = client.lock_with("nested", &reentrant).unwrap().unwrap();
    let inner = client.lock_with("nested", &reentrant).unwrap().unwrap();
    let rw = client.read_write_lock("rw").unwrap();
    let read = rw.read().unwrap();
    let write = client.read_write_lock("rw-w").unwrap().write().unwrap();
    let sem = client.semaphore("sem").unwrap();
    sem.set_permits(3).unwrap();
    let permits = [sem.acquire().unwrap(), sem.acquire().unwrap()];
    let fair = client.fair_lock("fair").unwrap().lock().unwrap();
    assert_eq!(
        other.semaphore("sem").unwrap().available_permits().unwrap(),
        1
    );
    let lost = [
        tokens[0].lost().clone(),
        outer.lost().clone(),
        read.lost().clone(),
    ];

    let started = Instant::now();
    let done = client.shutdown(in_secs(10));
    assert_eq!(done, report(10, 0, 0), "{done:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );

    for key in ["token0", "token1", "token2", "nested", "rw", "rw-w", "fair"] {
        assert!(
            !server.exists(&format!("lock:{key}")),
            "`{key}` still there"
        );
    }
    assert_eq!(
        other.semaphore("sem").unwrap().available_permits().unwrap(),
        3,
        "both permits given back"
    );
    assert!(tokens.iter().all(|g| !g.is_held()));
    assert!(!outer.is_held() && !inner.is_held());
    assert!(!read.is_held() && !write.is_held() && !fair.is_held());
    assert!(permits.iter().all(|p| !p.is_held()));
    for rx in &lost {
        assert_eq!(told(rx), Some(LossReason::Released));
    }
    assert_eq!(client.metrics().leases_lost, 0, "a shutdown is no loss");
    assert_eq!(client.shutdown(in_secs(10)), report(0, 0, 0), "idempotent");
}

#[test]
fn hundreds_of_leases_are_all_released() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let n = 500;
    let guards: Vec<LockGuard> = (0..n)
        .map(|i| client.lock(&format!("many{i}")).unwrap())
        .collect();
    let started = Instant::now();
    let done = client.shutdown(in_secs(30));
    let took = started.elapsed();
    eprintln!("shutdown of {n} leases took {took:?}");
    assert_eq!(done, report(n, 0, 0), "{done:?}");
    let left: Vec<String> = server.query(redis::cmd("KEYS").arg("lock:many*"));
    assert!(left.is_empty(), "{} keys left", left.len());
    assert!(guards.iter().all(|g| !g.is_held()));
}

#[test]
fn a_key_taken_over_meanwhile_is_left_untouched_and_not_counted() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let taken = client.lock("taken").unwrap();
    let gone = client.lock("gone").unwrap();
    let kept = client.lock("kept").unwrap();
    // Someone else holds `taken` now; `gone` was deleted.
    let _: () = server.query(redis::cmd("SET").arg("lock:taken").arg("someone-else"));
    let _: () = server.query(redis::cmd("DEL").arg("lock:gone"));

    let done = client.shutdown(in_secs(10));
    assert_eq!(done, report(1, 2, 0), "{done:?}");
    let value = server.value("lock:taken");
    assert_eq!(
        value.as_deref(),
        Some("someone-else"),
        "another holder's key left untouched"
    );
    assert!(!server.exists("lock:kept"));
    assert_eq!(told(taken.lost()), Some(LossReason::Taken));
    assert_eq!(told(gone.lost()), Some(LossReason::Expired));
    assert_eq!(told(kept.lost()), Some(LossReason::Released));
}

#[test]
fn shutdown_returns_by_its_deadline_through_a_silent_network_and_renewal_stops() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let ttl = Duration::from_secs(3);
    let client = builder(&proxy.url())
        .ttl(ttl)
        .read_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let guards: Vec<LockGuard> = (0..20)
        .map(|i| client.lock(&format!("k{i}")).unwrap())
        .collect();
    client.flush();
    proxy.discard(true);

    let started = Instant::now();
    let deadline = started + Duration::from_millis(500);
    let done = client.shutdown(deadline);
    let took = started.elapsed();
    assert_eq!(done, report(0, 0, 20), "{done:?}");
    assert!(
        took < Duration::from_millis(500) + SLACK,
        "returned {took:?} after it began, with a 500 ms deadline"
    );
    assert!(guards.iter().all(|g| !g.is_held()));
    assert_eq!(told(guards[0].lost()), Some(LossReason::Released));
    proxy.discard(false);
    assert!(server.exists("lock:k0"), "no release reached the server");
    // Nothing renews the leases any more: they expire with their TTL (the renewal
    // interval is a third of it, so renewed keys would outlive this).
    let expired = eventually(ttl * 2, || {
        (0..20).all(|i| !server.exists(&format!("lock:k{i}")))
    });
    assert!(expired, "leases still renewed after shutdown");
}

#[test]
fn shutdown_returns_by_its_deadline_when_the_server_is_paused() {
    let server = RedisServer::start();
    let client = builder(&server.url())
        .read_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let guards: Vec<LockGuard> = (0..10)
        .map(|i| client.lock(&format!("p{i}")).unwrap())
        .collect();
    server.pause();
    let started = Instant::now();
    let done = client.shutdown(started + Duration::from_millis(500));
    let took = started.elapsed();
    server.resume();
    assert_eq!(done, report(0, 0, 10), "{done:?}");
    assert!(took < Duration::from_millis(500) + SLACK, "took {took:?}");
    assert!(guards.iter().all(|g| !g.is_held()));
}

#[test]
fn waiters_are_woken_with_shutdown_and_new_calls_refused() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let rival = builder(&server.url()).build().unwrap();
    let guard = client.lock("busy").unwrap();
    let start = Arc::new(Barrier::new(3));
    let local = {
        let (client, start) = (client.clone(), Arc::clone(&start));
        thread::spawn(move || {
            start.wait();
            client.lock("busy").map(|g| g.key().to_owned())
        })
    };
    let remote = {
        let (rival, start) = (rival.clone(), Arc::clone(&start));
        thread::spawn(move || {
            start.wait();
            let got = rival.try_lock_for("busy", Duration::from_secs(20));
            got.map(|g| g.map(LockGuard::unlock))
        })
    };
    start.wait();
    // Both have tried once and are waiting.
    let waiting = eventually(Duration::from_secs(10), || {
        client.metrics().attempts >= 2 && rival.metrics().attempts >= 1
    });
    assert!(waiting);
    let began = Instant::now();
    assert_eq!(client.shutdown(in_secs(10)), report(1, 0, 0));
    let woken = local.join().unwrap();
    assert!(matches!(woken, Err(Error::Shutdown)), "{woken:?}");
    // The lock went to the other client's waiter, woken by the release message,
    // not handed to this client's waiter.
    let remote = remote.join().unwrap();
    assert!(matches!(remote, Ok(Some(Ok(_)))), "{remote:?}");
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(!guard.is_held());

    assert!(matches!(client.try_lock("new"), Err(Error::Shutdown)));
    assert!(matches!(client.lock("new"), Err(Error::Shutdown)));
    let sem = client.semaphore("sem").unwrap();
    assert!(matches!(sem.try_acquire(), Err(Error::Shutdown)));
    assert!(!server.exists("lock:new"));
}

#[test]
fn guards_used_after_shutdown_send_nothing() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let extended = client.lock("a").unwrap();
    let unlocked = client.lock("b").unwrap();
    let dropped = client.lock("c").unwrap();
    let permit = {
        let sem = client.semaphore("sem").unwrap();
        sem.set_permits(1).unwrap();
        sem.acquire().unwrap()
    };
    assert_eq!(client.shutdown(in_secs(10)), report(4, 0, 0));
    server.reset_stats();

    assert!(matches!(
        extended.extend(Duration::from_secs(30)),
        Err(Error::Shutdown)
    ));
    assert!(extended.check().is_err());
    assert!(matches!(unlocked.unlock(), Err(Error::Shutdown)));
    assert!(matches!(permit.unlock(), Err(Error::Shutdown)));
    drop(dropped);
    drop(extended);
    client.flush();
    for cmd in ["evalsha", "eval", "del", "set", "publish"] {
        assert_eq!(server.command_calls(cmd), 0, "`{cmd}` sent after shutdown");
    }
}

#[test]
fn the_on_lost_callback_hears_of_the_release_off_the_callers_thread() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let opts = LockOptions::new().on_lost(move |lost| {
        let _ = tx.send((lost.reason, thread::current().id()));
    });
    let guard = client.lock_with("cb", &opts).unwrap().unwrap();
    assert_eq!(client.shutdown(in_secs(10)), report(1, 0, 0));
    let (reason, on) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(reason, LossReason::Released);
    assert_ne!(on, thread::current().id(), "the callback ran on the caller");
    assert!(!guard.is_held());
}

#[test]
fn with_lock_reports_the_lock_lost_when_a_shutdown_ends_it_midway() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let inside = client.clone();
    let out = client.with_lock("w", || inside.shutdown(in_secs(10)));
    assert!(matches!(out, Err(Error::LockLost { .. })), "{out:?}");
    assert!(!server.exists("lock:w"));
}

#[test]
fn redlock_leases_are_released_on_every_master() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let client = LockClient::redlock(urls.iter().map(String::as_str))
        .key_prefix("lock:")
        .build()
        .unwrap();
    let guards: Vec<LockGuard> = (0..5)
        .map(|i| client.lock(&format!("r{i}")).unwrap())
        .collect();
    assert_eq!(client.shutdown(in_secs(10)), report(5, 0, 0));
    // Released once a majority has deleted it; the last master's delete, sent at
    // the same time, lands a moment later.
    for server in &masters.servers {
        for i in 0..5 {
            let key = format!("lock:r{i}");
            assert!(
                eventually(Duration::from_secs(5), || !server.exists(&key)),
                "{key}"
            );
        }
    }
    assert!(guards.iter().all(|g| !g.is_held()));
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_leases_on_several_slots_are_released_on_their_masters() {
    use support::cluster::Cluster;
    let cluster = Cluster::start(3, 0);
    let client = cluster.client();
    let names: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    let masters: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| cluster.owner(cluster.slot(&format!("lock:{n}"))))
        .collect();
    assert!(masters.len() > 1, "the names share one master");
    let guards: Vec<LockGuard> = names.iter().map(|n| client.lock(n).unwrap()).collect();
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    let nested = client.lock_with("c-re", &reentrant).unwrap().unwrap();
    assert_eq!(client.shutdown(in_secs(10)), report(13, 0, 0));
    for name in names.iter().chain([&"c-re".to_owned()]) {
        let key = format!("lock:{name}");
        let master = &cluster.nodes[cluster.owner(cluster.slot(&key))];
        assert!(!master.exists(&key), "`{key}` still on its master");
    }
    assert!(guards.iter().all(|g| !g.is_held()) && !nested.is_held());
}
