//! Migrating a key off the old `SETNX`/`GETSET` timestamp lock, against a real server.
//!
//! Step 1: redlease runs in legacy mode beside a deployed timestamp client (emulated
//! here with the raw commands such clients send), and both keep excluding each other.
//! Step 2: once every client of the key runs redlease, the key switches to the token
//! scheme; legacy-mode and token-mode redlease clients exclude each other while the
//! switch rolls out.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example migrate_from_timestamp
//! ```

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlease::{LegacyTimestamp, LockClient, Scheme};

/// Increments per client in each step.
const ROUNDS: u64 = 5;

fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // A fresh namespace, so the example never touches anyone's keys.
    let prefix = format!("redlease-example:{}:", uuid::Uuid::new_v4());
    let counter = format!("{prefix}counter");
    let ttl = Duration::from_secs(10);
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;

    // Step 1: legacy mode beside a deployed client, on the same key.
    let legacy = LockClient::builder(url.as_str())
        .key_prefix(prefix.as_str())
        .ttl(ttl)
        .scheme(Scheme::LegacyTimestamp(LegacyTimestamp::new()))
        .build()?;
    let lock_key = format!("{prefix}report");
    thread::scope(|s| -> redlease::Result<()> {
        let deployed = s.spawn(|| -> redlease::Result<()> {
            let mut con = redis::Client::open(url.as_str())?.get_connection()?;
            for _ in 0..ROUNDS {
                deployed_lock(&mut con, &lock_key, ttl)?;
                increment(&mut con, &counter)?;
                redis::cmd("DEL").arg(&lock_key).query::<()>(&mut con)?;
            }
            Ok(())
        });
        let mut con = redis::Client::open(url.as_str())?.get_connection()?;
        for _ in 0..ROUNDS {
            legacy.with_lock("report", || increment(&mut con, &counter))??;
        }
        deployed
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })?;
    let total: u64 = redis::cmd("GET").arg(&counter).query(&mut con)?;
    assert_eq!(total, 2 * ROUNDS);
    println!("step 1: deployed client + redlease (legacy mode): counter = {total}");

    // Step 2: every client runs redlease now; switch the key to the token scheme.
    let token = LockClient::builder(url.as_str())
        .key_prefix(prefix.as_str())
        .ttl(ttl)
        .build()?;
    // During the rollout both modes run; each sees the other's value as held.
    let held = legacy.lock("report")?;
    assert!(token.try_lock("report")?.is_none());
    assert!(held.unlock()?.was_held());
    let held = token.lock("report")?;
    assert!(legacy.try_lock("report")?.is_none());
    assert!(held.unlock()?.was_held());
    println!("step 2: legacy-mode and token-mode clients exclude each other");
    thread::scope(|s| -> redlease::Result<()> {
        let old = s.spawn(|| -> redlease::Result<()> {
            let mut con = redis::Client::open(url.as_str())?.get_connection()?;
            for _ in 0..ROUNDS {
                legacy.with_lock("report", || increment(&mut con, &counter))??;
            }
            Ok(())
        });
        let mut con = redis::Client::open(url.as_str())?.get_connection()?;
        for _ in 0..ROUNDS {
            token.with_lock("report", || increment(&mut con, &counter))??;
        }
        old.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })?;
    drop(legacy); // Rollout done: no legacy-mode client is left (step 3 removes the option).
    token.with_lock("report", || increment(&mut con, &counter))??;
    let total: u64 = redis::cmd("GET").arg(&counter).query(&mut con)?;
    assert_eq!(total, 4 * ROUNDS + 1);
    println!("step 2: token scheme only: counter = {total}");

    redis::cmd("DEL").arg(&counter).query::<()>(&mut con)?;
    Ok(())
}

/// The deployed client's acquire, command for command (Jedis-style): `SETNX` the
/// expiry; else `GET`, and if that expiry has passed, `GETSET` and win only if the
/// old value is the expired one read; else sleep 100 ms and retry (for 30 s at most).
fn deployed_lock(con: &mut redis::Connection, key: &str, ttl: Duration) -> redis::RedisResult<()> {
    for _ in 0..300 {
        let expires = now_ms() + ttl.as_millis() + 1;
        if redis::cmd("SETNX")
            .arg(key)
            .arg(expires.to_string())
            .query::<i64>(con)?
            == 1
        {
            return Ok(());
        }
        let current: Option<String> = redis::cmd("GET").arg(key).query(con)?;
        if let Some(current) = current {
            // Long.parseLong: a token here would throw. This is why step 2 waits
            // until no deployed client is left.
            let stored: u128 = current.parse().map_err(|_| {
                redis::RedisError::from((redis::ErrorKind::Parse, "not a timestamp"))
            })?;
            if stored < now_ms() {
                let old: Option<String> = redis::cmd("GETSET")
                    .arg(key)
                    .arg(expires.to_string())
                    .query(con)?;
                if old.as_deref() == Some(current.as_str()) {
                    return Ok(());
                }
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    Err((redis::ErrorKind::Client, "deployed client gave up waiting").into())
}

/// A read-modify-write that is only correct under the lock.
fn increment(con: &mut redis::Connection, counter: &str) -> redis::RedisResult<()> {
    let n: Option<u64> = redis::cmd("GET").arg(counter).query(con)?;
    redis::cmd("SET")
        .arg(counter)
        .arg(n.unwrap_or(0) + 1)
        .query(con)
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
