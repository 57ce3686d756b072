//! A chaos soak: worker processes take locks and write under them to a fenced
//! resource while a seeded nemesis injects one fault after another; a checker then
//! reads the history for overlaps, stale writes, lost updates and stalls.
//!
//! ```text
//! cargo run --release --example soak -- --seconds 60 --seed 7 [--client bronze]
//! ```
//!
//! The soak starts its own `redis-server` (append-only file fsynced on every write, so
//! a restart loses nothing) on a free loopback port, a TCP proxy in front of it that
//! the workers use, and a fenced resource: a thread of this process on a loopback port
//! that accepts a write for a name only with a fence above the last one it saw for it
//! (`CLAIM`), and a counter write only with the fence of the latest claim (`SET`).
//! Each worker is a copy of this program (`--worker`), so a `SIGSTOP` freezes its
//! renewal thread too. A worker loops over turns, each a section: one name locked
//! (fenced, but for the Redlock name; one name with the reentrant scheme, taken
//! twice), two names at once with `lock_all_with` (fenced; `a`+`b` on the single
//! master in one script, `c`+`d` on two Cluster slots one at a time), or an election
//! (`wait_free` as a hint, then `try_campaign_for`; the leader writes a few times
//! under its term as the fence, then resigns). In a section it claims each name
//! with its fence, reads each counter, pauses, writes each plus one, and releases.
//! Beside its turns each worker is a member of a partition group of 8 partitions on
//! the proxied master (`support/soak_partitions.rs`), writing to the resource under
//! each partition it holds, with its fence. When the soak says stop right after a
//! section it keeps what it holds and calls
//! `shutdown` on each of its clients, reporting each `ShutdownReport`; the kept
//! guards' `unlock` must then answer `Error::Shutdown`.
//!
//! The nemesis, seeded by `--seed`, injects one fault at a time and heals it after
//! 0.5–3 s: `kill -9` of a worker (restarted at the heal), `SIGSTOP` of a worker past
//! its lease, `SIGSTOP` of the server, `DEBUG SLEEP`, `CLIENT PAUSE WRITE`, a proxy
//! blackhole, latency and connection reset, a restart of the server.
//!
//! Checks: no two workers inside a name at once unless one of them reported its lease
//! lost (or was killed; for two names, the set's `is_held()` at its exit); no write
//! accepted from a worker that is not the latest to claim the name (a deposed
//! leader's term is refused too; on the Redlock name, which has no fence, such
//! writes and the updates they lose are counted apart); the counter of each name
//! equals the number of accepted increments; no fence (or term) handed out twice;
//! after every heal a section completes within a lease + 1.5 s; no `wait_free`
//! returns more than 2 s past its timeout (unless its worker was frozen); every
//! worker's clients report a shutdown, none more than 2 s past its deadline,
//! counting no more leases than the worker held and leaving no guard held; no lock
//! key left at the end; the same overlaps, stale writes and lost updates on the
//! partitions, and after every heal each partition owned again within a lease and
//! two rounds (as the group's status reads). The last line on stdout is one JSON
//! object; the exit status is 0 when every check holds, 1 otherwise.
//!
//! `--client bronze` runs workers of one name at a time over the same names with an
//! unsafe lock (`SET NX PX`, plain `DEL`, no fence, no renewal, no shutdown): the soak
//! must fail then, or its checker proves nothing.

// The tests' servers, Sentinel deployment, Cluster and proxy (it allows the dead code
// of the parts the soak does not use).
#[path = "../tests/support/mod.rs"]
mod support;
// The partition group every worker is a member of.
#[path = "support/soak_partitions.rs"]
mod soak_partitions;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::{LockClient, LockOptions, Scheme};

use support::Masters;
use support::cluster::Cluster;
use support::proxy::Proxy;
use support::sentinel::{Deployment, MASTER_NAME, role};

/// Lease of every lock the workers take.
const TTL: Duration = Duration::from_millis(1500);
/// How long after a heal some section must have completed.
const LIVENESS: Duration = Duration::from_secs(3);
const WORKERS: usize = 6;
/// Names the workers lock one at a time: `a`, `b` and `r` (with
/// [`Scheme::Reentrant`]) on the single master behind the proxy; `s` on the master
/// of the Sentinel deployment; `c` and `d` on the Cluster (slots 1342 and 13785, on
/// two masters at the start); `l` by Redlock over three masters.
const NAMES: [&str; 7] = ["a", "b", "r", "s", "c", "d", "l"];
const REENTRANT: &str = "r";
const SENTINEL_NAME: &str = "s";
/// The Cluster name whose slot the nemesis migrates and whose master it fails over.
const CLUSTER_NAME: &str = "c";
const REDLOCK_NAME: &str = "l";
/// Names taken together by `lock_all_with`: two on the single master (one script),
/// two on the Cluster on different slots (one at a time, in key order).
const MULTI_SINGLE: [&str; 2] = ["a", "b"];
const MULTI_CLUSTER: [&str; 2] = ["c", "d"];
/// Election names: `L` on the single master behind the proxy, `E` on the Cluster
/// (slot 410, on the master of `c` at the start).
const LEADER_SINGLE: &str = "L";
const LEADER_CLUSTER: &str = "E";
/// Every name on the Cluster: a `CLUSTER FAILOVER` excuses overlaps on any of them.
const CLUSTER_NAMES: [&str; 3] = ["c", "d", "E"];
/// Longest `wait_free` a worker asks for before it campaigns.
const MAX_WAIT_FREE_MS: u64 = 700;
/// How long a worker gives `shutdown` for all its clients.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);
/// How far past its timeout (`wait_free`) or deadline (`shutdown`) a call may
/// return on a loaded machine before it fails the soak.
const OVERRUN_MARGIN: Duration = Duration::from_secs(2);
const PREFIX: &str = "soak:";
/// Longest pause between reading the counter and writing it back.
const MAX_RMW_PAUSE_MS: u64 = 80;
/// Share of sections (percent) whose pause outlasts the lease.
const LONG_PAUSE_PERCENT: u8 = 3;
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let bronze = flag("--client").as_deref() == Some("bronze");
    if let Some(id) = flag("--worker") {
        let redis = flag("--redis").expect("--redis");
        let resource = flag("--resource").expect("--resource");
        let list = |name: &str| -> Vec<String> {
            flag(name)
                .unwrap_or_default()
                .split(',')
                .map(str::to_owned)
                .collect()
        };
        let sentinels = list("--sentinels");
        let cluster = list("--cluster");
        let quorum = list("--redlock");
        let seed: u64 = flag("--seed").and_then(|s| s.parse().ok()).unwrap_or(0);
        let id: u64 = id.parse().expect("--worker <id>");
        let result = if bronze {
            let urls = Urls {
                redis,
                sentinels,
                cluster,
                quorum,
            };
            bronze_worker(id, &urls, &resource, seed)
        } else {
            let urls = Urls {
                redis,
                sentinels,
                cluster,
                quorum,
            };
            worker(id, &urls, &resource, seed)
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker {id}: {e}");
                ExitCode::from(2)
            }
        };
    }
    let seconds: u64 = flag("--seconds").and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = flag("--seed")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..1_000_000));
    // `--faults a,b`: only these kinds (default: all).
    let kinds: Vec<&'static str> = match flag("--faults") {
        Some(list) => {
            let wanted: Vec<&str> = list.split(',').collect();
            let kinds: Vec<&'static str> = KINDS
                .iter()
                .copied()
                .filter(|k| wanted.contains(k))
                .collect();
            if kinds.is_empty() {
                eprintln!("soak: --faults names none of {KINDS:?}");
                return ExitCode::from(2);
            }
            kinds
        }
        None => KINDS.to_vec(),
    };
    match run(seconds, seed, bronze, &kinds) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e} (seed {seed})");
            ExitCode::from(2)
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

// ---------------------------------------------------------------- workers

/// A line-protocol connection to the fenced resource.
struct Resource {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Resource {
    fn connect(addr: &str) -> Res<Self> {
        let writer = TcpStream::connect(addr)?;
        writer.set_nodelay(true)?;
        Ok(Resource {
            reader: BufReader::new(writer.try_clone()?),
            writer,
        })
    }

