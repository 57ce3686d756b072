//! A lease handed over as a ticket, against its floor, measured side by side.
//!
//! - `handover`: one `guard.into_ticket()` (nothing sent) and `client.adopt()`
//!   (one `EVALSHA`) of a held lock, by two clients taking turns, beside the
//!   floor: the one raw `EVALSHA` of a compare-and-swap that any correct
//!   adoption must send (compare the old token, read the `PTTL`, `SET` the new
//!   token with it), on a raw connection. Rounds alternate; the report is each
//!   side's median and their ratio.
//!
//! Run: `cargo bench --bench ticket` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH_PIN=1` pins `redis-server` to core 0 and this process to
//! core 1 (`taskset`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use redlease::{LockClient, LockGuard};
use support::RedisServer;
use support::bench::{floor_token, paired, percentile, pin, report, set_nx_px, wanted};

const ROUNDS: usize = 5_000;

/// The floor's adoption: compare, `PTTL`, `SET … PX` in one script.
const SWAP: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     local t = redis.call('PTTL', KEYS[1]); redis.call('SET', KEYS[1], ARGV[2], 'PX', t); \
     return t end return -3";

fn main() {
    if !wanted("handover") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let clients = [client(&server), client(&server)];
    let mut guard: Option<LockGuard> = Some(clients[0].lock("bench:ours").unwrap());
    let mut turn = 0;
    let mut con = server.conn();
    let swap = redis::Script::new(SWAP);
    let mut token = floor_token();
    assert!(set_nx_px(&mut con, "bench:floor", &token));
    let (mut ours, mut floor) = paired(
        ROUNDS,
        || {
            let ticket = guard.take().unwrap().into_ticket().unwrap();
            turn = 1 - turn;
            guard = Some(clients[turn].adopt(&ticket).unwrap());
        },
        || {
            let next = floor_token();
            let left: i64 = swap
                .key("bench:floor")
                .arg(&token)
                .arg(&next)
                .invoke(&mut con)
                .unwrap();
            assert!(left > 0);
            token = next;
        },
    );
    let (ours_p50, floor_p50) = (percentile(&mut ours, 50), percentile(&mut floor, 50));
    report(
        "handover (into_ticket + adopt vs one EVALSHA swap)",
        ours_p50,
        floor_p50,
    );
    println!(
        "p99: redlease {:?}, floor {:?}",
        percentile(&mut ours, 99),
        percentile(&mut floor, 99)
    );
    drop(guard);
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap()
}
