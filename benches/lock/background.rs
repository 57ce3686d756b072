//! `background`: lock + a dropped guard whose release is queued for the I/O
//! thread (`release_in_background`), vs the floor's lock + unlock (raw `SET NX
//! PX` + `EVALSHA` compare-and-delete, both waited for): p50 of one thread, and
//! the throughput of 8 threads each cycling over 8 keys of its own (a name
//! comes back while its release may still be queued: the next lock then takes
//! the lease back, with no round trip), and over 256 keys of its own (a name
//! comes back long after its release was sent: the batching alone). Each line
//! says the share of our locks that were taken back.

use std::sync::Arc;

use redlease::LockClient;

use super::support::RedisServer;
use super::support::bench::{eight_threads, paired, percentile, pin, report, wanted};
use super::{Floor, Lent};

/// Keys each side cycles over on one thread.
const KEYS: usize = 8;
/// Keys each thread cycles over in the batching figure: a name comes back only
/// after 255 others, its release long sent.
const SPREAD: usize = 256;
/// Paired rounds of each figure.
const ROUNDS: usize = 9;

pub(crate) fn bench() {
    if !wanted("background") {
        return;
    }
    let server = RedisServer::start();
    pin([&server]);
    let lc = LockClient::builder(server.url())
        .release_in_background(true)
        .build()
        .unwrap();
    let mut floor = Floor::new(&server);
    let names: Vec<String> = (0..KEYS).map(|k| format!("bench:bg{k}")).collect();
    let floors_names: Vec<String> = (0..KEYS).map(|k| format!("bench:bf{k}")).collect();
    let (mut i, mut j) = (0, 0);
    let before = lc.metrics();
    let mut ratios = Vec::new();
    let mut p50s = Vec::new();
    for _ in 0..ROUNDS {
        let (mut ours, mut base) = paired(
            4000,
            || {
                i += 1;
                drop(lc.lock(&names[i % KEYS]).unwrap());
            },
            || {
                j += 1;
                floor.lock_unlock(&floors_names[j % KEYS]);
            },
        );
        let (a, b) = (percentile(&mut ours, 50), percentile(&mut base, 50));
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
        p50s.push((a, b));
    }
    let mid = ROUNDS / 2;
    p50s.sort_by(|x, y| {
        (x.0.as_secs_f64() / x.1.as_secs_f64()).total_cmp(&(y.0.as_secs_f64() / y.1.as_secs_f64()))
    });
    report(
        "lock + dropped guard (background release), 1 thread, vs floor lock+unlock",
        p50s[mid].0,
        p50s[mid].1,
    );
    ratios.sort_by(f64::total_cmp);
    println!(
        "RATIO lock + dropped guard (background release) p50, median of {ROUNDS} rounds: \
         {:.3}x (rounds {:.3}x to {:.3}x; {:.1}% of ours taken back)",
        ratios[mid],
        ratios[0],
        ratios[ROUNDS - 1],
        taken_back(&before, &lc.metrics())
    );
    parallel(&server, &lc, KEYS);
    parallel(&server, &lc, SPREAD);
}

/// The share of the locks between `before` and `after` that took back a lease
/// whose release was still queued, in percent.
fn taken_back(before: &redlease::Metrics, after: &redlease::Metrics) -> f64 {
    let locks = after.acquired.saturating_sub(before.acquired).max(1);
    100.0 * after.handoffs.saturating_sub(before.handoffs) as f64 / locks as f64
}

/// 8 threads × `keys_each` keys each: redlease's lock + dropped guard vs the floor's
/// lock + unlock, in paired rounds (each side first in every other one).
fn parallel(server: &RedisServer, lc: &LockClient, keys_each: usize) {
    let before = lc.metrics();
    let ours = || {
        eight_threads(1000, |t| {
            let lc = lc.clone();
            let keys: Vec<String> = (0..keys_each).map(|k| format!("bench:bp{t}:{k}")).collect();
            Box::new(move |i| drop(lc.lock(&keys[i % keys_each]).unwrap()))
        })
    };
    let floors: Arc<parking_lot::Mutex<Vec<Floor>>> = Arc::new(parking_lot::Mutex::new(
        (0..8).map(|_| Floor::new(server)).collect(),
    ));
    let floor = || {
        eight_threads(1000, |t| {
            let mut lent = Lent {
                floor: floors.lock().pop(),
                home: Arc::clone(&floors),
            };
            let keys: Vec<String> = (0..keys_each).map(|k| format!("bench:bq{t}:{k}")).collect();
            Box::new(move |i| {
                lent.floor
                    .as_mut()
                    .expect("8 floors")
                    .lock_unlock(&keys[i % keys_each]);
            })
        })
    };
    let (mut ratios, mut o, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (x, y) = if round % 2 == 0 {
            let x = ours();
            (x, floor())
        } else {
            let y = floor();
            (ours(), y)
        };
        ratios.push(x / y);
        o.push(x);
        b.push(y);
    }
    for v in [&mut ratios, &mut o, &mut b] {
        v.sort_by(f64::total_cmp);
    }
    let mid = ROUNDS / 2;
    println!(
        "RATIO lock + dropped guard (background release), 8 threads x {keys_each} keys each: \
         redlease {:.0} ops/s / floor lock+unlock {:.0} ops/s = {:.3}x (median of {ROUNDS} \
         paired rounds; rounds {:.3}x to {:.3}x; {:.1}% of ours taken back)",
        o[mid],
        b[mid],
        ratios[mid],
        ratios[0],
        ratios[ROUNDS - 1],
        taken_back(&before, &lc.metrics())
    );
}