    fn ask(&mut self, line: &str) -> Res<String> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            return Err("the resource closed the connection".into());
        }
        Ok(reply.trim_end().to_owned())
    }
}

/// One section's writes under the locks of `names`, each with its fence (0:
/// unfenced): claim every name, then `rounds` read-modify-writes of every name's
/// counter with a pause between the reads and the writes. True when every write
/// was accepted.
fn section(
    res: &mut Resource,
    rng: &mut fastrand::Rng,
    names: &[(&str, u64)],
    rounds: u64,
) -> Res<bool> {
    for (name, fence) in names {
        if res.ask(&format!("CLAIM {name} {fence}"))? != "OK" {
            return Ok(false);
        }
    }
    for _ in 0..rounds {
        let mut values = Vec::with_capacity(names.len());
        for (name, _) in names {
            values.push(res.ask(&format!("READ {name}"))?.parse::<u64>()?);
        }
        // Now and then longer than a lease: a lock that is not renewed runs out.
        let pause = if rng.u8(..100) < LONG_PAUSE_PERCENT {
            rng.u64(millis(TTL)..=millis(TTL) + 1000)
        } else {
            rng.u64(0..=MAX_RMW_PAUSE_MS)
        };
        thread::sleep(Duration::from_millis(pause));
        for ((name, fence), value) in names.iter().zip(values) {
            if res.ask(&format!("SET {name} {fence} {}", value + 1))? != "OK" {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Builds a client, retrying for a while: `build` checks the server.
/// Whether worker `id` releases single-name locks in the background (its
/// clients' `release_in_background`): the odd ones.
fn background(id: u64) -> bool {
    id % 2 == 1
}

fn build_client(id: u64, builder: impl Fn() -> redlease::LockClientBuilder) -> Res<LockClient> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match builder()
            .key_prefix(PREFIX)
            .ttl(TTL)
            .connect_timeout(Duration::from_millis(300))
            .read_timeout(Duration::from_millis(300))
            .write_timeout(Duration::from_millis(300))
            // Half the workers drop their guards with the release queued for the
            // node's I/O thread (one single-name lock's guard at a time).
            .release_in_background(background(id))
            .build()
        {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() < deadline => {
                eprintln!("worker {id}: build: {e}");
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Where a worker's locks live.
struct Urls {
    /// The proxied master.
    redis: String,
    sentinels: Vec<String>,
    /// Cluster seeds.
    cluster: Vec<String>,
    /// The Redlock masters.
    quorum: Vec<String>,
}

/// What a worker holds between its section's exit and the release: kept, instead of
/// released, when the soak says stop right then, for the clients' `shutdown`.
enum Held {
    One(redlease::LockGuard),
    Multi(redlease::MultiGuard),
    Leader(redlease::Leadership),
}

impl Held {
    fn is_held(&self) -> bool {
        match self {
            Held::One(g) => g.is_held(),
            Held::Multi(g) => g.is_held(),
            Held::Leader(g) => g.is_held(),
        }
    }

    /// How many leases: one per name.
    fn leases(&self) -> usize {
        match self {
            Held::Multi(g) => g.len(),
            Held::One(_) | Held::Leader(_) => 1,
        }
    }

    /// Releases every name: for each (in order) whether its release found the lease
    /// still ours, or the error.
    fn release(self, background: bool) -> Vec<Result<bool, redlease::Error>> {
        match self {
            // Dropped: the release is queued and the worker goes on; what it
            // found is not told (a lost lease was reported by `is_held` above).
            Held::One(g) if background => {
                drop(g);
                vec![Ok(true)]
            }
            Held::One(g) => vec![g.unlock().map(redlease::Release::was_held)],
            Held::Multi(g) => g
                .unlock()
                .into_iter()
                .map(|r| r.map(redlease::Release::was_held))
                .collect(),
            Held::Leader(g) => vec![g.resign().map(redlease::Release::was_held)],
        }
    }
}

/// What the worker does in one turn.
enum Turn {
    /// One name, with its client.
    One(&'static str),
    /// Two names with `lock_all_with`, on the single master or the Cluster.
    Multi(&'static [&'static str; 2]),
    /// An election: `wait_free` as a hint, then `try_campaign_for`.
    Leader(&'static str),
}

fn pick_turn(rng: &mut fastrand::Rng) -> Turn {
    // One name as often as each other turn's kind, per name.
    let i = rng.usize(..NAMES.len() + 4);
    match i.checked_sub(NAMES.len()) {
        None => Turn::One(NAMES[i]),
        Some(0) => Turn::Multi(&MULTI_SINGLE),
        Some(1) => Turn::Multi(&MULTI_CLUSTER),
        Some(2) => Turn::Leader(LEADER_SINGLE),
        _ => Turn::Leader(LEADER_CLUSTER),
    }
}

/// The clients of a worker, one per deployment, in the order of [`CLIENTS`].
struct Clients {
    all: [LockClient; 4],
}

/// The clients' labels in the history (`SHUTDOWN <label> ...`).
const CLIENTS: [&str; 4] = ["single", "sentinel", "cluster", "redlock"];

impl Clients {
    /// Index of the client that holds `name`.
    fn of(name: &str) -> usize {
        match name {
            SENTINEL_NAME => 1,
            n if CLUSTER_NAMES.contains(&n) => 2,
            REDLOCK_NAME => 3,
            _ => 0,
        }
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one turn of each kind reads best together"
)]
fn worker(id: u64, urls: &Urls, resource: &str, seed: u64) -> Res<()> {
    let Urls {
        redis,
        sentinels,
        cluster,
        quorum,
    } = urls;
    let mut rng = fastrand::Rng::with_seed(seed ^ (id << 32) ^ u64::from(std::process::id()));
    let mut res = Resource::connect(resource)?;
    let clients = Clients {
        all: [
            build_client(id, || LockClient::builder(redis.as_str()))?,
            build_client(id, || {
                LockClient::sentinel(sentinels.iter().map(String::as_str), MASTER_NAME)
            })?,
            build_client(id, || {
                LockClient::cluster(cluster.iter().map(String::as_str))
            })?,
            build_client(id, || {
                LockClient::redlock(quorum.iter().map(String::as_str))
            })?,
        ],
    };
    // A member of the partition group, on a thread of its own.
    let stop_partitions = Arc::new(AtomicBool::new(false));
    let partitions =
        soak_partitions::spawn(&clients.all[0], id, resource, Arc::clone(&stop_partitions))?;
    let single_election = clients.all[0].election(LEADER_SINGLE)?;
    let cluster_election = clients.all[2].election(LEADER_CLUSTER)?;
    let fenced = LockOptions::new()
        .fencing(true)
        .wait(Duration::from_secs(3));
    // What the worker holds when the soak tells it to stop, with its client.
    let mut kept: Option<(usize, Held)> = None;
    while res.ask("GO")? == "GO" {
        let turn = pick_turn(&mut rng);
        // The names of the section, each with its fence, and what holds them.
        let (names, held, client, nested, rounds): (Vec<(&str, u64)>, Held, usize, _, u64) =
            match turn {
                Turn::One(name) => {
                    let client = Clients::of(name);
                    let opts = match name {
                        REENTRANT => fenced.clone().scheme(Scheme::Reentrant),
                        // A quorum has no single counter to take fences from.
                        REDLOCK_NAME => LockOptions::new().wait(Duration::from_secs(3)),
                        _ => fenced.clone(),
                    };
                    let guard = match clients.all[client].lock_with(name, &opts) {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(e) => {
                            error(&mut res, "lock", &e)?;
                            continue;
                        }
                    };
                    let fence = if name == REDLOCK_NAME {
                        Some(0)
                    } else {
                        guard.fence()
                    };
                    let Some(fence) = fence else {
                        // A fenced acquire that came back without a fence.
                        let found = raw_state(redis, name);
                        res.ask(&format!("NOFENCE {name} {found}"))?;
                        drop(guard);
                        continue;
                    };
                    // The reentrant name is taken again by the same thread: a
                    // nested hold.
                    let nested = if name == REENTRANT {
                        clients.all[client]
                            .try_lock_for(name, Duration::ZERO)
                            .ok()
                            .flatten()
                    } else {
                        None
                    };
                    (vec![(name, fence)], Held::One(guard), client, nested, 1)
                }
                Turn::Multi(pair) => {
                    let client = Clients::of(pair[0]);
                    let set = match clients.all[client].lock_all_with(pair, &fenced) {
                        Ok(Some(set)) => set,
                        Ok(None) => continue,
                        Err(e) => {
                            error(&mut res, "lock_all", &e)?;
                            continue;
                        }
                    };
                    let Some(per_name) = set.fences() else {
                        res.ask(&format!("NOFENCE {}+{} multi", pair[0], pair[1]))?;
                        drop(set);
                        continue;
                    };
                    let names = pair.iter().copied().zip(per_name).collect();
                    (names, Held::Multi(set), client, None, 1)
                }
                Turn::Leader(name) => {
                    let client = Clients::of(name);
                    let election = if client == 0 {
                        &single_election
                    } else {
                        &cluster_election
                    };
                    // A hint: campaign when the leader has just gone, or anyway.
                    let timeout = Duration::from_millis(rng.u64(0..=MAX_WAIT_FREE_MS));
                    let started = Instant::now();
                    let free = clients.all[client].wait_free(name, timeout);
                    let took = started.elapsed();
                    res.ask(&format!(
                        "WAITFREE {name} {id} {} {} {}",
                        millis(timeout),
                        millis(took),
                        match &free {
                            Ok(true) => "free",
                            Ok(false) => "held",
                            Err(_) => "error",
                        }
                    ))?;
                    if let Err(e) = &free {
                        error(&mut res, "wait_free", e)?;
                    }
                    let wait = Duration::from_millis(rng.u64(0..=1000));
                    let leadership = match election.try_campaign_for(wait) {
                        Ok(Some(l)) => l,
                        Ok(None) => continue,
                        Err(e) => {
                            error(&mut res, "campaign", &e)?;
                            continue;
                        }
                    };
                    let term = leadership.term();
                    // A leader writes a few times under its term.
                    let rounds = rng.u64(1..=3);
                    (
                        vec![(name, term)],
                        Held::Leader(leadership),
                        client,
                        None,
                        rounds,
                    )
                }
            };
        let kind = match held {
            Held::One(_) => "one",
            Held::Multi(_) => "multi",
            Held::Leader(_) => "leader",
        };
        for (name, fence) in &names {
            res.ask(&format!("ENTER {name} {fence} {kind} {}", CLIENTS[client]))?;
        }
        let wrote = section(&mut res, &mut rng, &names, rounds)?;
        if let Some(nested) = nested {
            let _ = nested.unlock();
        }
        let is_held = held.is_held();
        for (name, _) in &names {
            res.ask(&format!(
                "EXIT {name} {} {}",
                u8::from(is_held),
                u8::from(wrote)
            ))?;
        }
        // Told to stop while holding: the shutdown below gives it back.
        if res.ask("GO")? != "GO" {
            kept = Some((client, held));
            break;
        }
        for ((name, _), released) in names.iter().zip(held.release(background(id))) {
            match released {
                // The key was gone or someone else's at the release: the lease had
                // been lost during the section without the client knowing yet.
                Ok(false) => {
                    res.ask(&format!("LATE {name}"))?;
                }
                Ok(true) => {}
                Err(e) => error(&mut res, "unlock", &e)?,
            }
        }
    }
    // The member reports its exits and leaves before the clients shut down.
    stop_partitions.store(true, Ordering::Release);
    match partitions.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("partitions: {e}").into()),
        Err(_) => return Err("the partition thread panicked".into()),
    }
    // The end of the worker's life: every client gives back what it holds, within
    // one deadline.
    let deadline = Instant::now() + SHUTDOWN_WAIT;
    for (i, client) in clients.all.iter().enumerate() {
        let started = Instant::now();
        let report = client.shutdown(deadline);
        let took = started.elapsed();
        let overrun = Instant::now().saturating_duration_since(deadline);
        let (leases, still_held) = match &kept {
            Some((c, held)) if *c == i => (held.leases(), held.is_held()),
            _ => (0, false),
        };
        res.ask(&format!(
            "SHUTDOWN {} {id} {leases} {} {} {} {} {} {}",
            CLIENTS[i],
            report.released,
            report.already_gone,
            report.failed,
            millis(took),
            millis(overrun),
            u8::from(still_held),
        ))?;
    }
    // A guard whose lease the shutdown ended sends nothing: its unlock says so.
    if let Some((_, held)) = kept {
        let answers = held.release(false);
        let wrong = answers
            .iter()
            .filter(|r| !matches!(r, Err(redlease::Error::Shutdown)))
            .count();
        res.ask(&format!("AFTER_SHUTDOWN {} {wrong}", answers.len()))?;
    }
    Ok(())
}

/// Reports an error of the library (counted, not fatal) and backs off a moment.
fn error(res: &mut Resource, what: &str, e: &redlease::Error) -> Res<()> {
    res.ask(&format!("ERROR {what} {}", one_line(&e.to_string())))?;
    thread::sleep(Duration::from_millis(20));
    Ok(())
}

/// The same loop with an unsafe lock: `SET NX PX`, no fence, no renewal, plain `DEL`.
fn bronze_worker(id: u64, urls: &Urls, resource: &str, seed: u64) -> Res<()> {
    let Urls {
        redis,
        sentinels,
        cluster,
        quorum,
    } = urls;
    let mut rng = fastrand::Rng::with_seed(seed ^ (id << 32) ^ u64::from(std::process::id()));
    let mut res = Resource::connect(resource)?;
    // One connection per deployment: the proxied master, the Sentinel master, the
    // Cluster master last named by a MOVED for each Cluster name.
    // Redlock's name on its first master only: bronze knows no quorum.
    let mut cons: [Option<redis::Connection>; 5] = [None, None, None, None, None];
    // Per Cluster name (`c`, `d`): the node last named by a MOVED.
    let mut cluster_nodes: [String; 2] =
        std::array::from_fn(|_| cluster.first().cloned().unwrap_or_default());
    while res.ask("GO")? == "GO" {
        let name = NAMES[rng.usize(..NAMES.len())];
        let (con, url) = match name {
            SENTINEL_NAME => (&mut cons[1], sentinel_master(sentinels).unwrap_or_default()),
            CLUSTER_NAME => (&mut cons[2], cluster_nodes[0].clone()),
            n if CLUSTER_NAMES.contains(&n) => (&mut cons[4], cluster_nodes[1].clone()),
            REDLOCK_NAME => (&mut cons[3], quorum[0].clone()),
            _ => (&mut cons[0], redis.to_owned()),
        };
        let key = format!("{PREFIX}{name}");
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut got = false;
        while !got && Instant::now() < deadline {
            if con.is_none() {
                let Ok(c) = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(300)))
                else {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                };
                c.set_read_timeout(Some(Duration::from_millis(300)))?;
                *con = Some(c);
            }
            let Some(c) = con.as_mut() else { continue };
            let reply: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(&key)
                .arg(id)
                .arg("NX")
                .arg("PX")
                .arg(millis(TTL))
                .query(c);
            match reply {
                Ok(Some(_)) => got = true,
                Ok(None) => thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    // `MOVED <slot> <host:port>`: the node, then the slot.
                    if let Some((addr, _slot)) = e.redirect_node() {
                        cluster_nodes[usize::from(name != CLUSTER_NAME)] =
                            format!("redis://{addr}/");
                    } else if CLUSTER_NAMES.contains(&name) {
                        cluster_nodes[usize::from(name != CLUSTER_NAME)]
                            .clone_from(&cluster[rng.usize(..cluster.len())]);
                    }
                    *con = None;
                    break;
                }
            }
        }
        if !got {
            continue;
        }
        res.ask(&format!("ENTER {name} 0"))?;
        let wrote = section(&mut res, &mut rng, &[(name, 0)], 1)?;
        res.ask(&format!("EXIT {name} 1 {}", u8::from(wrote)))?;
        if let Some(c) = con.as_mut() {
            let r: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query(c);
            if r.is_err() {
                *con = None;
            }
        }
    }
    Ok(())
}

/// `redis://` URL of the master the sentinels name, from the first that answers.
fn sentinel_master(sentinels: &[String]) -> Option<String> {
    sentinels.iter().find_map(|url| {
        let mut con = redis::Client::open(url.as_str())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(300))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_millis(300)))
            .ok()?;
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut con)
            .ok()?;
        Some(format!("redis://{host}:{port}/"))
    })
}

