#![cfg(feature = "cluster")]
//! Redis Cluster: real `redis-server --cluster-enabled yes` nodes (three masters,
//! with a replica each where a failover is tested), slots moved with `CLUSTER
//! SETSLOT` and `MIGRATE` while locks are held and taken.
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient, LockOptions, Release};
use support::acl;
use support::cluster::Cluster;
use support::{RedisServer, eventually};

/// One increment as a plain read, yield, write: two holders at once lose one.
fn increment(counter: &AtomicU64) {
    let n = counter.load(Ordering::SeqCst);
    thread::yield_now();
    counter.store(n + 1, Ordering::SeqCst);
}

/// A client whose waits poll every 10 s: only a release message wakes them sooner.
fn polling_rarely(urls: &[String]) -> LockClient {
    LockClient::cluster(urls.to_vec())
        .key_prefix("lock:")
        .backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `holder` takes `key`, `waiter` waits for it; once the waiter's shard
/// subscription is up (Redis 7: sharded pub/sub, on the master of the key's slot),
/// the holder releases: how long until the waiter had it.
fn woken_after_release(
    cluster: &Cluster,
    holder: &LockClient,
    waiter: &LockClient,
    key: &str,
) -> Duration {
    let guard = holder.lock(key).unwrap();
    let channel = format!("{{lock:{key}}}:released");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.try_lock_for(key, Duration::from_secs(8)).unwrap();
            (Instant::now(), got.map(|g| g.unlock().unwrap()))
        });
        let subscribed = support::eventually(Duration::from_secs(10), || {
            cluster.nodes.iter().any(|n| {
                let (_, count): (String, i64) =
                    n.query(redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel));
                count > 0
            })
        });
        if !subscribed {
            for n in &cluster.nodes {
                let log: redis::Value = n.query(redis::cmd("ACL").arg("LOG"));
                println!("ACL LOG {}: {log:?}", n.port());
            }
        }
        assert!(
            subscribed,
            "{key}: the waiter never subscribed to its shard channel"
        );
        let at = Instant::now();
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        let (got_at, got) = waiting.join().unwrap();
        assert_eq!(got, Some(Release::Released), "{key}: not acquired");
        got_at - at
    })
}

/// Fenced lock + unlock on 12 keys named `<name>:<i>`, which land on every master.
fn fenced_locks_on_every_master(cluster: &Cluster, client: &LockClient, name: &str) {
    let opts = LockOptions::new().fencing(true);
    let mut masters = BTreeSet::new();
    for i in 0..12 {
        let key = format!("{name}:{i}");
        masters.insert(cluster.owner(cluster.slot(&format!("lock:{key}"))));
        let guard = client.lock_with(&key, &opts).unwrap().unwrap();
        assert!(guard.fence().is_some());
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    }
    assert_eq!(masters.len(), 3, "the keys must spread over every master");
}

/// Three clients for a [`Load`]: keys under `prefix`, 5 s leases, reads that
/// time out after `read_timeout`.
fn load_clients(cluster: &Cluster, prefix: &str, read_timeout: Duration) -> Vec<LockClient> {
    (0..3)
        .map(|_| {
            LockClient::cluster(cluster.urls())
                .key_prefix(prefix)
                .ttl(Duration::from_secs(5))
                .read_timeout(read_timeout)
                .build()
                .unwrap()
        })
        .collect()
}

/// A client whose reads time out after `read_timeout`.
fn timing_out(cluster: &Cluster, read_timeout: Duration) -> LockClient {
    LockClient::cluster(cluster.urls())
        .key_prefix("lock:")
        .read_timeout(read_timeout)
        .build()
        .unwrap()
}

