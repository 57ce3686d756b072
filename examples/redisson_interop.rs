//! Redisson and redlease on the same lock: a Java service's `RLock` and a Rust
//! worker's `Scheme::Reentrant` lock exclude and wake each other.
//!
//! The "Redisson" side here speaks `RLock`'s own Lua scripts (Redisson 3.x
//! `RedissonLock`) on a raw connection, exactly what a Redisson client sends.
//!
//! ```text
//! cargo run --example redisson_interop
//! ```
//!
//! Talks to `REDIS_URL` (default `redis://127.0.0.1:6379/`), or to a private
//! `redis-server` it starts when nothing answers there (see `examples/basic.rs`).

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, Scheme};

/// Redisson's `tryLockInnerAsync`: KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner.
const REDISSON_TRY_LOCK: &str = "if ((redis.call('exists', KEYS[1]) == 0) or \
    (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; end; return redis.call('pttl', KEYS[1]);";
/// Redisson's `unlockInnerAsync`: KEYS[1] lock, KEYS[2] channel; ARGV[1] message,
/// ARGV[2] lease ms, ARGV[3] owner.
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else \
    redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; \
    return nil;";

fn main() -> Result<(), Box<dyn Error>> {
    // `_private` lives until the end of `main`: its `Drop` stops a private server.
    let (url, _private) = private_server::redis_url()?;
    // A fresh key, so the example never touches anyone's lock.
    let name = format!("redlease-example:{}", uuid::Uuid::new_v4());
    let key = format!("lock:{name}");
    // Redisson's channel for a key without a `{`: the key in braces.
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    let java_thread = format!("{}:1", uuid::Uuid::new_v4());

    let client = LockClient::builder(url.as_str())
        .key_prefix("lock:")
        .scheme(Scheme::Reentrant)
        .build()?;

    // 1. Redisson holds the lock: redlease waits, and Redisson's unlock wakes it.
    if redisson_try_lock(&mut con, &key, &java_thread)?.is_some() {
        return Err("Redisson's tryLock found the fresh key busy".into());
    }
    println!("Redisson locked `{key}` as {java_thread}");
    println!(
        "redlease try_lock while Redisson holds it: {:?}",
        client.try_lock(&name)?.map(|g| g.key().to_owned())
    );
    thread::scope(|s| -> Result<(), Box<dyn Error>> {
        let waiter = s.spawn(|| -> redlease::Result<Instant> {
            let guard = client.lock(&name)?; // waits for Redisson's unlock message
            let at = Instant::now();
            assert!(guard.unlock()?.was_held());
            Ok(at)
        });
        // Let the waiter subscribe to Redisson's channel (bounded: 5 s).
        let deadline = Instant::now() + Duration::from_secs(5);
        while subscribers(&mut con, &channel)? == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let released = Instant::now();
        let unlocked: Option<i64> = redis::cmd("EVAL")
            .arg(REDISSON_UNLOCK)
            .arg(2)
            .arg(&key)
            .arg(&channel)
            .arg(0)
            .arg(30_000)
            .arg(&java_thread)
            .query(&mut con)?;
        let woken = waiter.join().map_err(|_| "waiter panicked")??;
        println!(
            "Redisson unlocked ({unlocked:?}, published `0` on {channel}); the redlease \
             waiter got the lock {:?} later",
            woken.saturating_duration_since(released)
        );
        Ok(())
    })?;

    // 2. redlease holds it, twice over on this thread: Redisson is told it is busy,
    //    and the outermost unlock publishes the message Redisson waits for.
    let mut sub = redis::Client::open(url.as_str())?.get_connection()?;
    sub.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(&channel)?;
    let outer = client.lock(&name)?;
    let nested = client.lock(&name)?;
    let hash: Vec<(String, i64)> = redis::cmd("HGETALL").arg(&key).query(&mut con)?;
    println!("redlease holds it: {hash:?}");
    let busy = redisson_try_lock(&mut con, &key, &java_thread)?;
    println!("Redisson tryLock while redlease holds it: busy for {busy:?} ms");
    println!("nested unlock: {:?}", nested.unlock()?);
    println!("outermost unlock: {:?}", outer.unlock()?);
    let msg = pubsub.get_message()?;
    println!(
        "a Redisson subscriber of {} received `{}`",
        msg.get_channel_name(),
        msg.get_payload::<String>()?
    );
    Ok(())
}

/// Redisson's `tryLock()` for `owner`: `None` when acquired, else the holder's
/// remaining milliseconds.
fn redisson_try_lock(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
) -> redis::RedisResult<Option<i64>> {
    redis::cmd("EVAL")
        .arg(REDISSON_TRY_LOCK)
        .arg(1)
        .arg(key)
        .arg(30_000)
        .arg(owner)
        .query(con)
}

/// Subscribers of `channel` (`PUBSUB NUMSUB`).
fn subscribers(con: &mut redis::Connection, channel: &str) -> redis::RedisResult<i64> {
    let (_, n): (String, i64) = redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(con)?;
    Ok(n)
}
