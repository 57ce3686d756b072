//! A Redis Cluster's slot map as a client sees it: which master serves each slot,
//! learned from `CLUSTER SLOTS` and corrected by the `MOVED` answers the nodes'
//! connections note; and the `redlease-map` thread that asks the cluster again
//! when a node fails.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};
use redis::Value;

use crate::error::{Error, Result};
use crate::metrics::Counters;
use crate::net::connection::{Caps, Manager, Target};
use crate::net::node::{Node, NodeConfig};
use crate::net::slots::{Redirects, SLOTS};
use crate::topology::io::IoThread;
use crate::topology::single::Single;

/// The fewest time between two full reads of the map: failures come in bursts.
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// A slot no known master serves.
const NONE: u16 = u16::MAX;

/// Opens a target for the node at `host:port` (the seed URL's user, password,
/// database and TLS, its connections noting redirections in the sink).
pub(crate) type Opener = Box<dyn Fn(&str, u16, Arc<Redirects>) -> Result<Target> + Send + Sync>;

/// What the topology and the map thread share.
pub(crate) struct Shared {
    map: RwLock<Map>,
    pub(crate) redirects: Arc<Redirects>,
    open: Opener,
    config: NodeConfig,
    counters: Arc<Counters>,
    /// Where the I/O threads of masters found later go: the client's list, so
    /// that a guard outliving its client starts none and keeps none alive.
    threads: Weak<Mutex<Vec<IoThread>>>,
}

/// Masters by slot.
struct Map {
    /// For each slot, its master's index in `masters` (or [`NONE`]).
    owner: Box<[u16]>,
    masters: Vec<Master>,
}

struct Master {
    addr: String,
    single: Arc<Single>,
}

/// One `CLUSTER SLOTS` range: `start..=end` served by the master at `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u16,
    pub(crate) end: u16,
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Shared {
    /// A map of the cluster as `ranges` describe it; the masters' I/O threads go
    /// into `threads`.
    pub(crate) fn new(
        ranges: &[Range],
        open: Opener,
        config: NodeConfig,
        counters: Arc<Counters>,
        threads: &Arc<Mutex<Vec<IoThread>>>,
    ) -> Result<Self> {
        let shared = Self {
            map: RwLock::new(Map {
                owner: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
                masters: Vec::new(),
            }),
            redirects: Arc::new(Redirects::default()),
            open,
            config,
            counters,
            threads: Arc::downgrade(threads),
        };
        shared.apply(ranges)?;
        Ok(shared)
    }

    /// The master serving `slot`, after taking in what connections noted; asks
    /// `nudge` for a full read of the map when a node failed or the slot has no
    /// known master.
    pub(crate) fn master(&self, slot: u16, nudge: &Sender<()>) -> Result<Arc<Single>> {
        if let Some(noted) = self.redirects.take() {
            for (slot, addr) in noted.moved {
                // A master we cannot reach is learned again on the next MOVED.
                if let Ok(i) = self.index_of(&addr) {
                    self.map.write().owner[usize::from(slot % SLOTS)] = i;
                }
            }
            if noted.refresh {
                let _ = nudge.try_send(());
            }
        }
        let map = self.map.read();
        match map.owner[usize::from(slot % SLOTS)] {
            NONE => {
                drop(map);
                let _ = nudge.try_send(());
                Err(unserved(slot))
            }
            i => Ok(Arc::clone(&map.masters[usize::from(i)].single)),
        }
    }

    /// The master at `addr` (`host:port`), opened if it is new.
    pub(crate) fn at(&self, addr: &str) -> Result<Arc<Single>> {
        let i = self.index_of(addr)?;
        Ok(Arc::clone(&self.map.read().masters[usize::from(i)].single))
    }

    /// Every master known now.
    pub(crate) fn masters(&self) -> Vec<Arc<Single>> {
        let map = self.map.read();
        map.masters.iter().map(|m| Arc::clone(&m.single)).collect()
    }

    /// The index of the master at `addr`, opening it (lazily: no network) and
    /// starting its I/O thread if it is new.
    fn index_of(&self, addr: &str) -> Result<u16> {
        if let Some(i) = self.map.read().masters.iter().position(|m| m.addr == addr) {
            return Ok(index(i));
        }
        let mut map = self.map.write();
        if let Some(i) = map.masters.iter().position(|m| m.addr == addr) {
            return Ok(index(i));
        }
        let (host, port) = split(addr).ok_or(Error::config("cluster", "bad node address"))?;
        let target = (self.open)(host, port, Arc::clone(&self.redirects))?;
        let node = Node::open(target, self.config);
        let threads = self.threads.upgrade().ok_or(Error::Shutdown)?;
        let (single, io) = Single::new(node, Arc::clone(&self.counters))?;
        threads.lock().push(io);
        map.masters.push(Master {
            addr: addr.to_owned(),
            single: Arc::new(single),
        });
        Ok(index(map.masters.len() - 1))
    }

    /// Takes in a full `CLUSTER SLOTS` answer: slots it does not name keep
    /// their master (a node answering mid-failover may not know every range).
    fn apply(&self, ranges: &[Range]) -> Result<()> {
        let mut owners = Vec::with_capacity(ranges.len());
        for r in ranges {
            owners.push(self.index_of(&format!("{}:{}", r.host, r.port))?);
        }
        let mut map = self.map.write();
        for (r, i) in ranges.iter().zip(owners) {
            for s in r.start..=r.end.min(SLOTS - 1) {
                map.owner[usize::from(s)] = i;
            }
        }
        Ok(())
    }

    /// Asks each known master in turn for the map until one answers, and takes it in.
    fn refresh(&self) {
        for single in self.masters() {
            let node = single.node();
            match node.get().and_then(|mut c| {
                let host = node.address().info().and_then(host_of);
                Ok(c.run(|c| read_slots(c, host.as_deref()))?)
            }) {
                Ok(ranges) if !ranges.is_empty() => {
                    if let Err(e) = self.apply(&ranges) {
                        log::warn!("cluster map not taken in: {e}");
                    }
                    return;
                }
                Ok(_) => {}
                Err(e) => log::debug!("cluster map from {:?}: {e}", node.address()),
            }
        }
        log::warn!("no cluster node answered CLUSTER SLOTS");
    }
}