fn client(cluster: &Cluster) -> LockClient {
    LockClient::cluster(cluster.urls())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn eight_threads_on_keys_of_every_master_never_overlap() {
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    let keys: Vec<String> = (0..24).map(|i| format!("job:{i}")).collect();
    let owners: BTreeSet<usize> = keys
        .iter()
        .map(|k| cluster.owner(cluster.slot(&format!("lock:{k}"))))
        .collect();
    assert_eq!(owners.len(), 3, "the keys must spread over every master");
    let counters: HashMap<&str, AtomicU64> = keys
        .iter()
        .map(|k| (k.as_str(), AtomicU64::new(0)))
        .collect();
    let rounds = 40 * support::stress_factor();
    thread::scope(|s| {
        for t in 0..8 {
            let (client, keys, counters) = (&client, &keys, &counters);
            s.spawn(move || {
                for r in 0..rounds {
                    let key = &keys[(t * 7 + r) % keys.len()];
                    let guard = client.lock(key).unwrap();
                    increment(&counters[key.as_str()]);
                    assert_eq!(guard.unlock().unwrap(), Release::Released);
                }
            });
        }
    });
    let total: u64 = counters.values().map(|c| c.load(Ordering::SeqCst)).sum();
    assert_eq!(
        total,
        8 * rounds as u64,
        "an update was lost: two holders at once"
    );
    for (i, master) in cluster.nodes.iter().enumerate() {
        assert!(
            master.command_calls("set") > 0 || !owners.contains(&i),
            "master {i} served none of its locks"
        );
    }
}

#[test]
fn fences_rise_per_key_and_their_counter_lives_in_the_keys_slot() {
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    let opts = LockOptions::new().fencing(true);
    for key in ["a", "b", "order:{7}:pay", "z"] {
        let mut last = 0;
        for _ in 0..3 {
            let guard = client.lock_with(key, &opts).unwrap().unwrap();
            let fence = guard.fence().unwrap();
            assert!(fence > last, "{key}: fence {fence} after {last}");
            last = fence;
            assert_eq!(guard.unlock().unwrap(), Release::Released);
        }
        let slot = cluster.slot(&format!("lock:{key}"));
        assert_fence_counter(&cluster.nodes[cluster.owner(slot)], slot, "lock:");
    }
}

#[test]
fn a_waiter_is_woken_by_the_release_message_not_by_polling() {
    let cluster = Cluster::start(3, 0);
    let holder = client(&cluster);
    let waiter = polling_rarely(&cluster.urls());
    let mut masters = BTreeSet::new();
    for key in ["w:1", "w:2", "w:3", "w:4", "w:5", "w:6"] {
        masters.insert(cluster.owner(cluster.slot(&format!("lock:{key}"))));
        let woken = woken_after_release(&cluster, &holder, &waiter, key);
        assert!(
            woken < Duration::from_secs(2),
            "{key}: woken after {woken:?}, i.e. by a poll"
        );
    }
    assert!(masters.len() >= 2, "the keys must be on several masters");
}

#[test]
fn a_slot_migrated_while_locks_are_held_and_taken_is_followed() {
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    let key = "moving";
    let slot = cluster.slot("lock:moving");
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    // Held across the whole migration, renewed (TTL 3 s).
    let long = LockClient::cluster(cluster.urls())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let held = long.lock("moving-held{moving}").unwrap();
    let counter = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let opts = LockOptions::new().fencing(true);
    let done = thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (client, counter, stop, opts) = (&client, &counter, &stop, &opts);
                s.spawn(move || {
                    let mut n = 0u64;
                    let mut last_fence = 0;
                    while !stop.load(Ordering::SeqCst) && n < 100_000 {
                        let fenced = t % 2 == 0;
                        let guard = if fenced {
                            client.lock_with(key, opts).unwrap().unwrap()
                        } else {
                            client.lock(key).unwrap()
                        };
                        if let Some(f) = guard.fence() {
                            assert!(f > last_fence, "fence went back: {f} after {last_fence}");
                            last_fence = f;
                        }
                        increment(counter);
                        assert_eq!(guard.unlock().unwrap(), Release::Released);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let pause = || thread::sleep(Duration::from_millis(300));
        pause();
        cluster.begin_migration(slot, from, to);
        pause();
        let moved = cluster.move_keys(slot, from, to);
        pause();
        cluster.finish_migration(slot, from, to);
        pause();
        stop.store(true, Ordering::SeqCst);
        let done: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(moved > 0, "the slot held no key to move");
        done
    });
    assert_eq!(counter.load(Ordering::SeqCst), done, "two holders at once");
    assert!(done > 20, "only {done} sections across the migration");
    assert!(
        cluster.nodes[to].command_calls("asking") > 0,
        "no call was sent to the importing master: the migration was not exercised"
    );
    assert!(held.is_held(), "a lease held across the migration was lost");
    assert_eq!(held.unlock().unwrap(), Release::Released);
    let owner = &cluster.nodes[to];
    let left: Vec<String> = owner.query(redis::cmd("KEYS").arg("lock:moving*"));
    assert!(left.is_empty(), "locks left behind: {left:?}");
}

#[test]
fn a_failover_of_a_shard_master_is_followed() {
    let cluster = Cluster::start(3, 1);
    let client = client(&cluster);
    let key = "{fo}";
    let slot = cluster.slot("lock:{fo}");
    let master = cluster.owner(slot);
    let replica = 3 + master;
    let held = client.lock(key).unwrap();
    // Replicated before the failover, so the new master has it.
    assert!(cluster.nodes[master].replicated(1, Duration::from_secs(10)));
    cluster.failover(replica);
    let other = cluster.client();
    let started = Instant::now();
    let taken = other.try_lock(key).unwrap();
    assert!(
        taken.is_none(),
        "the lock was granted twice after the failover"
    );
    let fresh = client.try_lock("{fo}:after").unwrap();
    assert!(fresh.is_some(), "no new lock on the promoted master");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "calls hung after the failover"
    );
    let outcome = held.unlock().unwrap();
    assert_eq!(
        outcome,
        Release::Released,
        "the lease was not kept on the new master"
    );
    assert!(
        cluster.nodes[replica].command_calls("evalsha")
            + cluster.nodes[replica].command_calls("delifeq")
            > 0,
        "nothing reached the promoted master"
    );
}

#[test]
fn a_server_outside_any_cluster_is_a_config_error() {
    let server = RedisServer::start();
    let err = LockClient::cluster([server.url()]).build().unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("not a cluster node"), "{err}");
    let none: [&str; 0] = [];
    let err = LockClient::cluster(none).build().unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
}

#[test]
fn a_foreign_token_holder_on_the_cluster_excludes_us() {
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    let owner = &cluster.nodes[cluster.owner(cluster.slot("lock:shared"))];
    let () = owner.query(
        redis::cmd("SET")
            .arg("lock:shared")
            .arg("redis-py-token")
            .arg("NX")
            .arg("PX")
            .arg(60_000),
    );
    assert!(client.try_lock("shared").unwrap().is_none());
    let () = owner.query(redis::cmd("DEL").arg("lock:shared"));
    let guard = client.try_lock("shared").unwrap().expect("free now");
    let value: String = owner.query(redis::cmd("GET").arg("lock:shared"));
    assert_ne!(value, "redis-py-token");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_crashed_shard_master_is_replaced_by_its_replica() {
    let cluster = Cluster::start(3, 1);
    let client = client(&cluster);
    let slot = cluster.slot("lock:{crash}");
    let master = cluster.owner(slot);
    let held = client.lock("{crash}").unwrap();
    // On the replica before the crash: a lock the replica never had is lost in the
    // failover (asynchronous replication; guide: *What it does not promise*).
    assert!(
        cluster.nodes[master].replicated(1, Duration::from_secs(10)),
        "the lock did not reach the replica"
    );
    cluster.nodes[master].kill();
    // The replica takes over after the node timeout (2 s) and a vote; calls meanwhile
    // may fail (the master is gone), never hang past their limits.
    let started = Instant::now();
    let mut errors = 0;
    let fresh = support::wait_for(Duration::from_secs(30), || {
        let call = Instant::now();
        let out = client.try_lock("{crash}:after");
        assert!(
            call.elapsed() < Duration::from_secs(4),
            "a call hung: {:?}",
            call.elapsed()
        );
        out.map_err(|_| errors += 1).ok().flatten()
    });
    let fresh = fresh.expect("no lock on the promoted replica within 30 s");
    println!(
        "first lock after the crash: {:?}, {errors} failed calls",
        started.elapsed()
    );
    assert!(
        cluster.nodes[3 + master].command_calls("set") > 0,
        "the new lock is not on the promoted replica"
    );
    assert_eq!(fresh.unlock().unwrap(), Release::Released);
    // The held lease was replicated: it is still held there, or reported lost;
    // never held by us while another client gets it.
    let other = LockClient::cluster(cluster.urls()[(master + 1) % 3..].to_vec())
        .key_prefix("lock:")
        .build()
        .unwrap();
    let second = other.try_lock("{crash}").unwrap();
    assert!(
        second.is_none() || !held.is_held(),
        "granted to another client while still reported held"
    );
}

#[test]
fn the_minimal_acl_user_runs_fenced_locks_on_every_master() {
    let cluster = Cluster::start(3, 0);
    for n in &cluster.nodes {
        let mut rule = acl::lock_rule(n);
        rule.push(acl::CLUSTER_RULE);
        acl::set_user(n, "locker", "pw", &rule);
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("redis://", "redis://locker:pw@"))
        .collect();
    let client = LockClient::cluster(urls.clone())
        .key_prefix("lock:")
        .build()
        .unwrap();
    fenced_locks_on_every_master(&cluster, &client, "acl");
    // Its waiters are woken by sharded release messages (polling every 10 s).
    let waiter = polling_rarely(&urls);
    let woken = woken_after_release(&cluster, &client, &waiter, "acl:w");
    assert!(
        woken < Duration::from_secs(2),
        "woken after {woken:?}: by a poll"
    );
    // The rule covers everything the clients sent, on every node.
    for n in &cluster.nodes {
        let log = acl::refusals(n);
        assert!(log.is_empty(), "refused on {}: {log:?}", n.port());
    }
    // The same user without EVALSHA is refused at build, naming the command.
    for n in &cluster.nodes {
        let () = n.query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("locker")
                .arg("-evalsha"),
        );
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("redis://", "redis://locker:pw@"))
        .collect();
    let built = LockClient::cluster(urls).key_prefix("lock:").build();
    let err = if cluster.nodes[0].has_conditional_commands() {
        // Valkey 9: an unfenced lock needs no script; a fenced one names it.
        let client = built.unwrap();
        assert!(client.lock("plain").unwrap().unlock().unwrap().was_held());
        client
            .lock_with("f", &LockOptions::new().fencing(true))
            .unwrap_err()
    } else {
        built.unwrap_err()
    };
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
    assert!(err.to_string().contains("evalsha"), "{err}");
    assert!(
        !format!("{err} {err:?}").contains("pw@"),
        "password shown: {err:?}"
    );
}

