//! What a server says in `INFO`: how far its replicas have acknowledged its
//! writes, and how often it ran each command.

use std::time::Duration;

use super::{RedisServer, eventually};

impl RedisServer {
    /// Whether `replicas` replicas acknowledge, within `timeout`, everything this master
    /// had written when called (its `master_repl_offset`, against each replica's acked
    /// `offset` in `INFO replication`). `WAIT` on a connection of its own cannot tell:
    /// it waits for that connection's own writes, and a fresh one has none.
    pub fn replicated(&self, replicas: usize, timeout: Duration) -> bool {
        let info = || -> String { self.query(redis::cmd("INFO").arg("replication")) };
        let field = |line: &str, name: &str| -> Option<u64> {
            line.split([',', ':'])
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        };
        let written: u64 = info()
            .lines()
            .find_map(|l| l.trim().strip_prefix("master_repl_offset:")?.parse().ok())
            .expect("master_repl_offset in INFO replication");
        eventually(timeout, || {
            info()
                .lines()
                .filter(|l| l.starts_with("slave"))
                .filter(|l| field(l, "offset").is_some_and(|o| o >= written))
                .count()
                >= replicas
        })
    }

    /// `calls` of `cmd` (case-insensitive; subcommands as `"config|resetstat"`) in `INFO
    /// commandstats`, 0 if absent.
    ///
    /// The query opens a connection, so it counts itself: one `info` and (redis-rs's
    /// handshake) two `client|setinfo` per call.
    pub fn command_calls(&self, cmd: &str) -> u64 {
        let wanted = cmd.to_ascii_lowercase();
        self.command_stats()
            .into_iter()
            .find(|(name, _)| *name == wanted)
            .map_or(0, |(_, calls)| calls)
    }

    /// Error replies of `code` (`"TRYAGAIN"`, `"NOPERM"` …) the server sent, from
    /// `INFO errorstats`; 0 if none.
    pub fn error_replies(&self, code: &str) -> u64 {
        let info: String = self.query(redis::cmd("INFO").arg("errorstats"));
        info.lines()
            .find_map(|l| {
                let rest = l.trim().strip_prefix("errorstat_")?.strip_prefix(code)?;
                rest.strip_prefix(":count=")?.parse().ok()
            })
            .unwrap_or(0)
    }

    /// Sum of `calls` over all commands; counts this query's own `info` and
    /// `client|setinfo` as [`RedisServer::command_calls`] does.
    pub fn total_commands(&self) -> u64 {
        self.command_stats().iter().map(|(_, calls)| calls).sum()
    }

    /// Whether the server has `DELIFEQ` and `SET … IFEQ` (Valkey 9.0 and later),
    /// which redlease's token lock then uses instead of scripts.
    pub fn has_conditional_commands(&self) -> bool {
        let info: String = self.query(redis::cmd("INFO").arg("server"));
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let major = field("valkey_version")
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
            .unwrap_or(0);
        field("server_name").as_deref() == Some("valkey") && major >= 9
    }

    /// The token lock's compare-and-deletes the server ran: `EVALSHA` (the release
    /// script) and `DELIFEQ` (Valkey 9's, no script).
    pub fn compare_and_deletes(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("delifeq")
    }

    /// Keys deleted by `DEL` (a release script's) or `DELIFEQ` (Valkey 9's
    /// release, no script).
    pub fn deletes(&self) -> u64 {
        self.command_calls("del") + self.command_calls("delifeq")
    }

    /// `CONFIG RESETSTAT`. The reset happens before its own call is recorded, so
    /// afterwards the stats hold `config|resetstat` once.
    pub fn reset_stats(&self) {
        let _: () = self.query(redis::cmd("CONFIG").arg("RESETSTAT"));
    }

    /// `CONFIG SET name value`.
    pub fn config_set(&self, name: &str, value: impl redis::ToRedisArgs) {
        let () = self.query(redis::cmd("CONFIG").arg("SET").arg(name).arg(value));
    }

    /// Caps this server's memory at 64 MB and evicts under `policy` from then on.
    pub fn evict(&self, policy: &str) {
        self.config_set("maxmemory", "64mb");
        self.config_set("maxmemory-policy", policy);
    }

    /// `(command, calls, usec)` from `INFO commandstats`.
    pub fn command_usec(&self) -> Vec<(String, u64, u64)> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"));
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |f: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(f))?
                        .parse::<u64>()
                        .ok()
                };
                Some((name.to_ascii_lowercase(), field("calls=")?, field("usec=")?))
            })
            .collect()
    }

    /// `(command, calls)` from `INFO commandstats`.
    pub fn command_stats(&self) -> Vec<(String, u64)> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"));
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
                Some((name.to_ascii_lowercase(), calls.parse().ok()?))
            })
            .collect()
    }

    /// [`command_stats`](Self::command_stats) without the tests' own queries
    /// (`info`, `client|…`, `config|…`, `pubsub|…`): what the clients under
    /// test cost the server. Commands a script runs count too.
    pub fn client_command_stats(&self) -> Vec<(String, u64)> {
        self.command_stats()
            .into_iter()
            .filter(|(name, _)| {
                !(name == "info"
                    || ["client|", "config|", "pubsub|"]
                        .iter()
                        .any(|p| name.starts_with(p)))
            })
            .collect()
    }

    /// The sum of [`client_command_stats`](Self::client_command_stats).
    pub fn client_commands(&self) -> u64 {
        self.client_command_stats().iter().map(|(_, n)| n).sum()
    }
}

/// A master and one replica started with `replica_args`, once the master lists
/// the replica online (its first sync done).
pub fn master_and_replica(replica_args: &[&str]) -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
    args.extend_from_slice(replica_args);
    let replica = RedisServer::start_with(&args);
    let online = eventually(Duration::from_secs(10), || {
        let info: String = master.query(redis::cmd("INFO").arg("replication"));
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    assert!(online, "the replica never came online");
    (master, replica)
}