/// What Redis holds under the lock `name` (for the history): its fields and PTTL.
fn raw_state(redis: &str, name: &str) -> String {
    let read = || -> Res<String> {
        let con = redis::Client::open(redis)?;
        let mut con = con.get_connection_with_timeout(Duration::from_millis(300))?;
        con.set_read_timeout(Some(Duration::from_millis(300)))?;
        let key = format!("{PREFIX}{name}");
        let fields: Vec<String> = redis::cmd("HGETALL").arg(&key).query(&mut con)?;
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con)?;
        Ok(format!("fields={} pttl={pttl}", fields.join(",")))
    };
    read().unwrap_or_else(|e| one_line(&e.to_string()).replace(' ', "_"))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

// ---------------------------------------------------------------- the fenced resource

#[derive(Default)]
struct NameState {
    /// Highest fence claimed.
    last_fence: u64,
    /// Connection of the latest accepted claim.
    claimer: Option<u64>,
    counter: u64,
    increments: u64,
    fences: HashSet<u64>,
    /// Claims and writes refused for a stale fence (or term).
    refused: u64,
    /// Writes accepted from a worker that was not the latest to claim the name.
    stale_accepted: u64,
    /// Sections that held the name (exits).
    sections: u64,
    /// Connections inside (between ENTER and EXIT), with their worker id.
    inside: Vec<u64>,
}

