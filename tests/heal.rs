mod support;

// Healing: after a network outage heals, the next call works, whatever the
// pool did while the network was dark. The outage is a proxy that loses every byte
// both ways (`Proxy::discard`): a handshake sent in the dark is never answered.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockClientBuilder, LockOptions, Release};
use support::RedisServer;
use support::eventually;
use support::proxy::Proxy;

/// Read and write timeout of the clients (the setting); connect timeout default.
const READ: Duration = Duration::from_secs(1);
/// TTL of the lease held across each outage.
const TTL: Duration = Duration::from_millis(1500);
/// A call in the dark returns within the read timeout, plus scheduling on a loaded
/// machine.
const BOUND: Duration = Duration::from_millis(1500);
/// Outages in a row, each with calls made into it.
const OUTAGES: usize = 4;

fn builder(proxy: &Proxy) -> LockClientBuilder {
    LockClient::builder(proxy.url())
        .key_prefix("lock:")
        .read_timeout(READ)
        .write_timeout(READ)
}

/// Runs `f` and returns its result with how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

#[test]
fn the_first_calls_after_an_outage_heals_succeed() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = builder(&proxy).build().unwrap();
    let opts = LockOptions::new().ttl(TTL).wait(Duration::from_secs(5));
    let mut figures = Vec::new();
    for round in 0..OUTAGES {
        let guard = client.lock_with("bk", &opts).unwrap().expect("free");
        let before = proxy.accepted();
        proxy.discard(true);
        // Calls into the dark: each fails within its bound, its connection is thrown
        // away, and the pool opens new ones whose handshake is never answered.
        thread::scope(|s| {
            for t in 0..3 {
                let client = &client;
                s.spawn(move || {
                    for i in 0..2 {
                        let key = format!("dark:{round}:{t}:{i}");
                        let (r, took) = timed(|| client.try_lock(&key));
                        let err = r.expect_err("no answer in the dark");
                        assert!(err.is_timeout(), "{err:?}");
                        assert!(took < BOUND, "a call in the dark took {took:?}");
                    }
                });
            }
        });
        assert!(eventually(Duration::from_secs(5), || !guard.is_held()));
        // The pool opened connections in the dark and, their handshakes timed out,
        // opens more (its three connect threads retry together): the outage ends as
        // a new round of handshakes that will never be answered has begun.
        let opened = proxy.accepted();
        assert!(opened > before, "no connection was opened in the dark");
        assert!(
            eventually(Duration::from_secs(15), || proxy.accepted() >= opened + 3),
            "the pool did not retry in the dark"
        );
        proxy.discard(false);
        let healed = Instant::now();
        let released = guard.unlock();
        let unlocked = healed.elapsed();
        let again = client.try_lock("bk");
        let locked = healed.elapsed();
        eprintln!(
            "outage {round}: {} connections opened since it began; after the heal unlock \
             {released:?} at {unlocked:?}, try_lock {} at {locked:?}",
            proxy.accepted() - before,
            if matches!(again, Ok(Some(_))) {
                "acquired"
            } else {
                "failed"
            },
        );
        assert!(
            matches!(released, Ok(Release::Expired | Release::Released)),
            "unlock after the heal: {released:?}"
        );
        let guard = again
            .expect("try_lock after the heal")
            .expect("nobody holds it");
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        figures.push(unlocked);
    }
    eprintln!("heal -> first successful call, per outage: {figures:?}");
}

#[test]
fn a_call_on_idle_connections_that_all_died_retries_on_a_fresh_one() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = builder(&proxy).build().unwrap();
    // Four connections idle: four callers held a lock each at once.
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        for t in 0..4 {
            let (client, barrier) = (&client, &barrier);
            s.spawn(move || {
                let guard = client.lock(&format!("warm:{t}")).unwrap();
                barrier.wait();
                assert_eq!(guard.unlock().unwrap(), Release::Released);
            });
        }
    });
    let guard = client.lock("held").unwrap();
    // Every connection is cut (a restarted server or proxy, a NAT that forgot them),
    // and the client does not notice until it uses one.
    proxy.drop_connections();
    let (released, unlocked) = timed(|| guard.unlock());
    assert_eq!(released.unwrap(), Release::Released);
    let (again, locked) = timed(|| client.try_lock("k"));
    let again = again.unwrap().expect("nobody holds it");
    assert_eq!(again.unlock().unwrap(), Release::Released);
    eprintln!("cut connections: unlock in {unlocked:?}, then try_lock in {locked:?}");
    assert!(
        unlocked < BOUND && locked < BOUND,
        "{unlocked:?} {locked:?}"
    );
}

#[test]
fn unlocks_after_the_heal_do_not_wait_out_a_renewal_batch_sent_in_the_dark() {
    const LEASES: usize = 20;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = builder(&proxy).build().unwrap();
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(5));
    let guards: Vec<_> = (0..LEASES)
        .map(|i| client.lock_with(&format!("b{i}"), &opts).unwrap().unwrap())
        .collect();
    // A renewal answered: the next one is due a third of the TTL later.
    let valid = guards[0].valid_until();
    assert!(eventually(Duration::from_secs(5), || guards[0]
        .valid_until()
        > valid));
    let sent = client.metrics().renewal_round_trips;
    let dropped = proxy.discarded();
    proxy.discard(true);
    // One pipeline renewing every lease goes out into the dark; its replies never
    // come.
    assert!(eventually(Duration::from_secs(5), || {
        client.metrics().renewal_round_trips > sent
    }));
    assert!(eventually(Duration::from_secs(5), || {
        proxy.discarded() > dropped
    }));
    proxy.discard(false);
    let healed = Instant::now();
    let mut took = Vec::new();
    for guard in guards {
        let (released, t) = timed(|| guard.unlock());
        assert!(
            matches!(released, Ok(Release::Released | Release::Expired)),
            "{released:?}"
        );
        assert!(t < BOUND, "an unlock took {t:?}");
        took.push(t);
    }
    let all = healed.elapsed();
    eprintln!(
        "{LEASES} unlocks after the heal: {all:?} in all, the first {:?}",
        took[0]
    );
    // The batch waits for its first reply at most one read timeout, not one per lease.
    assert!(all < BOUND * 2, "{all:?}");
}