#[cfg(feature = "tls-rustls")]
#[test]
fn a_cluster_over_mutual_tls_runs_fenced_locks_and_refuses_a_client_without_certificate() {
    use support::tls::Ca;
    let ca = Ca::new("redlease cluster CA");
    let (server, peer, client_cert) = (ca.server(), ca.client(), ca.client());
    let dir = support::TempDir::new(0);
    let file = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let files = [
        ("--tls-cert-file", file("server.crt", &server.cert)),
        ("--tls-key-file", file("server.key", &server.key)),
        // The cluster bus is TLS too: nodes show each other a client certificate.
        ("--tls-client-cert-file", file("peer.crt", &peer.cert)),
        ("--tls-client-key-file", file("peer.key", &peer.key)),
        ("--tls-ca-cert-file", file("ca.crt", &ca.pem())),
    ];
    let cluster = Cluster::start_with(3, 0, || {
        let mut args = vec!["--tls-port".to_owned(), support::free_port().to_string()];
        for (flag, path) in &files {
            args.extend([(*flag).to_owned(), path.clone()]);
        }
        args.extend(["--tls-cluster", "yes", "--tls-auth-clients", "yes"].map(str::to_owned));
        args
    });
    let seeds: Vec<String> = cluster.nodes[..3]
        .iter()
        .map(|n| {
            let (_, port): (String, u16) = n.query(redis::cmd("CONFIG").arg("GET").arg("tls-port"));
            format!("rediss://127.0.0.1:{port}/")
        })
        .collect();
    let certs = redlease::TlsCertificates::new()
        .root_cert(ca.pem())
        .client_cert(client_cert.cert, client_cert.key);
    let client = LockClient::cluster(seeds.clone())
        .tls(certs)
        .key_prefix("lock:")
        .build()
        .unwrap();
    fenced_locks_on_every_master(&cluster, &client, "tls");
    // Without the client certificate the servers refuse the handshake.
    let refused = LockClient::cluster(seeds)
        .tls(redlease::TlsCertificates::new().root_cert(ca.pem()))
        .build();
    assert!(refused.is_err(), "a client without certificate was let in");
}

#[test]
fn dropping_a_cluster_client_joins_every_thread_it_started() {
    use support::alone::{ALONE_ENV, finish, redlease_threads, spawn_self};
    const TEST: &str = "dropping_a_cluster_client_joins_every_thread_it_started";
    if std::env::var_os(ALONE_ENV).is_none() {
        // Other tests' clients live in this process: count in a process of our own.
        finish(
            spawn_self(TEST, &[(ALONE_ENV, "1".to_owned())]),
            Duration::from_secs(60),
        );
        return;
    }
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    // One I/O thread per master, the map thread, one waiter per master (sharded
    // pub/sub on Redis 7), the renewal and callback threads.
    let named = support::eventually(Duration::from_secs(5), || {
        let names = redlease_threads();
        let count = |n: &str| names.iter().filter(|t| *t == n).count();
        count("redlease-io") == 3
            && count("redlease-map") == 1
            && count("redlease-wait") == 3
            && count("redlease-renew") == 1
            && count("redlease-notify") == 1
    });
    assert!(named, "{:?}", redlease_threads());
    let outliving = client.lock("outlives").unwrap();
    drop(client);
    let gone = support::eventually(Duration::from_secs(5), || redlease_threads().is_empty());
    assert!(gone, "threads left: {:?}", redlease_threads());
    // The guard that outlived its client still releases, on its own thread.
    assert_eq!(outliving.unlock().unwrap(), Release::Released);
    assert!(redlease_threads().is_empty(), "{:?}", redlease_threads());
}

/// The keys of [`a_slot_moved_under_fenced_load_surfaces_no_error`]; the
/// first one's slot moves.
const LOAD_KEYS: [&str; 3] = ["i:alpha", "i:beta", "i:gamma"];

/// What the workers of [`a_slot_moved_under_fenced_load_surfaces_no_error`]
/// share and saw.
#[derive(Default)]
struct Load {
    /// Acquire calls started on the moving key (progress the mover waits for).
    started: AtomicU64,
    acquired: AtomicU64,
    moving_acquired: AtomicU64,
    gave_up: AtomicU64,
    overlaps: AtomicU64,
    errors: parking_lot::Mutex<Vec<String>>,
    /// Per key: whether a worker holds it, the last fence taken.
    held: [AtomicBool; 3],
    fences: [AtomicU64; 3],
    stop: AtomicBool,
}