/// Starts the `redlease-map` thread: it reads the map again when nudged, at most
/// once per [`REFRESH_GAP`], until the client drops its handle.
pub(crate) fn spawn(shared: Arc<Shared>) -> Result<(Sender<()>, IoThread)> {
    let (nudge, nudged) = crossbeam_channel::bounded(1);
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let handle = thread::Builder::new()
        .name("redlease-map".into())
        .spawn(move || run(&shared, &nudged, &stopped))
        .map_err(Error::Spawn)?;
    let io = IoThread::new(handle, move || {
        let _ = stop.try_send(());
    });
    Ok((nudge, io))
}

fn run(shared: &Shared, nudged: &Receiver<()>, stopped: &Receiver<()>) {
    let mut last: Option<Instant> = None;
    loop {
        crossbeam_channel::select! {
            recv(nudged) -> m => if m.is_err() { return },
            recv(stopped) -> _ => return,
        }
        if let Some(at) = last {
            let wait = REFRESH_GAP.saturating_sub(at.elapsed());
            if stopped.recv_timeout(wait).is_ok() {
                return;
            }
        }
        shared.refresh();
        last = Some(Instant::now());
    }
}

/// `CLUSTER SLOTS` on `con`; a master named by an empty host is on `host`, the
/// asked node's.
pub(crate) fn read_slots(
    con: &mut redis::Connection,
    host: Option<&str>,
) -> redis::RedisResult<Vec<Range>> {
    let reply: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
    Ok(reply
        .iter()
        .filter_map(|entry| parse_range(entry, host))
        .collect())
}

fn parse_range(entry: &[Value], fallback: Option<&str>) -> Option<Range> {
    let int = |v: &Value| redis::from_redis_value_ref::<i64>(v).ok();
    let start = u16::try_from(int(entry.first()?)?).ok()?;
    let end = u16::try_from(int(entry.get(1)?)?).ok()?;
    let Value::Array(master) = entry.get(2)? else {
        return None;
    };
    let mut host: String = redis::from_redis_value_ref(master.first()?).ok()?;
    if host.is_empty() || host == "?" {
        fallback?.clone_into(&mut host);
    }
    let port = u16::try_from(int(master.get(1)?)?).ok()?;
    Some(Range {
        start,
        end,
        host,
        port,
    })
}

fn host_of(info: &redis::ConnectionInfo) -> Option<String> {
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
            Some(host.clone())
        }
        _ => None,
    }
}

/// `host:port` split at its last colon (IPv6 hosts keep theirs).
fn split(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

fn index(i: usize) -> u16 {
    u16::try_from(i).unwrap_or(NONE)
}

/// The error of a call whose slot no known master serves.
fn unserved(slot: u16) -> Error {
    let e = std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("no known master serves cluster slot {slot}"),
    );
    Error::from(redis::RedisError::from(e))
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.map.read();
        let addrs: Vec<&str> = map.masters.iter().map(|m| m.addr.as_str()).collect();
        f.debug_struct("Cluster")
            .field("masters", &addrs)
            .finish_non_exhaustive()
    }
}

/// The slot map from the first seed that answers `CLUSTER SLOTS`.
pub(super) fn first_map(
    seeds: &[(String, u16)],
    open: &Opener,
    config: NodeConfig,
) -> Result<Vec<Range>> {
    let mut failure = None;
    for (host, port) in seeds {
        // One connection, no pool: the seed may not even be a master.
        let seed = Manager {
            target: open(host, *port, Arc::new(Redirects::default()))?,
            connect_timeout: config.connect_timeout,
            read_timeout: config.read_timeout,
            write_timeout: config.write_timeout,
            caps: Caps::new(config.scripts_only),
        };
        let answer = seed
            .connect_raw()
            .and_then(|mut con| read_slots(&mut con, Some(host)));
        match answer {
            Ok(ranges) if !ranges.is_empty() => return Ok(ranges),
            Ok(_) => {
                failure.get_or_insert(Error::config(
                    "cluster",
                    "the cluster has no slots assigned",
                ));
            }
            Err(e) if e.code() == Some("ERR") => {
                failure.get_or_insert(Error::config(
                    "cluster",
                    "a seed is not a cluster node (cluster-enabled no)",
                ));
            }
            Err(e) => {
                failure.get_or_insert(e.into());
            }
        }
    }
    Err(failure.unwrap_or(Error::config("cluster", "no seed node given")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_from_cluster_slots() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = vec![
            Value::Int(0),
            Value::Int(5460),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id")]),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id2")]),
        ];
        let r = parse_range(&entry, None).unwrap();
        assert_eq!(
            (r.start, r.end, r.host.as_str(), r.port),
            (0, 5460, "127.0.0.1", 7000)
        );
        let unnamed = vec![
            Value::Int(1),
            Value::Int(2),
            Value::Array(vec![bulk(""), Value::Int(7001)]),
        ];
        assert_eq!(
            parse_range(&unnamed, Some("10.0.0.9")).unwrap().host,
            "10.0.0.9"
        );
        assert!(parse_range(&unnamed, None).is_none());
        assert_eq!(split("[::1]:7000"), Some(("[::1]", 7000)));
        assert_eq!(split("nohost"), None);
    }
}
