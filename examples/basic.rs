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

use private_server::{PrivateServer, answers};
use redlease::LockClient;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    // Lives until the end of `main`; its `Drop` stops the private server, if any.
    let mut private = None;
    let url = if answers(&url) {
        url
    } else {
        let server = PrivateServer::start().map_err(|e| {
            format!("nothing answers at REDIS_URL and no private server could start: {e}")
        })?;
        eprintln!(
            "nothing answers at REDIS_URL; started a private redis-server on 127.0.0.1:{} \
             for this demo (stopped when it ends)",
            server.port
        );
        private.insert(server).url()
    };

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
