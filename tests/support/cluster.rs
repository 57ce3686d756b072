//! A Redis Cluster for the tests: `redis-server --cluster-enabled yes` processes on
//! free loopback ports (each with its own cluster-bus port and `nodes.conf` in its
//! own directory), slots split evenly by `CLUSTER ADDSLOTSRANGE`, joined by
//! `CLUSTER MEET`; replicas by `CLUSTER REPLICATE`. Killed on `Drop` (each node is
//! a [`RedisServer`]).

use std::time::Duration;

use super::{RedisServer, eventually, free_port};

/// How long the cluster may take to agree on its state.
const CONVERGE: Duration = Duration::from_secs(20);

/// Masters (`nodes[..masters]`) and their replicas.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    masters: usize,
}

impl Cluster {
    /// `masters` masters sharing the 16384 slots evenly, each with `replicas`
    /// replicas; returns once every node sees the cluster as `ok` and every
    /// replica is in sync.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        Cluster::start_with(masters, replicas, Vec::new)
    }

    /// [`start`](Self::start), each node with the arguments `extra` makes
    /// (`--tls-port` and certificates, say).
    pub fn start_with(masters: usize, replicas: usize, extra: impl Fn() -> Vec<String>) -> Cluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| node(&extra()))
            .collect();
        let per = 16384 / masters;
        for (i, n) in nodes[..masters].iter().enumerate() {
            let start = i * per;
            let end = if i + 1 == masters {
                16383
            } else {
                start + per - 1
            };
            let () = n.query(
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(start)
                    .arg(end),
            );
        }
        let cluster = Cluster { nodes, masters };
        for n in &cluster.nodes[1..] {
            let () = cluster.nodes[0].query(
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(n.port())
                    .arg(bus_port(n)),
            );
        }
        let all = cluster.nodes.len();
        for n in &cluster.nodes {
            let knows = eventually(CONVERGE, || known_nodes(n) == all);
            assert!(knows, "node {} does not see all {all} nodes", n.port());
        }
        for (i, r) in cluster.nodes[masters..].iter().enumerate() {
            let master = cluster.id(i % masters);
            let ok = eventually(CONVERGE, || {
                redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&master)
                    .query::<()>(&mut r.conn())
                    .is_ok()
            });
            assert!(ok, "replica {} did not follow its master", r.port());
        }
        for r in &cluster.nodes[masters..] {
            let synced = eventually(CONVERGE, || {
                info(r, "replication").contains("master_link_status:up")
            });
            assert!(synced, "replica {} did not sync", r.port());
        }
        for n in &cluster.nodes {
            let ok = eventually(CONVERGE, || info_cluster(n).contains("cluster_state:ok"));
            assert!(ok, "node {} never saw the cluster ok", n.port());
        }
        cluster
    }

    /// The masters' URLs (seeds for a client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes[..self.masters]
            .iter()
            .map(RedisServer::url)
            .collect()
    }

    /// A client of this cluster with its keys under `lock:`.
    pub fn client(&self) -> redlease::LockClient {
        redlease::LockClient::cluster(self.urls())
            .key_prefix("lock:")
            .build()
            .unwrap()
    }

    /// The node id of `nodes[i]`.
    pub fn id(&self, i: usize) -> String {
        self.nodes[i].query(redis::cmd("CLUSTER").arg("MYID"))
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0].query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// The index in `nodes` of the master serving `slot`, as `nodes[0]` sees it.
    pub fn owner(&self, slot: u16) -> usize {
        let ranges: Vec<(u16, u16, (String, u16))> = slots_of(&self.nodes[0]).into_iter().collect();
        let port = ranges
            .iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))
            .map(|(_, _, (_, port))| *port)
            .expect("slot served");
        self.nodes.iter().position(|n| n.port() == port).unwrap()
    }

    /// Starts moving `slot` from `nodes[from]` to `nodes[to]`: importing on the
    /// target, then migrating on the source (the order Redis documents).
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.id(from), self.id(to));
        let () = self.nodes[to].query(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(from_id),
        );
        let () = self.nodes[from].query(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(to_id),
        );
    }

    /// Moves every key of `slot` from `nodes[from]` to `nodes[to]` (`MIGRATE`);
    /// returns how many it moved.
    pub fn move_keys(&self, slot: u16, from: usize, to: usize) -> usize {
        let mut moved = 0;
        for _ in 0..1000 {
            let keys: Vec<String> = self.nodes[from].query(
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            );
            if keys.is_empty() {
                return moved;
            }
            let mut cmd = redis::cmd("MIGRATE");
            cmd.arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            // A key that expired or was deleted meanwhile answers NOKEY: fine.
            let _: redis::RedisResult<redis::Value> = cmd.query(&mut self.nodes[from].conn());
            moved += keys.len();
        }
        panic!("slot {slot} never emptied");
    }

    /// Ends the migration: `nodes[to]` owns `slot` (told to the target, the
    /// source, then every other master).
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize) {
        self.assign(slot, to, [to, from], Duration::ZERO);
    }

    /// Ends the migration source first: `nodes[from]` is told that `nodes[to]`
    /// owns `slot`, then, `gap` later, `nodes[to]` and every other master. In
    /// between the source points at the target while the target, still
    /// importing, points back (as an operator's tool may leave it for a moment).
    pub fn finish_migration_source_first(&self, slot: u16, from: usize, to: usize, gap: Duration) {
        self.assign(slot, to, [from, to], gap);
    }

    /// Moves `slot` and its keys from `nodes[from]` to `nodes[to]` at once
    /// ([`Cluster::begin_migration`], [`Cluster::move_keys`],
    /// [`Cluster::finish_migration`]); returns how many keys it moved.
    pub fn migrate(&self, slot: u16, from: usize, to: usize) -> usize {
        self.begin_migration(slot, from, to);
        let moved = self.move_keys(slot, from, to);
        self.finish_migration(slot, from, to);
        moved
    }

    /// `cluster_state` as `nodes[i]` sees it: `ok` or `fail` (empty when it does
    /// not answer).
    pub fn state(&self, i: usize) -> String {
        info_cluster(&self.nodes[i])
            .lines()
            .find_map(|l| l.strip_prefix("cluster_state:"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// The port of the master serving `slot` as `nodes[i]` sees it.
    pub fn owner_seen_by(&self, i: usize, slot: u16) -> Option<u16> {
        slots_of(&self.nodes[i])
            .into_iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))
            .map(|(_, _, (_, port))| port)
    }

    /// `CLUSTER FAILOVER` on replica `nodes[replica]`, then waits until it is a
    /// master and every node agrees on the new owner of its slots. The replica
    /// is first let sync with its master (a failover right after the last one
    /// finds it still connecting); a manual failover that timed out (5 s) is
    /// asked again.
    pub fn failover(&self, replica: usize) {
        let port = self.nodes[replica].port();
        let synced = eventually(CONVERGE, || {
            info(&self.nodes[replica], "replication").contains("master_link_status:up")
        });
        assert!(synced, "replica {port} did not sync before its failover");
        // Every other node must know it as a replica, or the masters deny their
        // votes and its master holds writes until the manual failover times out.
        let id = self.id(replica);
        let known = eventually(CONVERGE, || {
            self.nodes
                .iter()
                .filter(|n| n.port() != port)
                .all(|n| role_seen(n, &id).is_some_and(|flags| flags.contains("slave")))
        });
        assert!(known, "replica {port} is not known as one everywhere");
        let promoted = || {
            info(&self.nodes[replica], "replication").contains("role:master")
                && self
                    .nodes
                    .iter()
                    .filter(|n| n.port() != port)
                    .all(|n| slots_of(n).iter().any(|(_, _, (_, p))| *p == port))
        };
        for _ in 0..3 {
            let () = self.nodes[replica].query(redis::cmd("CLUSTER").arg("FAILOVER"));
            if eventually(Duration::from_secs(8), promoted) {
                return;
            }
        }
        panic!("replica {port} was not promoted");
    }

    /// Tells `first[0]`, then (`gap` later) `first[1]` and every other master,
    /// that `nodes[to]` owns `slot`.
    fn assign(&self, slot: u16, to: usize, first: [usize; 2], gap: Duration) {
        let to_id = self.id(to);
        let order = first
            .into_iter()
            .chain((0..self.masters).filter(|i| !first.contains(i)));
        for (n, i) in order.enumerate() {
            if n == 1 {
                // Widens the window in which the two disagree.
                std::thread::sleep(gap);
            }
            let () = self.nodes[i].query(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id),
            );
        }
    }
}

