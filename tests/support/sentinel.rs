//! A Sentinel deployment for the tests: one master, one replica (`--replicaof`) and
//! three `redis-server <conf> --sentinel` processes with a generated config, all on
//! free loopback ports, killed on `Drop`. The replica may replicate through a
//! [`Proxy`], so a test can hold back what reaches it.

use std::fs::{self, File};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::proxy::Proxy;
use super::{RedisServer, TempDir, binary, connect, eventually, free_port};

pub const MASTER_NAME: &str = "mymaster";

/// One sentinel process.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    _dir: TempDir,
}

/// Sentinels' `failover-timeout` in ms.
const FAILOVER_TIMEOUT: u64 = 10_000;

/// Master, replica and three sentinels watching them as [`MASTER_NAME`].
pub struct Deployment {
    pub servers: [RedisServer; 2],
    pub sentinels: Vec<Sentinel>,
    /// The proxy the replica replicates through, if [`Deployment::start_through_proxy`].
    pub link: Option<Proxy>,
}

impl Deployment {
    /// Starts everything and waits (bounded) until the replica is in sync and every
    /// sentinel knows it.
    pub fn start() -> Deployment {
        Deployment::launch(false, FAILOVER_TIMEOUT)
    }

    /// [`Deployment::start`] with the replica replicating through [`Deployment::link`]
    /// (its `blackhole` holds back every write from the replica). Sentinels repoint a
    /// replica that names another address than the master's after their
    /// `failover-timeout`: it is 120 s here, longer than a test, so the proxy stays.
    pub fn start_through_proxy() -> Deployment {
        Deployment::launch(true, 120_000)
    }

    fn launch(proxied: bool, failover_timeout: u64) -> Deployment {
        let master = RedisServer::start();
        let link = proxied.then(|| Proxy::start(master.port()));
        let port = link.as_ref().map_or(master.port(), Proxy::port).to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let synced = eventually(Duration::from_secs(10), || {
            let info: Option<String> = try_query(&replica, redis::cmd("INFO").arg("replication"));
            info.is_some_and(|i| i.contains("master_link_status:up"))
        });
        assert!(synced, "replica did not sync");
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| Sentinel::start(master.port(), failover_timeout))
            .collect();
        for s in &sentinels {
            let knows = eventually(Duration::from_secs(20), || {
                let replicas: Vec<Vec<String>> = s
                    .try_query(redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME))
                    .unwrap_or_default();
                replicas.iter().any(|r| {
                    r.windows(2)
                        .any(|kv| kv[0] == "master-link-status" && kv[1] == "ok")
                })
            });
            assert!(knows, "sentinel {} does not see the replica", s.port);
        }
        Deployment {
            servers: [master, replica],
            sentinels,
            link,
        }
    }

    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The port the sentinels name as master.
    pub fn master_port(&self) -> Option<u16> {
        let addr: Option<(String, u16)> = self.sentinels[0].try_query(
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER_NAME),
        )?;
        addr.map(|(_, port)| port)
    }

    /// The server on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers.iter().find(|s| s.port() == port).unwrap()
    }

    /// `SENTINEL FAILOVER`, retried while the sentinel is not ready for it, then
    /// waits until the other server is master, the old one its replica, and all
    /// sentinels say so; returns the new master.
    pub fn failover(&self) -> &RedisServer {
        let old = self.master_port().unwrap();
        let new = self.servers.iter().find(|s| s.port() != old).unwrap();
        let sent = eventually(Duration::from_secs(20), || {
            self.sentinels[0]
                .try_query::<()>(redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME))
                .is_some()
        });
        assert!(sent, "SENTINEL FAILOVER was refused");
        let done = eventually(Duration::from_secs(30), || {
            // Done when the old master is a replica of the new one too (Sentinel closed
            // its clients then) and every sentinel names the new one.
            role(new) == "master"
                && role(self.server(old)) == "slave"
                && self.sentinels.iter().all(|s| s.master_port_is(new.port()))
        });
        assert!(done, "failover did not complete");
        new
    }
}

impl Sentinel {
    fn start(master_port: u16, failover_timeout: u64) -> Sentinel {
        for _ in 0..10 {
            let port = free_port();
            let dir = TempDir::new(port);
            let conf = dir.0.join("sentinel.conf");
            let log = dir.0.join("sentinel.log");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 2000\n\
                 sentinel failover-timeout {MASTER_NAME} {failover_timeout}\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir.0.display(),
                log.display()
            );
            fs::write(&conf, text).unwrap();
            let out = File::create(dir.0.join("stdio.log")).unwrap();
            let child = Command::new(binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap();
            let mut s = Sentinel {
                port,
                child,
                _dir: dir,
            };
            let up = eventually(Duration::from_secs(5), || {
                matches!(s.child.try_wait(), Ok(None))
                    && s.try_query::<String>(&redis::cmd("PING")).is_some()
            });
            if up {
                return s;
            }
            let logs = fs::read_to_string(&log).unwrap_or_default();
            let taken = logs.contains("Address already in use");
            assert!(taken, "sentinel on port {port} did not start\n{logs}");
        }
        panic!("no free port for a sentinel");
    }

    pub fn try_query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let mut con = connect(&url, Duration::from_secs(2)).ok()?;
        cmd.query(&mut con).ok()
    }

    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        self.try_query(cmd).unwrap()
    }

    pub fn master_port_is(&self, port: u16) -> bool {
        let addr: Option<Option<(String, u16)>> = self.try_query(
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER_NAME),
        );
        matches!(addr, Some(Some((_, p))) if p == port)
    }
}

/// `server`'s `ROLE` (`master`, `slave`), empty when the query fails (Sentinel closes
/// the clients of a server it reconfigures).
pub fn role(server: &RedisServer) -> String {
    let role: Vec<redis::Value> = try_query(server, &redis::cmd("ROLE")).unwrap_or_default();
    match role.first() {
        Some(redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
        _ => String::new(),
    }
}

/// `cmd` on a new connection to `server`; `None` when it fails (Sentinel closes the
/// client connections of the servers it reconfigures).
pub fn try_query<T: redis::FromRedisValue>(server: &RedisServer, cmd: &redis::Cmd) -> Option<T> {
    cmd.query(&mut server.try_conn().ok()?).ok()
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