/// Two connections inside the same name at once; excused when either reports its
/// lease lost at its exit or dies (killed) before it.
#[derive(Debug, Clone)]
struct Overlap {
    name: String,
    at: Duration,
    first: u64,
    second: u64,
    /// Per side: `None` still inside, `Some(true)` lease reported lost or killed.
    first_lost: Option<bool>,
    second_lost: Option<bool>,
    /// Per side: its release then found the key gone or someone else's.
    first_late: bool,
    second_late: bool,
}

impl Overlap {
    fn excused(&self) -> bool {
        self.first_lost == Some(true) || self.second_lost == Some(true)
    }
}

#[derive(Default)]
struct History {
    names: BTreeMap<String, NameState>,
    overlaps: Vec<Overlap>,
    stale_accepted: u64,
    refused: u64,
    fence_repeats: u64,
    /// Fenced acquires that returned a guard without a fence: name and time.
    no_fence: Vec<(String, Duration)>,
    sections: u64,
    /// Times (since start) at which a section completed with its lease held.
    completions: Vec<Duration>,
    lost_reported: u64,
    errors: BTreeMap<String, u64>,
    next_conn: u64,
    stopping: bool,
    faults: Vec<Fault>,
    /// When each connection last entered each name.
    entered: HashMap<(u64, String), Duration>,
    /// Faults the nemesis could not complete (a deployment that did not converge).
    nemesis_errors: u64,
    /// Those faults, for the checker's failover windows.
    failed_faults: Vec<Fault>,
    /// Names entered, by kind of section and client (`multi cluster`, ...).
    entries: BTreeMap<String, u64>,
    wait_frees: Vec<WaitFree>,
    shutdowns: Vec<ShutdownLine>,
    /// Guards kept past a shutdown whose unlock did not say `Error::Shutdown`.
    unlock_after_shutdown_wrong: u64,
    unlocks_after_shutdown: u64,
}

/// One `wait_free` of a worker, as it timed it.
struct WaitFree {
    worker: u64,
    /// Since the soak's start: when the call began and returned.
    start: Duration,
    end: Duration,
    timeout: Duration,
    took: Duration,
    outcome: String,
}

/// One client's `shutdown` at a worker's end, as the worker reported it.
struct ShutdownLine {
    client: String,
    worker: u64,
    /// Leases the worker knew it held on that client.
    leases: u64,
    released: u64,
    already_gone: u64,
    failed: u64,
    took: Duration,
    overrun: Duration,
    /// A kept guard that still said `is_held()` after the shutdown.
    still_held: bool,
}

#[derive(Debug, Clone)]
struct Fault {
    kind: &'static str,
    victim: String,
    start: Duration,
    end: Duration,
}

struct Shared {
    history: Mutex<History>,
    start: Instant,
}

impl Shared {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

fn serve_resource(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        thread::spawn(move || {
            let conn = {
                let mut h = shared.history.lock();
                h.next_conn += 1;
                h.next_conn
            };
            let _ = serve_conn(&stream, conn, &shared);
            // A worker gone without its EXIT (killed): its sections end here.
            let mut h = shared.history.lock();
            let mut left = Vec::new();
            for (name, state) in &mut h.names {
                if state.inside.contains(&conn) {
                    state.inside.retain(|c| *c != conn);
                    left.push(name.clone());
                }
            }
            for name in left {
                exit_overlaps(&mut h, &name, conn, true);
            }
        });
    }
}

fn exit_overlaps(h: &mut History, name: &str, conn: u64, lost: bool) {
    for o in h.overlaps.iter_mut().filter(|o| o.name == name) {
        if o.first == conn && o.first_lost.is_none() {
            o.first_lost = Some(lost);
        }
        if o.second == conn && o.second_lost.is_none() {
            o.second_lost = Some(lost);
        }
    }
}

