//! redlease on a Redis Cluster against its floor, measured side by side in one run.
//!
//! - `lock+unlock`: one thread, one key, vs the raw `SET NX PX` + `EVALSHA`
//!   compare-and-delete sent straight to the master owning the key's slot (a
//!   client that already knows the slot map); medians of interleaved rounds.
//! - `8 threads x 64 keys`: aggregate lock+unlock ops/s on three masters vs on a
//!   one-master cluster, the same client code: how far the work spreads; each
//!   beside the raw commands on the owning masters.
//!
//! Run: `cargo bench --bench cluster --features cluster` (needs `redis-server`);
//! `REDLEASE_BENCH_PIN=1` pins every `redis-server` to core 0 and this process to
//! core 1 (`taskset`), as in `benches/lock.rs`. On two cores the masters share
//! one core, so the spread is bounded by that core, not by the client.

#[path = "../tests/support/mod.rs"]
mod support;

use redlease::LockClient;
use support::bench::{RELEASE, eight_threads, floor_token, paired, percentile, pin, set_nx_px};
use support::cluster::Cluster;

/// Raw connections to every master, and the key → master map of the cluster.
struct Floor {
    cons: Vec<redis::Connection>,
    release: redis::Script,
}

impl Floor {
    fn new(cluster: &Cluster, masters: usize) -> Self {
        Self {
            cons: cluster.nodes[..masters]
                .iter()
                .map(support::RedisServer::conn)
                .collect(),
            release: redis::Script::new(RELEASE),
        }
    }

    fn lock_unlock(&mut self, key: &str, owner: usize) {
        let token = floor_token();
        let con = &mut self.cons[owner];
        assert!(set_nx_px(con, key, &token), "floor key busy");
        let _: i64 = self.release.key(key).arg(&token).invoke(con).unwrap();
    }
}

fn lock_unlock(cluster: &Cluster) {
    let client = LockClient::cluster(cluster.urls()).build().unwrap();
    let mut floor = Floor::new(cluster, 3);
    let owner = cluster.owner(cluster.slot("bench:c"));
    let mut ours = || assert!(client.lock("bench:c").unwrap().unlock().unwrap().was_held());
    let mut base = || floor.lock_unlock("bench:f{bench:c}", owner);
    // Warm-up rounds, not counted.
    paired(200, &mut ours, &mut base);
    let (mut ours, mut base) = paired(3000, ours, base);
    let (o, b) = (percentile(&mut ours, 50), percentile(&mut base, 50));
    println!(
        "RATIO cluster lock+unlock: redlease p50 {o:?} / floor p50 {b:?} (owning master) = {:.3}x",
        o.as_secs_f64() / b.as_secs_f64()
    );
}

fn aggregate(cluster: &Cluster, masters: usize) -> (f64, f64) {
    let client = LockClient::cluster(cluster.urls()).build().unwrap();
    let keys: Vec<String> = (0..64).map(|i| format!("bench:s{i}")).collect();
    let owners: Vec<usize> = keys
        .iter()
        .map(|k| cluster.owner(cluster.slot(k)))
        .collect();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        // Each thread cycles over its own 8 of the keys.
        ours.push(eight_threads(1000, |t| {
            let (client, keys) = (client.clone(), keys.clone());
            Box::new(move |i| {
                let key = &keys[t * 8 + i % 8];
                assert!(client.lock(key).unwrap().unlock().unwrap().was_held());
            })
        }));
        base.push(eight_threads(1000, |t| {
            let mut floor = Floor::new(cluster, masters);
            let (keys, owners) = (keys.clone(), owners.clone());
            Box::new(move |i| {
                let k = t * 8 + i % 8;
                floor.lock_unlock(&format!("{{{}}}:f", keys[k]), owners[k]);
            })
        }));
    }
    ours.sort_by(f64::total_cmp);
    base.sort_by(f64::total_cmp);
    (ours[2], base[2])
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let three = Cluster::start(3, 0);
    pin(&three.nodes);
    lock_unlock(&three);
    let (o3, b3) = aggregate(&three, 3);
    drop(three);
    let one = Cluster::start(1, 0);
    pin(&one.nodes);
    let (o1, b1) = aggregate(&one, 1);
    println!(
        "RATIO cluster 8 threads x 64 keys, 3 masters: redlease {o3:.0} ops/s / floor {b3:.0} ops/s = {:.3}x",
        o3 / b3
    );
    println!(
        "RATIO cluster 8 threads x 64 keys, 1 master: redlease {o1:.0} ops/s / floor {b1:.0} ops/s = {:.3}x",
        o1 / b1
    );
    println!(
        "RATIO cluster spread, 3 masters / 1 master: redlease {:.2}x, floor {:.2}x",
        o3 / o1,
        b3 / b1
    );
}
