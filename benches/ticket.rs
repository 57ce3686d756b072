//! A lease handed over as a ticket, against its floor, measured side by side.
//!
//! - `handover`: one `guard.into_ticket()` (nothing sent) and `client.adopt()`
//!   (one `EVALSHA`) of a held lock, by two clients taking turns, beside the
//!   floor: the one raw `EVALSHA` of a compare-and-swap that any correct
//!   adoption must send (compare the old token, read the `PTTL`, `SET` the new
//!   token with it), on a raw connection. Rounds alternate; the report is each
//!   side's median and their ratio.
//! - `handover_reentrant`: the same for a Redisson-format reentrant lock
//!   (`into_ticket` + `adopt`, the hold moved to the adopter's owner field),
//!   beside the one raw `EVALSHA` any correct move sends (the hash holds the
//!   old field alone, counting one; its `PTTL`; `HSET` the new field, `HDEL`
//!   the old).
//! - `handover_permit`: the same for one permit of a semaphore
//!   (`PermitGuard::into_ticket` + `adopt_permit`, the id swapped for the
//!   adopter's with its expiry), beside the one raw `EVALSHA` any correct swap
//!   sends (the old id's score, checked against now; `ZADD` the new id with
//!   it, `ZREM` the old).
//!
//! Run: `cargo bench --bench ticket` (needs `redis-server` on PATH);
//! `REDLEASE_BENCH_PIN=1` pins `redis-server` to core 0 and this process to
//! core 1 (`taskset`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use redlease::{LockClient, LockGuard, LockOptions, PermitGuard, Scheme};
use support::RedisServer;
use support::bench::{floor_token, paired, percentile, pin, report, set_nx_px, wanted};

const ROUNDS: usize = 5_000;

/// The floor's adoption: compare, `PTTL`, `SET … PX` in one script.
const SWAP: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     local t = redis.call('PTTL', KEYS[1]); redis.call('SET', KEYS[1], ARGV[2], 'PX', t); \
     return t end return -3";

/// The floor's reentrant move: the old field alone with one hold, `PTTL`,
/// `HSET` the new field, `HDEL` the old, in one script.
const MOVE: &str = "local f = redis.call('HKEYS', KEYS[1]) \
     if #f == 1 and f[1] == ARGV[1] and redis.call('HGET', KEYS[1], ARGV[1]) == '1' then \
     local t = redis.call('PTTL', KEYS[1]); redis.call('HSET', KEYS[1], ARGV[2], 1); \
     redis.call('HDEL', KEYS[1], ARGV[1]); return t end return -3";

/// The floor's permit swap: the old id's score after now, `ZADD` the new id
/// with it, `ZREM` the old, in one script.
const SWAP_PERMIT: &str = "local s = redis.call('ZSCORE', KEYS[1], ARGV[2]) \
     if s and tonumber(s) > tonumber(ARGV[1]) then \
     redis.call('ZADD', KEYS[1], s, ARGV[3]); redis.call('ZREM', KEYS[1], ARGV[2]); \
     return tonumber(s) - tonumber(ARGV[1]) end return -2";

fn main() {
    handover();
    handover_reentrant();
    handover_permit();
}

fn handover() {
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

fn handover_reentrant() {
    if !wanted("handover_reentrant") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let clients = [client(&server), client(&server)];
    let reentrant = LockOptions::new().scheme(Scheme::Reentrant);
    let first = clients[0].lock_with("bench:ours", &reentrant).unwrap();
    let mut guard: Option<LockGuard> = first;
    let mut turn = 0;
    let mut con = server.conn();
    let moved = redis::Script::new(MOVE);
    let mut field = format!("{}:1", floor_token());
    let _: () = redis::cmd("HSET")
        .arg("bench:floor")
        .arg(&field)
        .arg(1)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg("bench:floor")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let (mut ours, mut floor) = paired(
        ROUNDS,
        || {
            let ticket = guard.take().unwrap().into_ticket().unwrap();
            turn = 1 - turn;
            guard = Some(clients[turn].adopt(&ticket).unwrap());
        },
        || {
            let next = format!("{}:1", floor_token());
            let left: i64 = moved
                .key("bench:floor")
                .arg(&field)
                .arg(&next)
                .invoke(&mut con)
                .unwrap();
            assert!(left > 0);
            field = next;
        },
    );
    let (ours_p50, floor_p50) = (percentile(&mut ours, 50), percentile(&mut floor, 50));
    report(
        "handover_reentrant (into_ticket + adopt vs one EVALSHA move)",
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

fn handover_permit() {
    if !wanted("handover_permit") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let clients = [client(&server), client(&server)];
    let sem = clients[0].semaphore("bench:ours").unwrap();
    sem.ensure_permits(1).unwrap();
    let mut permit: Option<PermitGuard> = Some(sem.acquire().unwrap());
    let mut turn = 0;
    let mut con = server.conn();
    let swap = redis::Script::new(SWAP_PERMIT);
    let id = || uuid::Uuid::new_v4().as_bytes().to_vec();
    let mut old = id();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let expiry = u64::try_from(now()).unwrap() + 600_000;
    let _: () = redis::cmd("ZADD")
        .arg("{bench:floor}:timeout")
        .arg(expiry)
        .arg(&old)
        .query(&mut con)
        .unwrap();
    let (mut ours, mut floor) = paired(
        ROUNDS,
        || {
            let ticket = permit.take().unwrap().into_ticket().unwrap();
            turn = 1 - turn;
            permit = Some(clients[turn].adopt_permit(&ticket).unwrap());
        },
        || {
            let next = id();
            let left: i64 = swap
                .key("{bench:floor}:timeout")
                .arg(u64::try_from(now()).unwrap())
                .arg(&old)
                .arg(&next)
                .invoke(&mut con)
                .unwrap();
            assert!(left > 0);
            old = next;
        },
    );
    let (ours_p50, floor_p50) = (percentile(&mut ours, 50), percentile(&mut floor, 50));
    report(
        "handover_permit (into_ticket + adopt_permit vs one EVALSHA swap)",
        ours_p50,
        floor_p50,
    );
    println!(
        "p99: redlease {:?}, floor {:?}",
        percentile(&mut ours, 99),
        percentile(&mut floor, 99)
    );
    drop(permit);
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap()
}
