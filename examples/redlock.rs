//! Redlock over three independent Redis masters: take a lock held by a majority,
//! watch a second client find it busy, count under it from two clients, and keep
//! locking with one master gone.
//!
//! ```text
//! REDLOCK_URLS=redis://10.0.0.1/,redis://10.0.0.2/,redis://10.0.0.3/ cargo run --example redlock
//! cargo run --example redlock    # three private redis-server processes
//! ```
//!
//! With `REDLOCK_URLS` unset, it starts three `redis-server` processes (Debian/Ubuntu
//! package `redis-server`) on free loopback ports, says so on stderr, stops one of
//! them halfway to show a minority down does not matter, and stops them all at the
//! end. With `REDLOCK_URLS` set it touches only keys under a fresh random prefix, and
//! stops nothing.

#[path = "support/private_server.rs"]
mod private_server;

use std::error::Error;
use std::thread;
use std::time::{Duration, Instant};

use private_server::{PrivateServer, announce};
use redlease::LockClient;

/// Increments per client.
const ROUNDS: u64 = 5;

fn main() -> Result<(), Box<dyn Error>> {
    // Lives until the end of `main`; their `Drop` stops the private servers, if any.
    let mut private: Vec<PrivateServer> = Vec::new();
    let urls: Vec<String> = if let Ok(list) = std::env::var("REDLOCK_URLS") {
        list.split(',').map(|u| u.trim().to_owned()).collect()
    } else {
        for _ in 0..3 {
            private.push(PrivateServer::start()?);
        }
        announce(
            &private,
            "REDLOCK_URLS unset; started three private redis-server processes",
        )
    };
    // A fresh namespace, so the example never touches anyone's keys.
    let prefix = format!("redlease-example:{}:", uuid::Uuid::new_v4());
    let build = || {
        LockClient::redlock(urls.iter().map(String::as_str))
            .key_prefix(prefix.as_str())
            .ttl(Duration::from_secs(10))
            .build()
    };
    let (first, second) = (build()?, build()?);

    // Held when a majority of the masters granted the same token in time.
    let guard = first.lock("invoice:42")?;
    let left = guard
        .valid_until()
        .saturating_duration_since(Instant::now());
    println!(
        "locked `{}` on a majority of {} masters, valid for {left:?}",
        guard.key(),
        urls.len()
    );
    let busy = second.try_lock("invoice:42")?;
    println!(
        "a second client's try_lock while held: {:?}",
        busy.is_some()
    );
    println!("unlocked: {:?}", guard.unlock()?);

    // Two clients counting under the lock: a plain GET + SET on one master.
    // Not under a lock's name: `counter` below is the lock, this the value.
    let counter = format!("{prefix}count");
    let count = |client: &LockClient| -> Result<(), Box<dyn Error + Send + Sync>> {
        let mut con = redis::Client::open(urls[0].as_str())?.get_connection()?;
        for _ in 0..ROUNDS {
            client.with_lock("counter", || -> redis::RedisResult<()> {
                let n: Option<u64> = redis::cmd("GET").arg(&counter).query(&mut con)?;
                redis::cmd("SET")
                    .arg(&counter)
                    .arg(n.unwrap_or(0) + 1)
                    .query(&mut con)
            })??;
        }
        Ok(())
    };
    thread::scope(|s| {
        let other = s.spawn(|| count(&second));
        let mine = count(&first);
        let other = other
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        mine.and(other)
    })
    .map_err(|e| e.to_string())?;
    let mut con = redis::Client::open(urls[0].as_str())?.get_connection()?;
    let total: u64 = redis::cmd("GET").arg(&counter).query(&mut con)?;
    println!("two clients, {ROUNDS} increments each under the lock: counter = {total}");
    redis::cmd("DEL").arg(&counter).query::<()>(&mut con)?;

    // A minority of masters down: locking goes on (only with private servers).
    if let Some(last) = private.last_mut() {
        last.stop();
        let guard = first.lock("invoice:42")?;
        println!(
            "one master of three stopped: locked again, held {}; unlocked: {:?}",
            guard.is_held(),
            guard.unlock()?
        );
    }
    println!(
        "nodes on which releases found the lock: {}",
        first.metrics().node_releases
    );
    Ok(())
}
