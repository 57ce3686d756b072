//! What the server check costs `build()`: a client built with the check on
//! (`ServerCheck::Warn`, the default: one `INFO` on a pooled connection) against
//! one built with it off, alternated so both see the same machine, and the check's
//! own floor: one raw `INFO` on an open connection, the least any client reading
//! the server's configuration sends.
//!
//! Run: `cargo bench --bench build` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH_PIN=1` pins the `redis-server` to core 0 and this process to
//! core 1 (`taskset`), as in `benches/lock.rs`.

#[path = "../tests/support/mod.rs"]
mod support;

use redlease::{LockClient, ServerCheck};
use support::RedisServer;
use support::bench::{paired, percentile, pin};

/// Builds, alternated with and without the check.
const ROUNDS: usize = 300;

fn main() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    pin([&server]);
    let build = |check| {
        let client = LockClient::builder(server.url())
            .server_check(check)
            .build()
            .unwrap();
        drop(client);
    };
    let (mut on, mut off) = paired(
        ROUNDS,
        || build(ServerCheck::Warn),
        || build(ServerCheck::Off),
    );
    let con = std::cell::RefCell::new(server.conn());
    let (mut info, mut ping) = paired(
        ROUNDS,
        || {
            let _: String = redis::cmd("INFO").query(&mut *con.borrow_mut()).unwrap();
        },
        || {
            let _: String = redis::cmd("PING").query(&mut *con.borrow_mut()).unwrap();
        },
    );
    let (on, off) = (percentile(&mut on, 50), percentile(&mut off, 50));
    let (info, ping) = (percentile(&mut info, 50), percentile(&mut ping, 50));
    println!("build() p50: check on {on:?}, check off {off:?}");
    println!(
        "RATIO build check: extra p50 {:?} / floor (one raw INFO) p50 {info:?} = {:.2}x; \
         build with check / without = {:.3}x (PING p50 {ping:?})",
        on.saturating_sub(off),
        on.saturating_sub(off).as_secs_f64() / info.as_secs_f64(),
        on.as_secs_f64() / off.as_secs_f64()
    );
}
