#![cfg(feature = "sentinel")]
mod support;

// Sentinel deployments: a client built from sentinel addresses finds the
// master, follows a failover (new locks land on the new master, the waiter's pub/sub
// connection comes back), and a lease whose key did not survive the failover is
// reported lost, never silently kept. Every wait is bounded.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use redlease::{LockClient, LockGuard};
use support::eventually;
use support::sentinel::{Deployment, MASTER_NAME, try_query};

/// Whether `key` is on `server`; `false` when the query fails.
fn exists(server: &support::RedisServer, key: &str) -> bool {
    try_query(server, redis::cmd("EXISTS").arg(key)) == Some(1)
}

#[test]
fn follows_a_failover_and_reports_the_leases_it_lost() {
    let d = Deployment::start();
    let urls = d.sentinel_urls();
    let fast = Duration::from_secs(1);

    let err = LockClient::sentinel(urls.clone(), "no-such-master")
        .connect_timeout(fast)
        .read_timeout(fast)
        .build()
        .unwrap_err();
    assert!(!format!("{err:?}").is_empty());

    let builder = LockClient::sentinel(urls.clone(), MASTER_NAME)
        .ttl(Duration::from_secs(3))
        .connect_timeout(fast)
        .read_timeout(fast)
        .write_timeout(fast);
    let shown = format!("{builder:?}");
    assert!(
        shown.contains(MASTER_NAME) && shown.contains(&urls[2]),
        "{shown}"
    );
    let client = builder.build().unwrap();
    // A second client, whose waiter must follow the failover: it polls only every
    // 2 s, so a wake-up within that comes from a release message on the new master.
    let other = LockClient::sentinel(urls.clone(), MASTER_NAME)
        .connect_timeout(fast)
        .read_timeout(fast)
        .backoff(Duration::from_secs(2), Duration::from_secs(2))
        .build()
        .unwrap();

    // Found the master: the locks are stored there.
    let old = d.server(d.master_port().unwrap());
    let kept = client.try_lock("kept").unwrap().expect("free key");
    let dropped = client.try_lock("dropped").unwrap().expect("free key");
    assert!(exists(old, "kept") && exists(old, "dropped"));
    // Both reach the replica before the failover (WAIT), so what happens to them
    // after it is up to the test, not to replication timing.
    let acked: i64 = old.query(redis::cmd("WAIT").arg(1).arg(5000));
    assert_eq!(acked, 1);

    let new = d.failover();
    assert_ne!(new.port(), old.port());

    // New acquisitions reach the new master within a bounded time. Until Sentinel
    // has demoted the old master, a pooled connection may still reach it: such a
    // lock is given back and the attempt repeated.
    let mut fresh: Option<LockGuard> = None;
    let moved = eventually(Duration::from_secs(30), || match client.try_lock("fresh") {
        Ok(Some(g)) if exists(new, "fresh") => fresh.replace(g).is_none(),
        _ => false,
    });
    assert!(
        moved,
        "no lock reached the new master: {:?}",
        client.metrics()
    );
    let fresh = fresh.unwrap();

    // What asynchronous replication can do: a lock missing on the new master. Its
    // holder must find out at its next renewal.
    let deleted = eventually(Duration::from_secs(5), || {
        // 0 when it already expired there (renewals failed through the failover).
        try_query::<i64>(new, redis::cmd("DEL").arg("dropped")).is_some()
    });
    assert!(deleted);
    let lost = dropped.lost().recv_timeout(Duration::from_secs(15));
    assert!(
        lost.is_ok(),
        "a lease missing on the new master was not reported lost"
    );
    assert!(!dropped.is_held());

    // A lease that survived is renewed on the new master, or reported lost (if the
    // failover outlasted its validity): never believed held without its key.
    let base = client.metrics().renewals;
    let settled = eventually(Duration::from_secs(20), || {
        kept.lost().try_recv().is_ok()
            || (kept.is_held() && client.metrics().renewals >= base + 3 && exists(new, "kept"))
    });
    assert!(
        settled,
        "lease neither renewed on the new master nor reported lost"
    );
    if kept.is_held() {
        assert!(kept.unlock().unwrap().was_held());
    }

    // A pooled connection to the old master was closed by Sentinel: a call that
    // finds it dead fails (one retry on a fresh connection per call). Once they
    // are gone, calls succeed.
    let recovered = eventually(Duration::from_secs(10), || other.try_lock("warm").is_ok());
    assert!(recovered);
    // Both clients' waiter threads have reconnected, to the new master: each holds
    // a `redlease:waiter:<id>` channel there (they retry at most 1 s apart).
    let resubscribed = eventually(Duration::from_secs(10), || {
        let cmd = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("redlease:waiter:*")
            .clone();
        try_query::<Vec<String>>(new, &cmd).is_some_and(|c| c.len() >= 2)
    });
    assert!(
        resubscribed,
        "the waiter threads did not reconnect to the new master"
    );

    woken_on_the_new_master(&other, fresh, new);
}

/// Waiting works after the failover: `other`'s caller queued on `fresh`'s key is
/// woken by the release message, published and heard on the new master.
fn woken_on_the_new_master(other: &LockClient, fresh: LockGuard, new: &support::RedisServer) {
    let before = other.metrics().attempts;
    let ready = Barrier::new(2);
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            ready.wait();
            let got = other
                .try_lock_for("fresh", Duration::from_secs(20))
                .unwrap();
            (got.is_some(), other.metrics().wakeups)
        });
        ready.wait();
        // Queued, its key's release channel subscribed on the new master, and past
        // the attempt the subscription's confirmation makes (which would race the
        // release for the lock).
        let queued = eventually(Duration::from_secs(5), || {
            let cmd = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("{fresh}:released")
                .clone();
            other.metrics().attempts >= before + 2
                && try_query::<(String, i64)>(new, &cmd).is_some_and(|(_, n)| n >= 1)
        });
        assert!(queued);
        assert!(fresh.unlock().unwrap().was_held());
        let (got, wakeups) = waiter.join().unwrap();
        assert!(got, "the waiter did not get the lock");
        assert!(wakeups >= 1, "woken by polling, not by the release message");
    });
}
