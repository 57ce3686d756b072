mod support;

// Fencing tokens: one counter per key prefix, so the number of keys a
// fenced workload leaves in Redis does not grow with the number of lock names, and fences
// stay strictly increasing per key across clients, hand-offs and the legacy scheme.

use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use redlease::{LegacyTimestamp, LockClient, LockClientBuilder, LockOptions, Release, Scheme};
use support::RedisServer;

/// The one counter under the prefix `lock:`.
const COUNTER: &str = "lock:redlease:fence";

fn fenced(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(10))
        .fencing(true)
}

/// Keys in the database but the live clients' session records.
fn dbsize(server: &RedisServer) -> i64 {
    i64::try_from(keys(server).len()).unwrap()
}

/// Every key but the live clients' session records.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    keys.retain(|k| !k.contains("redlease:session:"));
    keys
}

fn counter(server: &RedisServer) -> Option<u64> {
    server.query(redis::cmd("GET").arg(COUNTER))
}

fn strictly_increasing(fences: &[u64]) -> bool {
    fences.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn a_thousand_fenced_lock_names_leave_one_counter_not_a_thousand() {
    let server = RedisServer::start();
    let client = fenced(&server).build().unwrap();
    let mut fences = Vec::with_capacity(1000);
    for i in 0..1000 {
        let guard = client.lock(&format!("order:{i}")).unwrap();
        fences.push(guard.fence().expect("fencing is on"));
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    }
    assert!(strictly_increasing(&fences));
    let keys = keys(&server);
    assert!(dbsize(&server) <= 3, "{} keys: {keys:?}", keys.len());
    assert_eq!(keys, [COUNTER]);
    assert_eq!(counter(&server), fences.last().copied());
    // Another prefix counts on its own; still one key for it.
    let other = LockClient::builder(server.url())
        .key_prefix("jobs:")
        .fencing(true)
        .build()
        .unwrap();
    let floor = server.clock_micros();
    let fence = other.lock("order:0").unwrap().fence().unwrap();
    assert!(fence >= floor, "{fence} < the server's clock {floor}");
    assert_eq!(dbsize(&server), 2);
}

#[test]
fn fences_strictly_increase_per_key_across_clients_hand_offs_and_the_legacy_scheme() {
    let server = RedisServer::start();
    let clients = [
        fenced(&server).build().unwrap(),
        fenced(&server).build().unwrap(),
    ];
    let legacy = fenced(&server)
        .scheme(Scheme::LegacyTimestamp(LegacyTimestamp::new()))
        .build()
        .unwrap();
    // Fences of `k` in the order its holders took it: each is pushed under the lock.
    let order = Mutex::new(Vec::new());
    let take = |client: &LockClient| {
        let guard = client.lock("k").unwrap();
        order.lock().push(guard.fence().expect("fencing is on"));
        // Another key between two holders of `k` moves the counter too.
        drop(client.lock("other").unwrap());
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    };
    take(&legacy);
    // Four threads per client contend, so a release often hands the lock to a waiting
    // thread of the same client (a fence taken by the hand-off script).
    thread::scope(|s| {
        for client in &clients {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10 {
                        take(client);
                    }
                });
            }
        }
    });
    take(&legacy);
    take(&clients[0]);
    let order = order.into_inner();
    assert_eq!(order.len(), 83);
    assert!(strictly_increasing(&order), "{order:?}");
    let handoffs: u64 = clients.iter().map(|c| c.metrics().handoffs).sum();
    assert!(handoffs > 0, "no hand-off happened");
    assert_eq!(dbsize(&server), 1, "only the counter is left");
}

#[test]
fn fences_keep_rising_in_every_scheme_when_the_counter_is_lost() {
    // What a failover to a replica that missed the last increments does to the
    // counter, in its extreme: it is gone (or, the same, far behind). Each fence is
    // at least the server's clock in microseconds, so the next one is still higher.
    let server = RedisServer::start();
    let client = fenced(&server).build().unwrap();
    let schemes = [
        Scheme::Token,
        Scheme::LegacyTimestamp(LegacyTimestamp::new()),
        Scheme::Reentrant,
    ];
    let mut last = 0;
    for round in 0..2 {
        for scheme in &schemes {
            let floor = server.clock_micros();
            let opts = LockOptions::new().scheme(scheme.clone());
            let guard = client.lock_with("k", &opts).unwrap().expect("free");
            let fence = guard.fence().expect("fencing is on");
            assert!(
                fence > last && fence >= floor,
                "{scheme:?}: {fence} after {last} (server clock {floor}), round {round}"
            );
            last = fence;
            assert_eq!(counter(&server), Some(fence));
            assert!(guard.unlock().unwrap().was_held());
            let _: i64 = server.query(redis::cmd("DEL").arg(COUNTER));
        }
    }
    // A client that `INCR`s the same counter still gets a fence above ours, and
    // ours stay above its.
    let foreign: u64 = server.query(redis::cmd("INCR").arg(COUNTER));
    let ours = client.lock("k").unwrap().fence().unwrap();
    assert!(ours > foreign);
    let foreign: u64 = server.query(redis::cmd("INCR").arg(COUNTER));
    assert!(foreign > ours);
    // A counter ahead of the clock (set so by another client) counts on by one.
    let ahead = 8_000_000_000_000_000_u64;
    let _: () = server.query(redis::cmd("SET").arg(COUNTER).arg(ahead));
    assert_eq!(client.lock("k").unwrap().fence(), Some(ahead + 1));
}

#[test]
fn a_fenced_reentrant_hold_after_a_lost_acquire_reply_still_gets_a_fence() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.url())
        .read_timeout(Duration::from_millis(300))
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let opts = LockOptions::new()
        .fencing(true)
        .scheme(Scheme::Reentrant)
        .wait(Duration::ZERO);
    // Loads the scripts, so the acquire below runs as soon as Redis resumes.
    let warm = client.lock_with("k", &opts).unwrap().expect("free");
    let first = warm.fence().expect("a first fenced hold has a fence");
    assert_eq!(warm.unlock().unwrap(), Release::Released);
    // The reply of this acquire is lost (the server frozen past the read
    // timeout); its hold lands in Redis all the same, and nobody saw its fence.
    server.pause();
    assert!(client.lock_with("k", &opts).is_err());
    server.resume();
    let landed = support::eventually(Duration::from_secs(5), || {
        let left: Vec<String> = server.query(redis::cmd("HGETALL").arg("k"));
        left.len() == 2
    });
    assert!(landed, "the lost acquire's hold never landed");
    // The same thread takes the key again: Redis counts it as one more hold, but
    // a fenced acquire never returns a guard without a fence.
    let guard = client.lock_with("k", &opts).unwrap().expect("our own hold");
    let fence = guard.fence().expect("a fenced acquire returns a fence");
    assert!(fence > first, "{fence} after {first}");
    assert!(guard.is_held());
}
