//! Locks on a Redis Cluster: a fleet of worker threads takes fenced locks on jobs
//! whose keys spread over every master, and each job's store checks the fences.
//!
//! ```text
//! REDIS_CLUSTER_URLS=redis://10.0.0.1:7000/,redis://10.0.0.2:7000/ cargo run --example cluster --features cluster
//! cargo run --example cluster --features cluster    # a private three-master cluster
//! ```
//!
//! With `REDIS_CLUSTER_URLS` unset, it starts three `redis-server --cluster-enabled
//! yes` processes on free loopback ports (their `nodes.conf` in a temporary
//! directory), gives each a third of the slots and joins them, says so on stderr,
//! and stops them at the end. With it set, it touches only keys under a fresh
//! random prefix.

#[path = "support/private_server.rs"]
mod private_server;

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use private_server::{PrivateServer, announce};
use redlease::{LockClient, LockOptions};

const WORKERS: usize = 4;
const JOBS: usize = 12;
const ROUNDS: usize = 5;

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("redlease-cluster-{}", std::process::id()));
    let mut private: Vec<PrivateServer> = Vec::new();
    let urls: Vec<String> = if let Ok(list) = std::env::var("REDIS_CLUSTER_URLS") {
        list.split(',').map(|u| u.trim().to_owned()).collect()
    } else {
        std::fs::create_dir_all(&dir)?;
        private = start_cluster(&dir)?;
        announce(
            &private,
            "REDIS_CLUSTER_URLS unset; started a private three-master cluster",
        )
    };
    let prefix = format!("redlease-example:{}:", uuid::Uuid::new_v4());
    let client = LockClient::cluster(urls.iter().map(String::as_str))
        .key_prefix(prefix.as_str())
        .ttl(Duration::from_secs(10))
        .build()?;

    // Where each job's lock lives: the master serving its key's slot.
    let mut seed = redis::Client::open(urls[0].as_str())?.get_connection()?;
    let mut by_slot: BTreeMap<u16, usize> = BTreeMap::new();
    for job in 0..JOBS {
        let key = format!("{prefix}job:{job}");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut seed)?;
        *by_slot.entry(slot / 5462).or_default() += 1;
    }
    println!("jobs per third of the slot range (one master each): {by_slot:?}");

    // The store each job writes to keeps the highest fence it accepted and refuses
    // an older one: a holder that lost its lock cannot overwrite a newer write.
    let store: Mutex<HashMap<usize, u64>> = Mutex::new(HashMap::new());
    let opts = LockOptions::new().fencing(true);
    let started = Instant::now();
    thread::scope(|s| -> Result<(), Box<dyn Error>> {
        let mut workers = Vec::new();
        for w in 0..WORKERS {
            let (client, store, opts) = (&client, &store, &opts);
            workers.push(s.spawn(move || -> redlease::Result<()> {
                for r in 0..ROUNDS * JOBS / WORKERS {
                    let job = (w * 5 + r) % JOBS;
                    let guard = client
                        .lock_with(&format!("job:{job}"), opts)?
                        .expect("lock_with without a wait bound waits");
                    let fence = guard.fence().expect("fencing was asked for");
                    let mut store = store.lock();
                    let last = store.entry(job).or_insert(0);
                    assert!(fence > *last, "job {job}: fence {fence} after {last}");
                    *last = fence;
                    drop(store);
                    assert!(guard.unlock()?.was_held(), "job {job}: lease lost");
                }
                Ok(())
            }));
        }
        for worker in workers {
            worker.join().map_err(|_| "a worker panicked")??;
        }
        Ok(())
    })?;
    let written = store.lock().len();
    println!(
        "{WORKERS} workers ran {} fenced jobs over {written} keys in {:?}; every fence rose",
        ROUNDS * JOBS,
        started.elapsed()
    );
    let m = client.metrics();
    println!(
        "acquired {}, released {}, renewals {}, wake-ups {}",
        m.acquired, m.released, m.renewals, m.wakeups
    );
    drop(client);
    drop(private);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Three cluster-enabled servers, a third of the slots each, joined and agreed.
fn start_cluster(dir: &std::path::Path) -> Result<Vec<PrivateServer>, Box<dyn Error>> {
    let dir = dir.to_str().ok_or("temp dir is not utf-8")?.to_owned();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(PrivateServer::start_with(|port| {
            let conf = format!("{dir}/nodes-{port}.conf");
            // The bus port defaults to port + 10000, which may not exist.
            let bus = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_or(0, |a| a.port())
                .to_string();
            let args = ["--cluster-enabled", "yes", "--cluster-config-file", &conf];
            let mut args = args.map(str::to_owned).to_vec();
            args.extend(["--cluster-port".to_owned(), bus]);
            args
        })?);
    }
    let conn = |n: &PrivateServer| redis::Client::open(n.url())?.get_connection();
    for (i, n) in nodes.iter().enumerate() {
        let (start, end) = (i * 5462, if i == 2 { 16383 } else { i * 5462 + 5461 });
        redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(start)
            .arg(end)
            .exec(&mut conn(n)?)?;
        if i > 0 {
            let bus: (String, u16) = redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-port")
                .query(&mut conn(n)?)?;
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(n.port)
                .arg(bus.1)
                .exec(&mut conn(&nodes[0])?)?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in &nodes {
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn(n)?)?;
            if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                break;
            }
            if Instant::now() > deadline {
                return Err("the private cluster did not come up".into());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(nodes)
}
