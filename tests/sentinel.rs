#![cfg(feature = "sentinel")]
mod support;

// Sentinel deployments (issue 13): a client built from sentinel addresses finds the
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

    // Waiting works after the failover: a caller queued on `fresh` gets it on release.
    let before = client.metrics().attempts;
    let ready = Barrier::new(2);
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            ready.wait();
            client
                .try_lock_for("fresh", Duration::from_secs(20))
                .unwrap()
                .is_some()
        });
        ready.wait();
        let queued = eventually(Duration::from_secs(5), || {
            client.metrics().attempts > before
        });
        assert!(queued);
        assert!(fresh.unlock().unwrap().was_held());
        assert!(waiter.join().unwrap(), "the waiter did not get the lock");
    });
}