impl Load {
    /// The errors the workers saw, and how many of each.
    fn errors(&self) -> (Vec<String>, BTreeMap<String, usize>) {
        let errors = self.errors.lock().clone();
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for e in &errors {
            *kinds.entry(e.clone()).or_default() += 1;
        }
        (errors, kinds)
    }

    /// Asserts that no worker saw an error, no two held a key at once and no
    /// wait ran out.
    fn assert_clean(&self, errors: &[String], kinds: &BTreeMap<String, usize>) {
        assert!(errors.is_empty(), "{} errors: {kinds:#?}", errors.len());
        assert_eq!(
            self.overlaps.load(Ordering::SeqCst),
            0,
            "two holders at once"
        );
        assert_eq!(
            self.gave_up.load(Ordering::SeqCst),
            0,
            "a wait of 30 s ran out"
        );
    }

    /// Worker `t`: fenced lock, a 2 ms section, unlock, every other call on the
    /// moving key, until told to stop.
    fn work(&self, client: &LockClient, opts: &LockOptions, t: usize) {
        for r in 0..100_000usize {
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            let k = if r % 2 == 0 { 0 } else { 1 + (t + r / 2) % 2 };
            if k == 0 {
                self.started.fetch_add(1, Ordering::SeqCst);
            }
            let guard = match client.lock_with(LOAD_KEYS[k], opts) {
                Ok(Some(guard)) => guard,
                Ok(None) => {
                    self.gave_up.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                Err(e) => {
                    self.errors.lock().push(format!("{e}"));
                    continue;
                }
            };
            if self.held[k].swap(true, Ordering::SeqCst) {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            let fence = guard.fence().unwrap();
            let before = self.fences[k].swap(fence, Ordering::SeqCst);
            assert!(
                fence > before,
                "{}: fence {fence} after {before}",
                LOAD_KEYS[k]
            );
            self.acquired.fetch_add(1, Ordering::SeqCst);
            if k == 0 {
                self.moving_acquired.fetch_add(1, Ordering::SeqCst);
            }
            // The section: 2 ms of work.
            thread::sleep(Duration::from_millis(2));
            self.held[k].store(false, Ordering::SeqCst);
            match guard.unlock() {
                Ok(Release::Released) => {}
                Ok(other) => self.errors.lock().push(format!("released: {other:?}")),
                Err(e) => self.errors.lock().push(format!("{e}")),
            }
        }
    }

    /// Waits until the workers started a few more calls on the moving key, or
    /// met `TRYAGAIN` a few more times (a free lock's fenced acquire meets it until
    /// the slot has moved), so that every state of the slot meets some.
    fn progress(&self, cluster: &Cluster) {
        let started = || self.started.load(Ordering::SeqCst);
        let (at, met) = (started(), error_replies(&cluster.nodes, "TRYAGAIN"));
        let mut polls = 0u32;
        support::eventually(Duration::from_secs(5), || {
            polls += 1;
            started() >= at + 12
                || (polls.is_multiple_of(10)
                    && error_replies(&cluster.nodes, "TRYAGAIN") >= met + 12)
        });
    }
}

/// Sets its flag when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// `INFO errorstats` summed over `nodes`: how many `code` replies they sent.
fn error_replies(nodes: &[RedisServer], code: &str) -> u64 {
    let prefix = format!("errorstat_{code}:count=");
    nodes
        .iter()
        .map(|n| {
            let info: String = n.query(redis::cmd("INFO").arg("errorstats"));
            info.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// A slot moved under fenced load: six workers, two threads in each of three clients (as three
/// processes would; a client's own threads hand the lock to each other), lock
/// three keys with fences (TTL 5 s, 2 ms sections) while the first key's slot,
/// which holds its fence counter too, is moved from master to master: `SETSLOT
/// IMPORTING / MIGRATING`, `MIGRATE` in batches of 100, `SETSLOT NODE` on every
/// master. No acquire or release may fail, no two holders overlap, fences rise
/// per key.
#[test]
fn a_slot_moved_under_fenced_load_surfaces_no_error() {
    let cluster = Cluster::start(3, 0);
    let slot = cluster.slot("bar:i:alpha");
    let moves = 4 * support::stress_factor();
    let clients = load_clients(&cluster, "bar:", redlease::DEFAULT_IO_TIMEOUT);
    let opts = LockOptions::new()
        .fencing(true)
        .wait(Duration::from_secs(30));
    let load = Load::default();
    // The fence counter exists before the first move, so the slot has a key.
    let first = clients[0].lock_with(LOAD_KEYS[0], &opts).unwrap().unwrap();
    load.fences[0].store(first.fence().unwrap(), Ordering::SeqCst);
    assert_eq!(first.unlock().unwrap(), Release::Released);
    let mut owners = vec![cluster.owner(slot)];
    thread::scope(|s| {
        for t in 0..6 {
            let (load, client, opts) = (&load, &clients[t % clients.len()], &opts);
            s.spawn(move || load.work(client, opts, t));
        }
        // Set however the mover ends (a failed assertion too): workers stop.
        let _stop = Stop(&load.stop);
        load.progress(&cluster);
        for m in 0..moves {
            let from = *owners.last().unwrap();
            let to = (from + 1) % 3;
            // The first move holds both mid-migration states for longer than one
            // attempt may take (a read timeout, 2 s): waiting callers wait it out.
            let linger = || {
                if m == 0 {
                    thread::sleep(Duration::from_millis(2500));
                }
            };
            cluster.begin_migration(slot, from, to);
            load.progress(&cluster);
            linger();
            assert!(
                cluster.move_keys(slot, from, to) > 0,
                "the slot held no key"
            );
            load.progress(&cluster);
            linger();
            cluster.finish_migration(slot, from, to);
            load.progress(&cluster);
            owners.push(to);
        }
    });
    let (errors, kinds) = load.errors();
    let (acquired, moving) = (
        load.acquired.load(Ordering::SeqCst),
        load.moving_acquired.load(Ordering::SeqCst),
    );
    println!(
        "slot moves: {moves} moves of slot {slot} (masters {owners:?}); {acquired} acquisitions \
         ({moving} of the moving key), {} errors, {} gave up, {} overlaps; the masters replied \
         ASK {}, TRYAGAIN {}, MOVED {}",
        errors.len(),
        load.gave_up.load(Ordering::SeqCst),
        load.overlaps.load(Ordering::SeqCst),
        error_replies(&cluster.nodes, "ASK"),
        error_replies(&cluster.nodes, "TRYAGAIN"),
        error_replies(&cluster.nodes, "MOVED"),
    );
    load.assert_clean(&errors, &kinds);
    assert!(moving > 20, "only {moving} sections of the moving key");
    // The fence counter moved with its slot: it is on the last owner.
    assert_fence_counter(&cluster.nodes[*owners.last().unwrap()], slot, "bar:");
}

/// Asserts that `node` holds a fence counter of the key prefix `prefix` in
/// `slot` (among its first 10 keys there).
fn assert_fence_counter(node: &RedisServer, slot: u16, prefix: &str) {
    let in_slot: Vec<String> =
        node.query(redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10));
    let counter = format!("{prefix}redlease:fence:{{");
    assert!(
        in_slot.iter().any(|k| k.starts_with(&counter)),
        "no fence counter in slot {slot}: {in_slot:?}"
    );
}

/// While a slot is mid-migration, a free lock's fenced acquire meets
/// `TRYAGAIN` (its two keys, lock and fence counter, are never both on the master
/// asked) until the slot has moved. A caller that does not wait has it resent
/// for one read timeout, then gets it quoted; one that waits waits it out as for a
/// busy lock, up to its deadline; an unfenced lock (one key) is taken through
/// `ASK` at once.
/// A release on the source of a slot mid-migration while a caller of the same
/// client waits for the key (so the release also sends the release message):
/// `Released`, each time. On Valkey 9 that release is both deletes in one
/// pipeline; the source answers the second, its key deleted by the first, with
/// `ASK`, which must not send the release to the importing master (where the key
/// never was: `Expired`).
#[test]
fn a_release_mid_migration_with_a_caller_waiting_says_released() {
    let cluster = Cluster::start(3, 0);
    let client = client(&cluster);
    let fenced = LockOptions::new()
        .fencing(true)
        .wait(Duration::from_secs(30));
    for round in 0..3 {
        let key = format!("{{mig{round}}}:held");
        let slot = cluster.slot(&format!("lock:{key}"));
        let (from, to) = (cluster.owner(slot), (cluster.owner(slot) + 1) % 3);
        let held = client.lock(&key).unwrap();
        cluster.begin_migration(slot, from, to);
        let refused = cluster.nodes[from].error_replies("TRYAGAIN");
        thread::scope(|s| {
            let waiter = s.spawn(|| client.lock_with(&key, &fenced));
            // Its fenced attempt names the lock key, there, and the fence counter,
            // not yet made: the source refuses it, so it is in line.
            assert!(
                eventually(Duration::from_secs(10), || {
                    cluster.nodes[from].error_replies("TRYAGAIN") > refused
                }),
                "round {round}: the waiter never tried"
            );
            assert_eq!(
                held.unlock().unwrap(),
                Release::Released,
                "round {round}: a release of a lock held on the source"
            );
            cluster.move_keys(slot, from, to);
            cluster.finish_migration(slot, from, to);
            let guard = waiter.join().unwrap().unwrap().expect("taken once moved");
            assert_eq!(guard.unlock().unwrap(), Release::Released);
        });
    }
}

#[test]
fn a_fenced_acquire_mid_migration_waits_and_a_try_says_tryagain() {
    let cluster = Cluster::start(3, 0);
    let read_timeout = Duration::from_millis(600);
    let client = timing_out(&cluster, read_timeout);
    let fenced = LockOptions::new().fencing(true);
    let key = "{mid}:fenced";
    let slot = cluster.slot("lock:{mid}:fenced");
    let (from, to) = (cluster.owner(slot), (cluster.owner(slot) + 1) % 3);
    // Makes the fence counter.
    let first = client.lock_with(key, &fenced).unwrap().unwrap();
    let fence = first.fence().unwrap();
    assert_eq!(first.unlock().unwrap(), Release::Released);
    cluster.begin_migration(slot, from, to);

    let at = Instant::now();
    let tried = client.lock_with(key, &fenced.clone().wait(Duration::ZERO));
    let took = at.elapsed();
    let e = tried.expect_err("a try mid-migration is an error");
    assert!(
        e.to_string()
            .starts_with(r#"acquiring lock "lock:{mid}:fenced": redis replied TRYAGAIN: "#),
        "{e}"
    );
    assert!(
        took >= read_timeout / 2 && took < read_timeout + Duration::from_secs(2),
        "resent for {took:?}"
    );

    let at = Instant::now();
    let timed = client.lock_with(key, &fenced.clone().wait(Duration::from_secs(1)));
    assert!(timed.unwrap().is_none(), "the slot is still mid-migration");
    assert!(at.elapsed() >= Duration::from_secs(1), "{:?}", at.elapsed());

    // One key only: routed by `ASK` to the importing master, taken at once.
    let plain = client.try_lock("{mid}:plain").unwrap().expect("free");
    assert_eq!(plain.unlock().unwrap(), Release::Released);

    let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
    thread::scope(|s| {
        let blocked = s.spawn(|| {
            started.store(true, Ordering::SeqCst);
            let got = client.lock_with(key, &fenced.clone().wait(Duration::from_secs(20)));
            done.store(true, Ordering::SeqCst);
            got
        });
        assert!(support::eventually(Duration::from_secs(5), || {
            started.load(Ordering::SeqCst)
        }));
        // Longer than its attempts' bound (the read timeout), it still waits.
        let waiting = !support::eventually(read_timeout * 3, || done.load(Ordering::SeqCst));
        assert!(waiting, "the waiting caller returned mid-migration");
        assert!(cluster.move_keys(slot, from, to) > 0, "the counter moved");
        cluster.finish_migration(slot, from, to);
        let guard = blocked.join().unwrap().unwrap().expect("taken once moved");
        assert!(guard.fence().unwrap() > fence, "fence rose across the move");
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    });
    assert!(
        cluster.nodes[to].command_calls("asking") > 0,
        "no call reached the importing master"
    );
}

/// `count` of `code` in a node's `INFO errorstats`.
fn errors(node: &RedisServer, code: &str) -> u64 {
    let info: String = node.query(redis::cmd("INFO").arg("errorstats"));
    let prefix = format!("errorstat_{code}:count=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|n| n.split(',').next()?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_renewal_chunk_that_meets_a_migrating_slot_is_renewed_lease_by_lease() {
    const N: usize = 20;
    let cluster = Cluster::start(3, 0);
    let client = LockClient::cluster(cluster.urls())
        .key_prefix("lock:")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    // One hash tag: every lease in one slot, so one script call renews them all.
    let guards: Vec<_> = (0..N)
        .map(|i| client.try_lock(&format!("{{mv}}:{i}")).unwrap().unwrap())
        .collect();
    let slot = cluster.slot("lock:{mv}:0");
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    let renewals = client.metrics().renewals;
    assert!(eventually(Duration::from_secs(10), || {
        client.metrics().renewals >= renewals + N as u64
    }));
    let (source, target) = (&cluster.nodes[from], &cluster.nodes[to]);
    assert!(
        source.command_calls("evalsha") < N as u64 / 2,
        "not in chunks"
    );
    // Half the keys move: the chunk's script meets missing keys (TRYAGAIN) and
    // each lease is sent again alone (those still here renewed, the others ASK).
    cluster.begin_migration(slot, from, to);
    let half: Vec<String> = (0..N / 2).map(|i| format!("lock:{{mv}}:{i}")).collect();
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(target.port())
        .arg("")
        .arg(0)
        .arg(5000);
    let () = source.query(migrate.arg("KEYS").arg(&half));
    source.reset_stats();
    assert!(eventually(Duration::from_secs(10), || {
        errors(source, "TRYAGAIN") >= 1 && source.command_calls("pexpire") >= N as u64 / 2
    }));
    cluster.move_keys(slot, from, to);
    cluster.finish_migration(slot, from, to);
    // On the new owner the leases are renewed again, chunked, and none was lost.
    let moved = Instant::now();
    target.reset_stats();
    assert!(eventually(Duration::from_secs(15), || {
        moved.elapsed() >= Duration::from_secs(4)
            && target.command_calls("pexpireat") >= 2 * N as u64
    }));
    assert!(guards.iter().all(redlease::LockGuard::is_held));
    assert_eq!(client.metrics().leases_lost, 0);
    let mut con = target.conn();
    for g in &guards {
        let pttl: i64 = redis::cmd("PTTL").arg(g.key()).query(&mut con).unwrap();
        assert!(pttl > 0, "{} not renewed on the new owner", g.key());
    }
    for g in guards {
        assert_eq!(g.unlock().unwrap(), Release::Released);
    }
}

/// Six workers, two threads in each of three clients of `prefix` (TTL 5 s, read
/// timeout `read_timeout`), lock [`LOAD_KEYS`] fenced with a wait of 30 s while
/// `faults` runs; they stop once it returns. Returns what they saw.
fn under_load(
    cluster: &Cluster,
    prefix: &str,
    read_timeout: Duration,
    faults: impl FnOnce(&Load),
) -> Load {
    let clients = load_clients(cluster, prefix, read_timeout);
    let opts = LockOptions::new()
        .fencing(true)
        .wait(Duration::from_secs(30));
    let load = Load::default();
    // The fence counters exist before the faults, so each slot has a key.
    for (k, key) in LOAD_KEYS.iter().enumerate() {
        let first = clients[0].lock_with(key, &opts).unwrap().unwrap();
        load.fences[k].store(first.fence().unwrap(), Ordering::SeqCst);
        assert_eq!(first.unlock().unwrap(), Release::Released);
    }
    thread::scope(|s| {
        for t in 0..6 {
            let (load, client, opts) = (&load, &clients[t % clients.len()], &opts);
            s.spawn(move || load.work(client, opts, t));
        }
        // Set however the faults end (a failed assertion too): workers stop.
        let _stop = Stop(&load.stop);
        faults(&load);
    });
    load
}

/// No acquire or release failed, no two holders overlapped, no wait ran out.
fn assert_no_error(load: &Load, what: &str) {
    let (errors, kinds) = load.errors();
    println!(
        "{what}: {} acquisitions ({} of the first key), {} errors, {} gave up, {} overlaps",
        load.acquired.load(Ordering::SeqCst),
        load.moving_acquired.load(Ordering::SeqCst),
        errors.len(),
        load.gave_up.load(Ordering::SeqCst),
        load.overlaps.load(Ordering::SeqCst),
    );
    load.assert_clean(&errors, &kinds);
}

/// `SETSLOT NODE` told to the source first (as tools and operators may): for
/// 300 ms the source answers `MOVED` to the target and the target, still
/// importing, `MOVED` back. Callers in that window pause and send again, with the
/// map read again, until the two agree; no acquire or release fails, and a lease
/// held across the moves is kept.
#[test]
fn a_slot_moved_source_first_under_fenced_load_surfaces_no_error() {
    let cluster = Cluster::start(3, 0);
    let slot = cluster.slot("bar:i:alpha");
    let moves = 4 * support::stress_factor();
    let holder = client(&cluster);
    // In the moving slot (its hash tag), renewed across the moves.
    let held = holder.lock("{bar:i:alpha}:held").unwrap();
    let mut owners = vec![cluster.owner(slot)];
    let mut redirected = 0;
    let load = under_load(&cluster, "bar:", Duration::from_secs(2), |load| {
        load.progress(&cluster);
        for _ in 0..moves {
            let from = *owners.last().unwrap();
            let to = (from + 1) % 3;
            cluster.begin_migration(slot, from, to);
            load.progress(&cluster);
            assert!(
                cluster.move_keys(slot, from, to) > 0,
                "the slot held no key"
            );
            load.progress(&cluster);
            let before = error_replies(&cluster.nodes, "MOVED");
            cluster.finish_migration_source_first(slot, from, to, Duration::from_millis(300));
            redirected += error_replies(&cluster.nodes, "MOVED") - before;
            load.progress(&cluster);
            owners.push(to);
        }
    });
    println!("{moves} moves of slot {slot} (masters {owners:?}), {redirected} MOVED replies");
    assert_no_error(&load, "source first");
    assert!(
        redirected >= moves as u64,
        "only {redirected} MOVED replies: the windows were not met"
    );
    let moving = load.moving_acquired.load(Ordering::SeqCst);
    assert!(moving > 20, "only {moving} sections of the moving key");
    assert!(held.is_held(), "a lease held across the moves was lost");
    assert_eq!(held.unlock().unwrap(), Release::Released);
}

/// A graceful `CLUSTER FAILOVER` of each master and back, the first key's master
/// first, while workers lock and release: calls follow the new master, and a node
/// that sees the cluster failed for a moment after a failover (`CLUSTERDOWN`, in
/// about one run of three here) is waited out. (A master is not failed over twice
/// within 4 s: the other masters would deny their votes, and the master hold
/// writes for the 5 s the attempt lasts, as long as the locks' TTL. The old master
/// holds writes while its replica takes over: a call with no reply by then may
/// have run and is an error, so the clients wait 10 s for a reply.)
#[test]
fn a_failover_under_fenced_load_surfaces_no_error() {
    let cluster = Cluster::start(3, 1);
    let first = cluster.owner(cluster.slot("bar:i:alpha"));
    // Replica `3 + m` follows master `m`; each pair swaps roles and back.
    let order: Vec<usize> = (0..3)
        .map(|i| (first + i) % 3)
        .flat_map(|m| [3 + m, m])
        .collect();
    let mut took = Vec::new();
    let load = under_load(&cluster, "bar:", Duration::from_secs(10), |load| {
        load.progress(&cluster);
        for node in order {
            let at = Instant::now();
            cluster.failover(node);
            took.push(at.elapsed());
            load.progress(&cluster);
        }
    });
    println!(
        "failovers took {took:?}: the nodes replied MOVED {}, CLUSTERDOWN {}",
        error_replies(&cluster.nodes, "MOVED"),
        error_replies(&cluster.nodes, "CLUSTERDOWN"),
    );
    assert_no_error(&load, "failover");
    assert!(
        load.moving_acquired.load(Ordering::SeqCst) > 20,
        "too few sections of the failed-over key"
    );
}

/// A master frozen (`SIGSTOP`) until the others mark it failed and its replica
/// takes over: meanwhile the healthy masters answer `CLUSTERDOWN` to every call,
/// keys of their own slots too. Workers on those keys pause and send again; no
/// acquire or release fails, and a lease held across the outage is kept.
#[test]
fn a_cluster_briefly_down_surfaces_no_error_on_healthy_masters() {
    let cluster = Cluster::start(3, 1);
    // A prefix that puts no key of the load on the master to freeze.
    let frozen = 0;
    let prefix = (0..1000)
        .map(|i| format!("d{i}:"))
        .find(|p| {
            LOAD_KEYS
                .iter()
                .all(|k| cluster.owner(cluster.slot(&format!("{p}{k}"))) != frozen)
        })
        .unwrap();
    let healthy = [1, 2];
    // On a healthy master (the first key's hash tag), renewed across the outage.
    let holder = client(&cluster);
    let held = holder.lock(&format!("{{{prefix}i:alpha}}:held")).unwrap();
    let mut down_for = Duration::ZERO;
    let load = under_load(&cluster, &prefix, Duration::from_secs(2), |load| {
        load.progress(&cluster);
        cluster.nodes[frozen].pause();
        let thaw = Thaw(&cluster.nodes[frozen]);
        let down = eventually(Duration::from_secs(20), || {
            healthy.iter().any(|&i| cluster.state(i) == "fail")
        });
        assert!(down, "no healthy master saw the cluster down");
        let at = Instant::now();
        let slot0 = 0;
        let replica_port = cluster.nodes[3].port();
        let up = eventually(Duration::from_secs(30), || {
            healthy.iter().all(|&i| {
                cluster.state(i) == "ok" && cluster.owner_seen_by(i, slot0) == Some(replica_port)
            })
        });
        assert!(up, "the replica never took over");
        down_for = at.elapsed();
        // Thawed first: the progress check reads every node's counters.
        drop(thaw);
        load.progress(&cluster);
    });
    let refused = error_replies(&cluster.nodes[1..3], "CLUSTERDOWN");
    println!("down for {down_for:?}: the healthy masters replied CLUSTERDOWN {refused}");
    assert_no_error(&load, "cluster down");
    assert!(refused > 0, "no call met the cluster down");
    assert!(held.is_held(), "a lease held across the outage was lost");
    assert_eq!(held.unlock().unwrap(), Release::Released);
}

/// Resumes a paused server when dropped (a failed assertion too).
struct Thaw<'a>(&'a RedisServer);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// While the source of a moved slot points at the destination and the
/// destination points back, a call that does not wait keeps sending itself
/// (paused, the map read again) for one read timeout, then quotes the last
/// `MOVED`; a release too, its lock left to its TTL. Once the destination is
/// told, the same calls succeed.
///
/// The destination has dropped its import (`SETSLOT STABLE`) before the source is
/// told: a Valkey destination still importing takes the slot by itself as soon as
/// the source's gossip says it gave it away (within about a second), which ends
/// the disagreement; Redis 7's waits for its own `SETSLOT NODE`. A destination
/// that is not importing points back on both, as long as nobody tells it.
#[test]
fn a_lasting_disagreement_is_quoted_after_one_read_timeout() {
    let cluster = Cluster::start(3, 0);
    let read_timeout = Duration::from_millis(600);
    let client = timing_out(&cluster, read_timeout);
    let slot = cluster.slot("lock:{split}:held");
    let (from, to) = (cluster.owner(slot), (cluster.owner(slot) + 1) % 3);
    let held = client.try_lock("{split}:held").unwrap().expect("free");
    cluster.begin_migration(slot, from, to);
    assert!(cluster.move_keys(slot, from, to) > 0, "the lock moved");
    let setslot = |node: usize, state: &str, id: Option<String>| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        let () = cluster.nodes[node].query(&cmd);
    };
    setslot(to, "STABLE", None);
    // The source only: it now points at the destination, which points back.
    setslot(from, "NODE", Some(cluster.id(to)));
    let in_bounds = |took: Duration| took >= read_timeout / 2 && took < read_timeout * 4;
    let at = Instant::now();
    let tried = client.try_lock("{split}:other");
    let took = at.elapsed();
    let e = tried.expect_err("no node serves the slot yet");
    assert!(
        e.to_string()
            .starts_with(r#"acquiring lock "lock:{split}:other": redis replied MOVED: "#),
        "{e}"
    );
    assert!(in_bounds(took), "resent for {took:?}");
    let at = Instant::now();
    let e = held.unlock().expect_err("no node serves the slot yet");
    let took = at.elapsed();
    assert!(e.to_string().contains("redis replied MOVED: "), "{e}");
    assert!(in_bounds(took), "resent for {took:?}");
    // Importing again, so that taking the slot bumps the destination's epoch.
    setslot(to, "IMPORTING", Some(cluster.id(from)));
    cluster.finish_migration(slot, from, to);
    let after = client.try_lock("{split}:other").unwrap().expect("free");
    assert_eq!(after.unlock().unwrap(), Release::Released);
}

#[test]
fn inspect_follows_a_slot_that_moved_to_another_master() {
    let cluster = Cluster::start(3, 0);
    let holder = cluster.client();
    let client = cluster.client();
    let name = "moving";
    let slot = cluster.slot("lock:moving");
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    // The client's map names `from` for the slot, and has used it.
    assert!(client.inspect(name).unwrap().holders().is_empty());
    let guard = holder.lock(name).unwrap();
    cluster.begin_migration(slot, from, to);
    assert!(
        cluster.move_keys(slot, from, to) > 0,
        "the lock did not move"
    );
    cluster.finish_migration(slot, from, to);
    // `from` answers MOVED now: the read goes where it says, within the call.
    let info = client.inspect(name).expect("a moved slot is followed");
    assert_eq!(info.holders().len(), 1, "{info:?}");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(client.inspect(name).unwrap().holders().is_empty());
}

/// Liveness on a cluster: a waiter on a live liveness holder's lock (fenced or
/// not, token or Redisson-format, read-write or fair) waits without an error
/// and breaks nothing.
#[test]
fn a_liveness_holders_lock_on_a_cluster_is_waited_for_and_left_to_its_ttl() {
    let cluster = Cluster::start(3, 0);
    let holder = LockClient::cluster(cluster.urls())
        .liveness(Duration::from_secs(1))
        .build()
        .unwrap();
    let waiter = LockClient::cluster(cluster.urls()).build().unwrap();
    let short = Duration::from_millis(400);
    // Waited for over two liveness periods: the token's waiter reads the
    // holder's record on its own node each time it would end.
    let long = Duration::from_millis(2500);
    let schemes = [
        LockOptions::new(),
        LockOptions::new().fencing(true),
        LockOptions::new().scheme(redlease::Scheme::Reentrant),
    ];
    let held: Vec<_> = schemes
        .iter()
        .enumerate()
        .map(|(i, opts)| {
            holder
                .lock_with(&format!("live{i}"), opts)
                .unwrap()
                .unwrap()
        })
        .collect();
    thread::scope(|s| {
        for (i, opts) in schemes.iter().enumerate() {
            let waiter = &waiter;
            s.spawn(move || {
                let got = waiter.lock_with(&format!("live{i}"), &opts.clone().wait(long));
                assert!(matches!(got, Ok(None)), "live{i}: {got:?}");
            });
        }
    });
    assert!(held.iter().all(redlease::LockGuard::is_held));
    std::mem::forget(held);
    // A read-write lock's writer and a fair lock likewise.
    let written = holder.read_write_lock("live-rw").unwrap().write().unwrap();
    let queued = holder.fair_lock("live-fair").unwrap().lock().unwrap();
    let rw = waiter.read_write_lock("live-rw").unwrap();
    let got = rw.try_write_for(short);
    assert!(matches!(got, Ok(None)), "write: {got:?}");
    let got = rw.try_read_for(short);
    assert!(matches!(got, Ok(None)), "read: {got:?}");
    let got = waiter.fair_lock("live-fair").unwrap().try_lock_for(short);
    assert!(matches!(got, Ok(None)), "fair: {got:?}");
    std::mem::forget((written, queued));
    assert_eq!(waiter.metrics().dead_holders_broken, 0);
}

/// The environment that makes this binary a holder on a cluster: its URLs,
/// comma-separated.
const CHILD_URLS: &str = "CLUSTER_CHILD_URLS";

/// Run as a separate process by the test below: a client with a 1 s liveness
/// holds `dead0` (a token), `dead1` (fenced) and `dead2` (Redisson-format),
/// TTL 30 s, until killed (or for two minutes).
#[test]
#[ignore = "a holder process of the other tests"]
fn child_holds_on_cluster() {
    let Ok(urls) = std::env::var(CHILD_URLS) else {
        return;
    };
    let client = LockClient::cluster(urls.split(',').map(str::to_owned).collect::<Vec<_>>())
        .liveness(Duration::from_secs(1))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let held = [
        LockOptions::new(),
        LockOptions::new().fencing(true),
        LockOptions::new().scheme(redlease::Scheme::Reentrant),
    ]
    .iter()
    .enumerate()
    .map(|(i, opts)| {
        client
            .lock_with(&format!("dead{i}"), opts)
            .unwrap()
            .unwrap()
    })
    .collect::<Vec<_>>();
    println!("ready");
    thread::sleep(Duration::from_secs(120));
    drop(held);
}

/// A liveness holder on a cluster killed with SIGKILL: its token locks (fenced
/// or not) are taken about one liveness later, its record read on its own
/// node and then its exact token removed; its Redisson-format lock (whose
/// field is the same in every session of its client) waits for its TTL.
#[test]
fn a_killed_liveness_holders_token_locks_on_a_cluster_are_taken_within_its_liveness() {
    let cluster = Cluster::start(3, 0);
    let urls = cluster.urls().join(",");
    let (mut child, _) =
        support::alone::spawn_until_ready("child_holds_on_cluster", &[(CHILD_URLS, urls)]);
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let waiter = LockClient::cluster(cluster.urls()).build().unwrap();
    let within = Duration::from_millis(1000 + 1500);
    thread::scope(|s| {
        for (i, opts) in [LockOptions::new(), LockOptions::new().fencing(true)]
            .into_iter()
            .enumerate()
        {
            let waiter = &waiter;
            s.spawn(move || {
                let got = waiter
                    .lock_with(&format!("dead{i}"), &opts.wait(Duration::from_secs(10)))
                    .unwrap();
                let took = killed.elapsed();
                assert!(
                    got.is_some() && took <= within,
                    "dead{i}: taken {took:?} after the kill"
                );
            });
        }
        let reentrant = LockOptions::new().scheme(redlease::Scheme::Reentrant);
        let got = waiter.lock_with("dead2", &reentrant.wait(within)).unwrap();
        assert!(
            got.is_none(),
            "a Redisson-format lock was broken in a cluster"
        );
    });
    assert_eq!(waiter.metrics().dead_holders_broken, 2);
}
