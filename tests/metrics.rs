#![cfg(feature = "metrics")]
//! The `metrics` feature: what a client does reaches the application's
//! recorder, here Prometheus's, with no lock name in any label.
//!
//! One test installs the process-wide recorder; the others record through one
//! local to their thread.

mod support;

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use redlease::{LockClient, LockOptions};
use support::{RedisServer, eventually};

/// The sum of the values of `name`'s series whose labels contain every `labels`
/// (whole numbers, as counts and this gauge render).
fn value(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn acquisitions_waits_holds_losses_and_renewals_reach_a_prometheus_recorder() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();
    let server = RedisServer::start();
    let client = LockClient::builder(server.url())
        .key_prefix("m:")
        .build()
        .unwrap();

    let a = client.lock("a").unwrap();
    assert!(client.try_lock("a").unwrap().is_none());
    let text = handle.render();
    assert_eq!(value(&text, "redlease_leases_held", &[]), 1, "{text}");

    // A lease renewed (every third of 3 s), then lost: its key deleted under it.
    let opts = LockOptions::new().ttl(Duration::from_secs(3));
    let r = client.lock_with("r", &opts).unwrap().unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        client.metrics().renewals >= 2
    }));
    let () = server.query(redis::cmd("DEL").arg("m:r"));
    assert!(eventually(Duration::from_secs(10), || !r.is_held()));
    drop((a, r));

    let text = handle.render();
    let acquired = ["outcome=\"acquired\"", "scheme=\"token\""];
    assert_eq!(
        value(&text, "redlease_acquisitions_total", &acquired),
        2,
        "{text}"
    );
    let busy = ["outcome=\"busy\""];
    assert_eq!(
        value(&text, "redlease_acquisitions_total", &busy),
        1,
        "{text}"
    );
    assert!(value(&text, "redlease_renewals_total", &["outcome=\"extended\""]) >= 1);
    assert_eq!(value(&text, "redlease_leases_lost_total", &[]), 1, "{text}");
    assert_eq!(value(&text, "redlease_leases_held", &[]), 0, "{text}");
    assert_eq!(
        value(&text, "redlease_hold_seconds_count", &[]),
        2,
        "{text}"
    );
    assert_eq!(
        value(&text, "redlease_wait_seconds_count", &[]),
        3,
        "{text}"
    );
    // Labels name outcomes, schemes and reasons, never a lock.
    for key in ["m:a", "m:r", "\"a\"", "\"r\""] {
        assert!(!text.contains(key), "{key} in {text}");
    }
}

/// A plain lock, a fair lock, a read lock and a permit each count their
/// acquisition, wait and hold under their own `scheme` label. Recorded through a
/// recorder local to this thread (the lock calls and the guards' drops run here),
/// beside the process-wide one of the other test.
#[test]
fn each_primitive_counts_its_acquisitions_waits_and_holds_under_its_own_label() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let server = RedisServer::start();
    let client = LockClient::builder(server.url())
        .key_prefix("m:")
        .build()
        .unwrap();
    let jobs = client.semaphore("jobs").unwrap();
    jobs.ensure_permits(2).unwrap();
    let rw = client.read_write_lock("rw").unwrap();
    let fair = client.fair_lock("f").unwrap();
    let election = client.election("e").unwrap();

    metrics::with_local_recorder(&recorder, || {
        let held = (
            client.lock("p").unwrap(),
            fair.lock().unwrap(),
            rw.read().unwrap(),
            jobs.acquire().unwrap(),
            election.campaign().unwrap(),
        );
        drop(held);
        assert!(rw.try_write().unwrap().is_some());
    });

    let text = handle.render();
    let labels = [
        "token",
        "fair",
        "rwlock_read",
        "rwlock_write",
        "semaphore",
        "election",
    ];
    for label in labels {
        let scheme = format!("scheme=\"{label}\"");
        let acquired = ["outcome=\"acquired\"", scheme.as_str()];
        let counted = value(&text, "redlease_acquisitions_total", &acquired);
        assert_eq!(counted, 1, "{label}: {text}");
        let waits = value(&text, "redlease_wait_seconds_count", &[scheme.as_str()]);
        assert_eq!(waits, 1, "{label}: {text}");
        let holds = value(&text, "redlease_hold_seconds_count", &[scheme.as_str()]);
        assert_eq!(holds, 1, "{label}: {text}");
    }
    assert_eq!(
        value(&text, "redlease_acquisitions_total", &[]),
        6,
        "{text}"
    );
    assert_eq!(value(&text, "redlease_leases_held", &[]), 0, "{text}");
}