fn node(extra: &[String]) -> RedisServer {
    let bus = free_port().to_string();
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
        "--cluster-node-timeout",
        "2000",
    ];
    args.extend(extra.iter().map(String::as_str));
    RedisServer::start_with(&args)
}

/// The flags (`master`, `slave`, `myself`, `fail?` …) `n` shows for node `id`.
fn role_seen(n: &RedisServer, id: &str) -> Option<String> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut n.conn())
        .unwrap_or_default();
    nodes.lines().find_map(|l| {
        let mut fields = l.split_whitespace();
        (fields.next()? == id).then(|| fields.nth(1).unwrap_or_default().to_owned())
    })
}

fn bus_port(n: &RedisServer) -> u16 {
    let conf: Vec<String> = n.query(redis::cmd("CONFIG").arg("GET").arg("cluster-port"));
    conf[1].parse().unwrap()
}

fn known_nodes(n: &RedisServer) -> usize {
    info_cluster(n)
        .lines()
        .find_map(|l| l.strip_prefix("cluster_known_nodes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn info(n: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut n.conn())
        .unwrap_or_default()
}

fn info_cluster(n: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut n.conn())
        .unwrap_or_default()
}

fn slots_of(n: &RedisServer) -> Vec<(u16, u16, (String, u16))> {
    let reply: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut n.conn())
        .unwrap_or_default();
    reply
        .iter()
        .filter_map(|e| {
            let start = redis::from_redis_value_ref(e.first()?).ok()?;
            let end = redis::from_redis_value_ref(e.get(1)?).ok()?;
            let master: Vec<redis::Value> = redis::from_redis_value_ref(e.get(2)?).ok()?;
            let host = redis::from_redis_value_ref(master.first()?).ok()?;
            let port = redis::from_redis_value_ref(master.get(1)?).ok()?;
            Some((start, end, (host, port)))
        })
        .collect()
}
