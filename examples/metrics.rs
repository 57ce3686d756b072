//! Metrics for Prometheus: with the `metrics` feature, redlease records through
//! the `metrics` crate's facade, and whatever exporter the application installs
//! shows them. Here a Prometheus recorder (no HTTP listener: the text is rendered
//! and printed), a few locks, one wait on a held lock, and the rendered text.
//!
//! ```text
//! cargo run --features metrics --example metrics
//! ```
//!
//! Talks to `REDIS_URL` (default `redis://127.0.0.1:6379/`); if nothing answers
//! there it starts a private `redis-server` on a free loopback port, as `basic` does.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::thread;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redlease::{LockClient, LockOptions, Scheme};

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _private) = private_server::redis_url()?;
    // The application's choice of exporter; redlease only records.
    // Durations as Prometheus histograms, in these buckets (summaries otherwise).
    let buckets = [0.001, 0.01, 0.1, 1.0, 10.0, 60.0];
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let client = LockClient::builder(url.as_str())
        .key_prefix("metrics-example:")
        .build()?;
    for name in ["a", "b", "c"] {
        assert!(client.lock(name)?.unlock()?.was_held());
    }
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    drop(client.lock_with("d", &reentrant)?);

    // One caller holds `held` for 300 ms; another waits for it.
    let guard = client.lock("held")?;
    let busy = client.try_lock("held")?;
    assert!(busy.is_none(), "held: a second try finds it busy");
    thread::scope(|s| -> Result<(), redlease::Error> {
        let waiter = s.spawn(|| client.try_lock_for("held", Duration::from_secs(10)));
        thread::sleep(Duration::from_millis(300));
        drop(guard);
        let got = waiter.join().map_err(|_| redlease::Error::Shutdown)??;
        assert!(
            got.is_some(),
            "the waiter gets the lock once it is released"
        );
        Ok(())
    })?;

    let text = handle.render();
    print!("{text}");
    for name in [
        "redlease_acquisitions_total",
        "redlease_wait_seconds",
        "redlease_hold_seconds",
        "redlease_leases_held",
    ] {
        if !text.contains(name) {
            return Err(format!("`{name}` missing from the rendered text").into());
        }
    }
    Ok(())
}
