#![cfg(feature = "metrics")]
//! The `metrics` feature: what a client does reaches the application's
//! recorder, here Prometheus's, with no lock name in any label.
//!
//! One test in this binary: the recorder is process-wide.

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
