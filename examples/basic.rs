//! Quick start: take a lock, read its fencing token, watch a second attempt find it
//! busy, and release it.
//!
//! ```text
//! cargo run --example basic
//! ```
//!
//! Talks to `REDIS_URL` (default `redis://127.0.0.1:6379/`). If nothing answers there
//! and `redis-server` is on `PATH` (Debian/Ubuntu package `redis-server`), it starts a
//! private server on a free loopback port for the demo, says so on stderr, and stops
//! it at the end.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;

use redlease::LockClient;

fn main() -> Result<(), Box<dyn Error>> {
    // `_private` lives until the end of `main`: its `Drop` stops a private server.
    let (url, _private) = private_server::redis_url()?;

    let client = LockClient::builder(url.as_str())
        .key_prefix("lock:")
        .fencing(true)
        .build()?;

    // Blocks until the lock is ours; the lease is renewed in the background meanwhile.
    let guard = client.lock("invoice:42")?;
    let fence = guard
        .fence()
        .ok_or("fencing is on, so a fence is expected")?;
    println!(
        "locked `{}`: fence {fence}, held {}",
        guard.key(),
        guard.is_held()
    );

    // One attempt, never waits: the lock is busy, from this client or any other.
    let second = client.try_lock("invoice:42")?;
    println!(
        "a second try_lock while held: {:?}",
        second.map(|g| g.fence())
    );

    // `drop(guard)` releases too; `unlock` also says what Redis found.
    let outcome = guard.unlock()?;
    println!("unlocked: {outcome:?}");
    Ok(())
}
