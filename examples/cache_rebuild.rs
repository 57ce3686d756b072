//! A read-write lock guarding a cache rebuild: reader threads read a cached
//! report under the read lock (many at once), and one rebuild takes the write
//! lock, so no reader ever sees a half-written cache.
//!
//! ```text
//! cargo run --example cache_rebuild
//! ```
//!
//! Talks to `REDIS_URL` (default `redis://127.0.0.1:6379/`), or to a private
//! `redis-server` it starts when nothing answers there (as `basic` does). The
//! lock is Redisson's `RReadWriteLock` format: a Java service reading the same
//! cache with `redisson.getReadWriteLock("lock:report")` shares and excludes
//! with these threads.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redis::Commands;
use redlease::LockClient;

/// The cache: two keys that must always agree (a report and its checksum).
const REPORT: &str = "cache:report";
const SUM: &str = "cache:report:sum";

fn checksum(report: &str) -> usize {
    report.bytes().map(usize::from).sum()
}

fn main() -> Result<(), Box<dyn Error>> {
    // `_private` lives until the end of `main`: its `Drop` stops a private server.
    let (url, _private) = private_server::redis_url()?;
    let client = LockClient::builder(url.as_str())
        .key_prefix("lock:")
        .build()?;
    let report = client.read_write_lock("report")?;
    let redis = redis::Client::open(url.as_str())?;
    let mut con = redis.get_connection()?;
    let _: () = con.del(&[REPORT, SUM])?;

    let reads = AtomicUsize::new(0);
    thread::scope(|s| -> Result<(), Box<dyn Error + Send + Sync>> {
        // Four readers: each reads both keys under one read lock; they share it.
        let readers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| -> Result<(), Box<dyn Error + Send + Sync>> {
                    let mut con = redis.get_connection()?;
                    for _ in 0..20 {
                        let guard = report.read()?;
                        let (text, sum): (Option<String>, Option<usize>) =
                            redis::pipe().get(REPORT).get(SUM).query(&mut con)?;
                        if let (Some(text), Some(sum)) = (text, sum) {
                            assert_eq!(checksum(&text), sum, "a torn cache was read");
                        }
                        let _released = guard.unlock()?;
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        // One rebuild, three times: both keys written under the write lock,
        // with a pause between them that a reader without the lock would see.
        let mut con = redis.get_connection()?;
        for round in 1..=3 {
            let guard = report.write()?;
            let text = format!("report #{round}: {} lines", round * 100);
            let _: () = con.set(REPORT, &text)?;
            thread::sleep(Duration::from_millis(20));
            let _: () = con.set(SUM, checksum(&text))?;
            let _released = guard.unlock()?;
            println!("rebuilt: {text}");
        }
        for r in readers {
            r.join().map_err(|_| "a reader panicked")??;
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    println!(
        "{} reads, none torn; the cache holds: {}",
        reads.load(Ordering::Relaxed),
        con.get::<_, String>(REPORT)?
    );
    let _: () = con.del(&[REPORT, SUM])?;
    Ok(())
}