fn serve_conn(stream: &TcpStream, conn: u64, shared: &Shared) -> Res<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream.try_clone()?;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let now = shared.now();
        let reply = {
            let mut h = shared.history.lock();
            handle(&mut h, conn, &parts, now)
        };
        writer.write_all(format!("{reply}\n").as_bytes())?;
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per request reads best together"
)]
fn handle(h: &mut History, conn: u64, parts: &[&str], now: Duration) -> String {
    let num = |i: usize| {
        parts
            .get(i)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let name = parts.get(1).copied().unwrap_or("").to_owned();
    match parts.first().copied() {
        Some("GO") => if h.stopping { "STOP" } else { "GO" }.to_owned(),
        Some("ENTER") => {
            let kind = parts.get(3..).map(|p| p.join(" ")).unwrap_or_default();
            *h.entries.entry(kind).or_default() += 1;
            let state = h.names.entry(name.clone()).or_default();
            let others: Vec<u64> = state.inside.clone();
            state.inside.push(conn);
            h.entered.insert((conn, name.clone()), now);
            for first in others {
                h.overlaps.push(Overlap {
                    name: name.clone(),
                    at: now,
                    first,
                    second: conn,
                    first_lost: None,
                    second_lost: None,
                    first_late: false,
                    second_late: false,
                });
            }
            "OK".to_owned()
        }
        Some("CLAIM") => {
            let fence = num(2);
            let state = h.names.entry(name).or_default();
            let mut repeat = false;
            if fence > 0 && !state.fences.insert(fence) {
                repeat = true;
            }
            let accepted = fence == 0 || fence > state.last_fence;
            if accepted {
                state.last_fence = state.last_fence.max(fence);
                state.claimer = Some(conn);
            }
            h.fence_repeats += u64::from(repeat);
            if accepted {
                "OK".to_owned()
            } else {
                state.refused += 1;
                h.refused += 1;
                "REFUSED".to_owned()
            }
        }
        Some("READ") => h.names.entry(name).or_default().counter.to_string(),
        Some("SET") => {
            let fence = num(2);
            let value = num(3);
            let state = h.names.entry(name).or_default();
            let accepted = fence == 0 || fence == state.last_fence;
            if accepted {
                let from_latest = state.claimer == Some(conn);
                state.counter = value;
                state.increments += 1;
                state.stale_accepted += u64::from(!from_latest);
                h.stale_accepted += u64::from(!from_latest);
                "OK".to_owned()
            } else {
                state.refused += 1;
                h.refused += 1;
                "REFUSED".to_owned()
            }
        }
        Some("EXIT") => {
            let held = num(2) == 1;
            let wrote = num(3) == 1;
            if let Some(state) = h.names.get_mut(&name) {
                state.inside.retain(|c| *c != conn);
                state.sections += 1;
            }
            exit_overlaps(h, &name, conn, !held);
            h.sections += 1;
            // A partition's exit is a hand-over, not a section's completion.
            if held && wrote && !soak_partitions::is_partition(&name) {
                h.completions.push(now);
            }
            if !held {
                h.lost_reported += 1;
            }
            "OK".to_owned()
        }
        Some("LATE") => {
            let since = h
                .entered
                .get(&(conn, name.clone()))
                .copied()
                .unwrap_or_default();
            for o in h
                .overlaps
                .iter_mut()
                .filter(|o| o.name == name && o.at >= since)
            {
                o.first_late |= o.first == conn;
                o.second_late |= o.second == conn;
            }
            "OK".to_owned()
        }
        Some("WAITFREE") => {
            let took = Duration::from_millis(num(4));
            h.wait_frees.push(WaitFree {
                worker: num(2),
                start: now.saturating_sub(took),
                end: now,
                timeout: Duration::from_millis(num(3)),
                took,
                outcome: parts.get(5).copied().unwrap_or("").to_owned(),
            });
            "OK".to_owned()
        }
        Some("SHUTDOWN") => {
            h.shutdowns.push(ShutdownLine {
                client: name,
                worker: num(2),
                leases: num(3),
                released: num(4),
                already_gone: num(5),
                failed: num(6),
                took: Duration::from_millis(num(7)),
                overrun: Duration::from_millis(num(8)),
                still_held: num(9) == 1,
            });
            "OK".to_owned()
        }
        Some("AFTER_SHUTDOWN") => {
            h.unlocks_after_shutdown += num(1);
            h.unlock_after_shutdown_wrong += num(2);
            "OK".to_owned()
        }
        Some("NOFENCE") => {
            h.no_fence
                .push((format!("{name} ({})", parts[2..].join(" ")), now));
            "OK".to_owned()
        }
        Some("ERROR") => {
            let what = parts[1..].join(" ");
            // Keep the kind of error, not its details.
            let key: String = what.chars().take(60).collect();
            *h.errors.entry(key).or_default() += 1;
            "OK".to_owned()
        }
        _ => "ERR".to_owned(),
    }
}

// ---------------------------------------------------------------- processes

/// A `redis-server` child on a fixed loopback port, with an fsynced append-only file
/// so that a restart loses no write.
struct Server {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn start(dir: &Path) -> Res<Self> {
        std::fs::create_dir_all(dir)?;
        for _ in 0..5 {
            let port = free_port()?;
            let mut server = Server {
                port,
                dir: dir.to_path_buf(),
                child: None,
            };
            if server.launch().is_ok() {
                return Ok(server);
            }
        }
        Err("redis-server did not come up".into())
    }

    fn launch(&mut self) -> Res<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && child.try_wait()?.is_some()
            {
                self.child = None;
                return Err("redis-server exited".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err("redis-server did not answer".into())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn conn(&self) -> Res<redis::Connection> {
        let con = redis::Client::open(self.url())?
            .get_connection_with_timeout(Duration::from_millis(500))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    fn ping(&self) -> bool {
        self.conn()
            .and_then(|mut c| Ok(redis::cmd("PING").query::<String>(&mut c)?))
            .is_ok()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on its port (the proxy forwards there).
    fn relaunch(&mut self) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(pid) = self.child.as_ref().map(Child::id) {
            signal(pid, "CONT");
        }
        self.kill();
    }
}

fn free_port() -> Res<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `kill -<sig> <pid>` on a process this soak started.
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

struct Workers {
    children: Vec<Option<Child>>,
    args: Vec<String>,
    /// Exits nobody asked for (a worker that failed).
    crashes: u64,
}

impl Workers {
    fn spawn(&mut self, id: usize) -> Res<()> {
        let child = Command::new(std::env::current_exe()?)
            .arg("--worker")
            .arg(id.to_string())
            .args(&self.args)
            .stdin(Stdio::null())
            .spawn()?;
        self.children[id] = Some(child);
        Ok(())
    }

    fn pid(&self, id: usize) -> u32 {
        self.children[id].as_ref().map_or(0, Child::id)
    }

    fn kill(&mut self, id: usize) {
        if let Some(mut child) = self.children[id].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts workers that exited on their own, counting them.
    fn reap(&mut self) -> Res<()> {
        for id in 0..self.children.len() {
            if let Some(child) = self.children[id].as_mut()
                && child.try_wait()?.is_some()
            {
                self.crashes += 1;
                self.spawn(id)?;
            }
        }
        Ok(())
    }
}

impl Drop for Workers {
    /// Workers left running (the soak failed midway) are killed with it.
    fn drop(&mut self) {
        for id in 0..self.children.len() {
            if let Some(pid) = self.children[id].as_ref().map(Child::id) {
                signal(pid, "CONT");
            }
            self.kill(id);
        }
    }
}

// ---------------------------------------------------------------- the nemesis

const KINDS: [&str; 14] = [
    "kill_worker",
    "stop_worker",
    "stop_server",
    "debug_sleep",
    "client_pause_write",
    "proxy_blackhole",
    "proxy_latency",
    "proxy_reset",
    "restart_server",
    "stop_worker",
    "sentinel_failover",
    "slot_migration",
    "cluster_failover",
    "stop_redlock_master",
];

struct World {
    server: Server,
    sentinel: Deployment,
    cluster: Cluster,
    quorum: Masters,
    proxy: Proxy,
    workers: Workers,
}

/// Injects `kind`, waits `hold`, heals; returns the victim's name.
#[allow(
    clippy::too_many_lines,
    reason = "one arm per fault reads best together"
)]
fn inject(
    world: &mut World,
    rng: &mut fastrand::Rng,
    kind: &'static str,
    hold: Duration,
) -> Res<String> {
    let victim;
    match kind {
        "kill_worker" => {
            let id = rng.usize(..WORKERS);
            victim = format!("worker {id}");
            world.workers.kill(id);
            thread::sleep(hold);
            world.workers.spawn(id)?;
        }
        "stop_worker" => {
            let id = rng.usize(..WORKERS);
            let pid = world.workers.pid(id);
            victim = format!("worker {id} (pid {pid})");
            // Past its lease.
            let hold = hold.max(TTL + Duration::from_millis(500));
            signal(pid, "STOP");
            thread::sleep(hold);
            signal(pid, "CONT");
        }
        "stop_server" => {
            victim = "server".into();
            signal(world.server.pid(), "STOP");
            thread::sleep(hold);
            signal(world.server.pid(), "CONT");
        }
        "debug_sleep" => {
            victim = "server".into();
            let mut con = world.server.conn()?;
            let secs = format!("{:.3}", hold.as_secs_f64());
            let _: redis::RedisResult<()> =
                redis::cmd("DEBUG").arg("SLEEP").arg(secs).query(&mut con);
        }
        "client_pause_write" => {
            victim = "server".into();
            let mut con = world.server.conn()?;
            let () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(millis(hold))
                .arg("WRITE")
                .query(&mut con)?;
            thread::sleep(hold);
        }
        "proxy_blackhole" => {
            victim = "proxy".into();
            world.proxy.blackhole(true);
            thread::sleep(hold);
            world.proxy.blackhole(false);
        }
        "proxy_latency" => {
            victim = "proxy".into();
            world.proxy.delay(Duration::from_millis(rng.u64(50..=250)));
            thread::sleep(hold);
            world.proxy.delay(Duration::ZERO);
        }
        "proxy_reset" => {
            victim = "proxy".into();
            world.proxy.drop_connections();
            thread::sleep(hold);
        }
        "sentinel_failover" => {
            let old = world.sentinel.master_port().unwrap_or(0);
            victim = format!("sentinel master 127.0.0.1:{old}");
            world.sentinel.failover();
        }
        "slot_migration" => {
            let c = &world.cluster;
            let slot = c.slot(&format!("{PREFIX}{CLUSTER_NAME}"));
            let from = c.owner(slot);
            if role(&c.nodes[from]) != "master" {
                return Err(format!("the owner of slot {slot}, node {from}, is no master").into());
            }
            // Another master (a failover may have promoted any node).
            let masters: Vec<usize> = (0..c.nodes.len())
                .filter(|&i| i != from && role(&c.nodes[i]) == "master")
                .collect();
            if masters.is_empty() {
                return Err("no other master".into());
            }
            let to = masters[rng.usize(..masters.len())];
            victim = format!("slot {slot} from node {from} to node {to}");
            c.begin_migration(slot, from, to);
            thread::sleep(hold / 2);
            c.move_keys(slot, from, to);
            thread::sleep(hold / 2);
            // The target, the source, then every other master: after a CLUSTER
            // FAILOVER these are not the nodes the Cluster started as masters.
            let to_id = c.id(to);
            let others = (0..c.nodes.len())
                .filter(|&i| i != to && i != from && role(&c.nodes[i]) == "master");
            for i in [to, from].into_iter().chain(others) {
                let () = c.nodes[i].query(
                    redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("NODE")
                        .arg(&to_id),
                );
            }
        }
        "cluster_failover" => {
            let c = &world.cluster;
            let slot = c.slot(&format!("{PREFIX}{CLUSTER_NAME}"));
            let from = c.owner(slot);
            let port = c.nodes[from].port();
            // A replica of that master.
            let replica = (0..c.nodes.len())
                .find(|&i| {
                    let role: Vec<redis::Value> = c.nodes[i]
                        .try_conn()
                        .and_then(|mut con| redis::cmd("ROLE").query(&mut con))
                        .unwrap_or_default();
                    matches!(role.get(2), Some(redis::Value::Int(p)) if *p == i64::from(port))
                })
                .ok_or("the slot's master has no replica")?;
            victim = format!("node {from} (port {port}), replica node {replica} promoted");
            c.failover(replica);
        }
        "stop_redlock_master" => {
            let i = rng.usize(..world.quorum.servers.len());
            let server = &world.quorum.servers[i];
            victim = format!("redlock master {i} (port {})", server.port());
            server.pause();
            thread::sleep(hold);
            server.resume();
        }
        "restart_server" => {
            victim = "server".into();
            world.server.kill();
            thread::sleep(hold);
            world.server.relaunch()?;
        }
        _ => unreachable!("unknown fault {kind}"),
    }
    Ok(victim)
}

// ---------------------------------------------------------------- the run

#[allow(clippy::too_many_lines, reason = "the run reads best in one piece")]
fn run(seconds: u64, seed: u64, bronze: bool, kinds: &[&'static str]) -> Res<bool> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let base = std::env::temp_dir().join(format!("redlease-soak-{}", std::process::id()));
    let server = Server::start(&base.join("master"))?;
    let proxy = Proxy::start(server.port);
    // Master, replica and three sentinels: a failover is one of the faults.
    let sentinel = Deployment::start();
    // Three masters with a replica each: a slot move and a failover are faults.
    let cluster = Cluster::start(3, 1);
    // Three independent masters for Redlock.
    let quorum = Masters::start(3);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let resource = listener.local_addr()?.to_string();
    let shared = Arc::new(Shared {
        history: Mutex::new(History::default()),
        start: Instant::now(),
    });
    thread::spawn({
        let shared = Arc::clone(&shared);
        move || serve_resource(&listener, &shared)
    });
    let client = if bronze { "bronze" } else { "redlease" };
    eprintln!(
        "soak: seed {seed}, {seconds} s, client {client}, server 127.0.0.1:{} behind proxy {}, {WORKERS} workers",
        server.port,
        proxy.port()
    );
    let mut workers = Workers {
        children: (0..WORKERS).map(|_| None).collect(),
        args: vec![
            "--redis".into(),
            proxy.url(),
            "--resource".into(),
            resource,
            "--sentinels".into(),
            sentinel.sentinel_urls().join(","),
            "--cluster".into(),
            cluster.urls().join(","),
            "--redlock".into(),
            quorum.urls().join(","),
            "--seed".into(),
            seed.to_string(),
            "--client".into(),
            client.into(),
        ],
        crashes: 0,
    };
    for id in 0..WORKERS {
        workers.spawn(id)?;
    }
    // Who owns the partitions, as the group's status says, read on the server itself.
    let watching = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let watcher = if bronze {
        None
    } else {
        let client = build_client(0, || LockClient::builder(server.url().as_str()))?;
        let (watching, samples, start) =
            (Arc::clone(&watching), Arc::clone(&samples), shared.start);
        Some(thread::spawn(move || {
            soak_partitions::watch(&client, start, &watching, &samples);
        }))
    };
    let mut world = World {
        server,
        sentinel,
        cluster,
        quorum,
        proxy,
        workers,
    };
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut last_progress = Instant::now();
    let progress = |shared: &Shared| {
        let h = shared.history.lock();
        eprintln!(
            "soak: {:>5.1} s: {} sections, {} faults, {} refused, {} overlaps",
            shared.now().as_secs_f64(),
            h.sections,
            h.faults.len(),
            h.refused,
            h.overlaps.len()
        );
    };
    while Instant::now() < end {
        // Quiet time: a lease plus the liveness margin, so each heal is judged alone.
        let quiet = LIVENESS + Duration::from_millis(rng.u64(0..1000));
        let wake = Instant::now() + quiet;
        while Instant::now() < wake {
            thread::sleep(Duration::from_millis(50));
            world.workers.reap()?;
            if last_progress.elapsed() >= PROGRESS_EVERY {
                progress(&shared);
                last_progress = Instant::now();
            }
        }
        if Instant::now() + Duration::from_secs(3) >= end {
            break;
        }
        let kind = kinds[rng.usize(..kinds.len())];
        let hold = Duration::from_millis(rng.u64(500..=3000));
        let start = shared.now();
        // The support panics when a deployment does not converge in time: a fault
        // the nemesis could not complete, not a finding about the locks.
        let injected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inject(&mut world, &mut rng, kind, hold)
        }))
        .unwrap_or_else(|_| Err("the support panicked (above)".into()));
        match injected {
            Ok(victim) => {
                let fault = Fault {
                    kind,
                    victim,
                    start,
                    end: shared.now(),
                };
                eprintln!(
                    "soak: fault {} on {} from {:.2} s to {:.2} s",
                    fault.kind,
                    fault.victim,
                    fault.start.as_secs_f64(),
                    fault.end.as_secs_f64()
                );
                shared.history.lock().faults.push(fault);
            }
            Err(e) => {
                eprintln!(
                    "soak: NEMESIS ERROR: fault {kind} from {:.2} s not completed: {e}",
                    start.as_secs_f64()
                );
                let mut h = shared.history.lock();
                h.nemesis_errors += 1;
                let end = shared.now();
                h.failed_faults.push(Fault {
                    kind,
                    victim: "(not completed)".into(),
                    start,
                    end,
                });
            }
        }
    }
    // Let the workers finish their sections and leave.
    shared.history.lock().stopping = true;
    watching.store(true, Ordering::Release);
    if let Some(watcher) = watcher {
        let _ = watcher.join();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut stuck = 0;
    for id in 0..WORKERS {
        while let Some(child) = world.workers.children[id].as_mut() {
            match child.try_wait()? {
                Some(status) => {
                    if !status.success() {
                        world.workers.crashes += 1;
                    }
                    world.workers.children[id] = None;
                    break;
                }
                None if Instant::now() > deadline => {
                    stuck += 1;
                    world.workers.kill(id);
                    break;
                }
                None => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    // No lock key left: a killed holder's key may take one lease to expire.
    let deadline = Instant::now() + TTL + Duration::from_secs(2);
    let keys_left = loop {
        let mut con = world.server.conn()?;
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{PREFIX}*"))
            .query(&mut con)?;
        for node in world.cluster.nodes.iter().chain(&world.quorum.servers) {
            let more: Vec<String> = node
                .try_conn()
                .and_then(|mut c| redis::cmd("KEYS").arg(format!("{PREFIX}*")).query(&mut c))
                .unwrap_or_default();
            keys.extend(more);
        }
        keys.sort();
        keys.dedup();
        if let Some(port) = world.sentinel.master_port() {
            let more: Vec<String> = world
                .sentinel
                .server(port)
                .try_conn()
                .and_then(|mut c| redis::cmd("KEYS").arg(format!("{PREFIX}*")).query(&mut c))
                .unwrap_or_default();
            keys.extend(more);
        }
        let left: Vec<String> = keys
            .into_iter()
            .filter(|k| !k.contains("redlease:fence"))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let elapsed = shared.now();
    let crashes = world.workers.crashes;
    drop(world);
    let _ = std::fs::remove_dir_all(&base);
    let h = shared.history.lock();
    let samples = samples.lock();
    Ok(report(
        &h, seed, seconds, bronze, &keys_left, stuck, crashes, elapsed, &samples,
    ))
}

#[allow(
    clippy::too_many_arguments,
    clippy::too_many_lines,
    reason = "the report reads best in one piece"
)]
fn report(
    h: &History,
    seed: u64,
    seconds: u64,
    bronze: bool,
    keys_left: &[String],
    stuck: u64,
    crashes: u64,
    elapsed: Duration,
    partition_samples: &[(Duration, bool)],
) -> bool {
    // Both sides believed they held the lock. On the name of a deployment during
    // or right after its failover (completed or not) that is asynchronous
    // replication: the old master kept or lost the key while the new one granted
    // it. Counted apart; anywhere else it fails the soak.
    let near_failover = |o: &Overlap| {
        h.faults.iter().chain(&h.failed_faults).any(|f| {
            let failed_over = match f.kind {
                "sentinel_failover" => o.name == SENTINEL_NAME,
                "cluster_failover" => CLUSTER_NAMES.contains(&o.name.as_str()),
                _ => return false,
            };
            failed_over
                && f.start <= o.at + Duration::from_secs(1)
                && o.at <= f.end + TTL + Duration::from_secs(1)
        })
    };
    let (failover_overlaps, overlaps): (Vec<&Overlap>, Vec<&Overlap>) = h
        .overlaps
        .iter()
        .filter(|o| !o.excused())
        .partition(|o| near_failover(o));
    let excused = h.overlaps.len() - overlaps.len() - failover_overlaps.len();
    // Redlock gives no fence: the resource cannot refuse a paused holder's late
    // write to its name, so those (and the updates they lose) are counted apart.
    let unfenced = |name: &str| !bronze && name == REDLOCK_NAME;
    let lost = |s: &NameState| s.increments.abs_diff(s.counter);
    let lost_updates: u64 = h
        .names
        .iter()
        .filter(|(n, _)| !unfenced(n))
        .map(|(_, s)| lost(s))
        .sum();
    let stale_accepted: u64 = h
        .names
        .iter()
        .filter(|(n, _)| !unfenced(n))
        .map(|(_, s)| s.stale_accepted)
        .sum();
    let redlock = h.names.get(REDLOCK_NAME);
    let redlock_stale = redlock.map_or(0, |s| s.stale_accepted);
    let redlock_lost = redlock.map_or(0, lost);
    // Liveness: the first completed section after each heal.
    let mut max_gap = Duration::ZERO;
    let mut stalls = Vec::new();
    for f in &h.faults {
        let next = h.completions.iter().find(|t| **t >= f.end);
        let gap = next.map_or(elapsed.saturating_sub(f.end), |t| t.saturating_sub(f.end));
        max_gap = max_gap.max(gap);
        if gap > LIVENESS {
            stalls.push(f);
        }
    }
    // wait_free: bounded by its timeout, unless its worker was frozen meanwhile.
    let frozen = |worker: u64, start: Duration, end: Duration| {
        h.faults.iter().any(|f| {
            f.kind == "stop_worker"
                && f.victim.starts_with(&format!("worker {worker} "))
                && f.start <= end
                && start <= f.end
        })
    };
    let wait_free_overruns: Vec<&WaitFree> = h
        .wait_frees
        .iter()
        .filter(|w| w.took > w.timeout + OVERRUN_MARGIN && !frozen(w.worker, w.start, w.end))
        .collect();
    let max_wait_free_overrun = h
        .wait_frees
        .iter()
        .filter(|w| !frozen(w.worker, w.start, w.end))
        .map(|w| w.took.saturating_sub(w.timeout))
        .max()
        .unwrap_or_default();
    let wait_free_outcomes = |o: &str| h.wait_frees.iter().filter(|w| w.outcome == o).count();
    // shutdown: by its deadline, every kept lease ended, counted at most once.
    let sum = |f: fn(&ShutdownLine) -> u64| h.shutdowns.iter().map(f).sum::<u64>();
    let shutdown_overruns: Vec<&ShutdownLine> = h
        .shutdowns
        .iter()
        .filter(|s| s.overrun > OVERRUN_MARGIN)
        .collect();
    let held_after_shutdown = h.shutdowns.iter().filter(|s| s.still_held).count();
    let overcounted = h
        .shutdowns
        .iter()
        .filter(|s| s.released + s.already_gone + s.failed > s.leases)
        .count();
    let max_shutdown = h.shutdowns.iter().map(|s| s.took).max().unwrap_or_default();
    let expected_shutdowns = if bronze { 0 } else { WORKERS * CLIENTS.len() };
    let entries = |kind: &str| h.entries.get(kind).copied().unwrap_or_default();
    let name_stat = |name: &str, f: fn(&NameState) -> u64| h.names.get(name).map_or(0, f);
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &h.faults {
        *kinds.entry(f.kind).or_default() += 1;
    }
    // The partition group: the same checks per partition, and how long the
    // partitions stayed without an owner after each heal.
    let is_partition = |n: &str| soak_partitions::is_partition(n);
    let partition_overlaps = overlaps.iter().filter(|o| is_partition(&o.name)).count();
    let partition_excused = h
        .overlaps
        .iter()
        .filter(|o| is_partition(&o.name) && o.excused())
        .count();
    let partition_sum = |f: fn(&NameState) -> u64| {
        h.names
            .iter()
            .filter(|(n, _)| is_partition(n))
            .map(|(_, s)| f(s))
            .sum::<u64>()
    };
    let heals: Vec<Duration> = h.faults.iter().map(|f| f.end).collect();
    let watched_until = partition_samples.last().map_or(Duration::ZERO, |s| s.0);
    let recoveries: Vec<(Duration, Duration)> =
        soak_partitions::recoveries(partition_samples, &heals)
            .into_iter()
            .zip(&heals)
            .map(|(r, heal)| (*heal, r.unwrap_or(watched_until.saturating_sub(*heal))))
            .collect();
    let max_recovery = recoveries.iter().map(|r| r.1).max().unwrap_or_default();
    let slow_recoveries: Vec<&(Duration, Duration)> = recoveries
        .iter()
        .filter(|r| r.1 > soak_partitions::RECOVERY_BOUND)
        .collect();
    let mut failed = Vec::new();
    if !bronze {
        if !slow_recoveries.is_empty() {
            failed.push("partition_recovery");
        }
        if partition_sum(|s| s.increments) == 0 || !partition_samples.iter().any(|s| s.1) {
            failed.push("partitions_idle");
        }
    }
    if let Some((heal, took)) = recoveries.iter().max_by_key(|r| r.1) {
        let fault = h.faults.iter().find(|f| f.end == *heal);
        eprintln!(
            "soak: partitions owned again at most {} ms after a heal (of {} at {:.2} s; \
             the bound is {} ms)",
            took.as_millis(),
            fault.map_or("?", |f| f.kind),
            heal.as_secs_f64(),
            soak_partitions::RECOVERY_BOUND.as_millis()
        );
    }
    for (heal, took) in slow_recoveries.iter().take(5) {
        let fault = h.faults.iter().find(|f| f.end == *heal);
        eprintln!(
            "soak: PARTITIONS UNOWNED {} ms after the heal of {} at {:.2} s",
            took.as_millis(),
            fault.map_or("?", |f| f.kind),
            heal.as_secs_f64()
        );
    }
    if !overlaps.is_empty() {
        failed.push("overlaps");
    }
    if stale_accepted > 0 {
        failed.push("stale_writes_accepted");
    }
    if lost_updates > 0 {
        failed.push("lost_updates");
    }
    if h.fence_repeats > 0 {
        failed.push("fence_repeats");
    }
    if !h.no_fence.is_empty() {
        failed.push("grants_without_fence");
    }
    for (name, at) in h.no_fence.iter().take(5) {
        eprintln!(
            "soak: a fenced acquire of {name} returned no fence at {:.3} s",
            at.as_secs_f64()
        );
    }
    if !stalls.is_empty() {
        failed.push("liveness");
    }
    if !keys_left.is_empty() {
        failed.push("keys_left");
    }
    if !wait_free_overruns.is_empty() {
        failed.push("wait_free_overrun");
    }
    for w in wait_free_overruns.iter().take(5) {
        eprintln!(
            "soak: WAIT_FREE OVERRUN: worker {} asked {} ms, returned after {} ms at {:.2} s ({})",
            w.worker,
            w.timeout.as_millis(),
            w.took.as_millis(),
            w.end.as_secs_f64(),
            w.outcome
        );
    }
    if !shutdown_overruns.is_empty() {
        failed.push("shutdown_overrun");
    }
    for s in shutdown_overruns.iter().take(5) {
        eprintln!(
            "soak: SHUTDOWN OVERRUN: worker {}'s {} client returned {} ms past its deadline",
            s.worker,
            s.client,
            s.overrun.as_millis()
        );
    }
    if held_after_shutdown > 0 {
        failed.push("held_after_shutdown");
    }
    if overcounted > 0 {
        failed.push("shutdown_overcounted");
    }
    if h.unlock_after_shutdown_wrong > 0 {
        failed.push("unlock_after_shutdown");
    }
    if h.shutdowns.len() != expected_shutdowns {
        failed.push("shutdown_reports");
    }
    if crashes > 0 || stuck > 0 {
        failed.push("workers");
    }
    for o in overlaps.iter().take(10) {
        eprintln!(
            "soak: OVERLAP on {} at {:.3} s: connections {} and {} (lost: {:?} / {:?})",
            o.name,
            o.at.as_secs_f64(),
            o.first,
            o.second,
            o.first_lost,
            o.second_lost
        );
        for f in &h.faults {
            if f.start <= o.at + Duration::from_secs(2) && o.at <= f.end + Duration::from_secs(5) {
                eprintln!(
                    "soak:   near fault {} on {} from {:.2} s to {:.2} s",
                    f.kind,
                    f.victim,
                    f.start.as_secs_f64(),
                    f.end.as_secs_f64()
                );
            }
        }
    }
    for o in failover_overlaps.iter().take(10) {
        eprintln!(
            "soak: overlap on {} at {:.3} s during or after its failover: connections {} \
             and {} (found the key gone at release: {} / {})",
            o.name,
            o.at.as_secs_f64(),
            o.first,
            o.second,
            o.first_late,
            o.second_late
        );
    }
    for f in stalls.iter().take(10) {
        eprintln!(
            "soak: STALL: no section completed within {} ms of the heal of {} on {} at {:.2} s",
            LIVENESS.as_millis(),
            f.kind,
            f.victim,
            f.end.as_secs_f64()
        );
    }
    for (e, n) in &h.errors {
        eprintln!("soak: worker error x{n}: {e}");
    }
    if !keys_left.is_empty() {
        eprintln!("soak: keys left: {keys_left:?}");
    }
    let ok = failed.is_empty();
    if ok {
        eprintln!("soak: every check holds (seed {seed})");
    } else {
        eprintln!(
            "soak: FAILED {} (replay with --seed {seed})",
            failed.join(", ")
        );
    }
    let by_name = h
        .names
        .iter()
        .map(|(n, s)| format!("\"{n}\":{}", s.sections))
        .collect::<Vec<_>>()
        .join(",");
    let faults = kinds
        .iter()
        .map(|(k, n)| format!("\"{k}\":{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let failed_json = failed
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "{{\"seed\":{seed},\"seconds\":{seconds},\"client\":\"{}\",\"sections\":{},\"sections_by_name\":{{{by_name}}},\"faults\":{{{faults}}},\
         \"overlaps\":{},\"overlaps_excused\":{excused},\"overlaps_lost_with_failover\":{},\"leases_reported_lost\":{},\
         \"stale_writes_accepted\":{},\"stale_writes_refused\":{},\"lost_updates\":{lost_updates},\
         \"fence_repeats\":{},\"grants_without_fence\":{},\"max_liveness_gap_ms\":{},\"keys_left\":{},\"worker_crashes\":{crashes},\
         \"workers_stuck\":{stuck},\"nemesis_errors\":{},\
         \"multi_sections\":{{\"single\":{},\"cluster\":{}}},\"leader_sections\":{{\"single\":{},\"cluster\":{}}},\
         \"leader_terms\":{{\"{LEADER_SINGLE}\":{},\"{LEADER_CLUSTER}\":{}}},\
         \"leader_refused\":{{\"{LEADER_SINGLE}\":{},\"{LEADER_CLUSTER}\":{}}},\
         \"wait_free\":{{\"calls\":{},\"free\":{},\"held\":{},\"errors\":{},\"max_overrun_ms\":{},\"overruns\":{}}},\
         \"shutdown\":{{\"reports\":{},\"leases_kept\":{},\"released\":{},\"already_gone\":{},\"failed\":{},\
         \"max_ms\":{},\"overruns\":{},\"held_after\":{held_after_shutdown},\"unlocks_after\":{},\"unlocks_after_wrong\":{}}},\
         \"redlock_unfenced\":{{\"stale_writes_accepted\":{redlock_stale},\"lost_updates\":{redlock_lost}}},\
         \"partitions\":{{\"holds\":{},\"writes\":{},\"refused\":{},\"overlaps\":{partition_overlaps},\"overlaps_excused\":{partition_excused},\
         \"stale_writes_accepted\":{},\"heals\":{},\"max_recovery_ms\":{},\"recovery_bound_ms\":{},\"slow_recoveries\":{}}},\
         \"ok\":{ok},\"failed\":[{failed_json}]}}",
        if bronze { "bronze" } else { "redlease" },
        h.sections,
        overlaps.len(),
        failover_overlaps.len(),
        h.lost_reported,
        stale_accepted,
        h.refused,
        h.fence_repeats,
        h.no_fence.len(),
        max_gap.as_millis(),
        keys_left.len(),
        h.nemesis_errors,
        entries("multi single") / 2,
        entries("multi cluster") / 2,
        entries("leader single"),
        entries("leader cluster"),
        name_stat(LEADER_SINGLE, |n| n.fences.len() as u64),
        name_stat(LEADER_CLUSTER, |n| n.fences.len() as u64),
        name_stat(LEADER_SINGLE, |n| n.refused),
        name_stat(LEADER_CLUSTER, |n| n.refused),
        h.wait_frees.len(),
        wait_free_outcomes("free"),
        wait_free_outcomes("held"),
        wait_free_outcomes("error"),
        max_wait_free_overrun.as_millis(),
        wait_free_overruns.len(),
        h.shutdowns.len(),
        sum(|s| s.leases),
        sum(|s| s.released),
        sum(|s| s.already_gone),
        sum(|s| s.failed),
        max_shutdown.as_millis(),
        shutdown_overruns.len(),
        h.unlocks_after_shutdown,
        h.unlock_after_shutdown_wrong,
        partition_sum(|s| s.sections),
        partition_sum(|s| s.increments),
        partition_sum(|s| s.refused),
        partition_sum(|s| s.stale_accepted),
        recoveries.len(),
        max_recovery.as_millis(),
        soak_partitions::RECOVERY_BOUND.as_millis(),
        slow_recoveries.len(),
    );
    ok
}
