//! Partition groups: members of real clients sharing M partitions on real
//! servers (one server, a Redis Cluster, a Redlock quorum refused), with real
//! faults (a member cut off by a proxy). Waits are bounded (`eventually`), and
//! counted in the members' own rounds where the figure is about rounds.
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::{Error, LockClient, Member, PartitionEvent, PartitionGroup};
use support::proxy::Proxy;
use support::{Masters, RedisServer, eventually, wait_for};

/// Time enough for anything a loaded machine does.
const ROOMY: Duration = Duration::from_secs(30);
const M: u32 = 64;
const ROUND: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(2);

fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .key_prefix("lock:")
        .build()
        .unwrap()
}

fn group(client: &LockClient, m: u32) -> PartitionGroup {
    client
        .partitions("jobs", m)
        .unwrap()
        .ttl(TTL)
        .round(ROUND)
        .stability(TTL)
        .revoke_grace(TTL)
}

/// Every fence ever assigned, per partition: each new owner's must be higher.
#[derive(Default)]
struct Store {
    fences: Mutex<HashMap<u32, u64>>,
    stale: AtomicU64,
    assigned: AtomicU64,
}

impl Store {
    fn assigned(&self, p: u32, fence: u64) {
        let mut fences = self.fences.lock();
        let last = fences.entry(p).or_insert(0);
        if fence <= *last {
            self.stale.fetch_add(1, Ordering::SeqCst);
        }
        *last = fence.max(*last);
        self.assigned.fetch_add(1, Ordering::SeqCst);
    }
}

/// A member whose events a thread of its own handles: records assignments in
/// the store, releases on a revoke (when `hand_over`), counts losses.
struct Running {
    member: Arc<Member>,
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

fn run(group: &PartitionGroup, store: &Arc<Store>, hand_over: bool) -> Running {
    let member = Arc::new(group.join().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let lost = Arc::new(AtomicU64::new(0));
    let handle = {
        let (member, stop, lost, store) =
            (member.clone(), stop.clone(), lost.clone(), store.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match member.events().recv_timeout(Duration::from_millis(20)) {
                    Ok(PartitionEvent::Assigned { partition, fence }) => {
                        store.assigned(partition, fence);
                    }
                    Ok(PartitionEvent::Revoking { partition, .. }) if hand_over => {
                        let _ = member.release(partition);
                    }
                    Ok(PartitionEvent::Lost { .. }) => {
                        lost.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {}
                }
            }
        })
    };
    Running {
        member,
        stop,
        lost,
        handle,
    }
}

impl Running {
    fn leave(self) {
        self.stop_and_leave().unwrap();
    }

    /// Stops the member's thread, then leaves: what `leave` says.
    fn stop_and_leave(self) -> Result<(), Error> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap();
        Arc::try_unwrap(self.member).unwrap().leave()
    }
}

/// An 8-partition group with a TTL and windows of 60 s: only a release lets
/// another member take its partitions soon.
fn slow(c: &LockClient) -> PartitionGroup {
    group(c, 8)
        .ttl(Duration::from_secs(60))
        .stability(Duration::from_secs(60))
}

/// Two clients of `server` and members of [`slow`] groups on them, settled.
fn slow_pair(server: &RedisServer, store: &Arc<Store>) -> (LockClient, LockClient, Vec<Running>) {
    let (a, b) = (client(&server.url()), client(&server.url()));
    let running = vec![run(&slow(&a), store, true), run(&slow(&b), store, true)];
    settle(&running, &rounds_now(&running), 8);
    (a, b, running)
}

/// Whether the second of `running` comes to hold all 8 partitions soon.
fn second_takes_all(running: &[Running]) -> bool {
    eventually(Duration::from_secs(10), || {
        running[1].member.held().len() == 8
    })
}

/// Stops and leaves both members: what the first one's `leave` said.
fn leave_both(running: Vec<Running>) -> Result<(), Error> {
    let mut running = running.into_iter();
    let first = running.next().unwrap().stop_and_leave();
    running.next().unwrap().leave();
    first
}

/// Members of an `m`-partition group on each of `clients`, settled and balanced.
fn balanced_on(clients: &[LockClient], m: u32, store: &Arc<Store>) -> Vec<Running> {
    let running: Vec<Running> = clients
        .iter()
        .map(|c| run(&group(c, m), store, true))
        .collect();
    settle(&running, &rounds_now(&running), m);
    assert!(eventually(ROOMY, || group(&clients[0], m)
        .status()
        .unwrap()
        .is_balanced()));
    running
}

/// Who holds what, by the members' own views; `None` unless every partition is
/// held by exactly one of them and each holds ⌊M/N⌋ or ⌈M/N⌉.
fn balanced(members: &[&Member], m: u32) -> Option<BTreeMap<u32, String>> {
    let n = members.len();
    let (low, high) = (m as usize / n, (m as usize).div_ceil(n));
    let mut owners = BTreeMap::new();
    for member in members {
        let held = member.held();
        if !(low..=high).contains(&held.len()) {
            return None;
        }
        for (p, _) in held {
            if owners.insert(p, member.id().to_owned()).is_some() {
                return None;
            }
        }
    }
    (owners.len() == m as usize).then_some(owners)
}

fn moves(before: &BTreeMap<u32, String>, after: &BTreeMap<u32, String>) -> usize {
    before
        .iter()
        .filter(|(p, o)| after.get(p) != Some(o))
        .count()
}

fn members(running: &[Running]) -> Vec<&Member> {
    running.iter().map(|r| &*r.member).collect()
}

/// Waits until balanced; returns the owners and the fewest rounds any member
/// ran since `start` (each member's own count).
fn settle(running: &[Running], start: &[u64], m: u32) -> (BTreeMap<u32, String>, u64) {
    let mut owners = None;
    assert!(
        eventually(ROOMY, || {
            owners = balanced(&members(running), m);
            owners.is_some()
        }),
        "never balanced: {:?}",
        running
            .iter()
            .map(|r| r.member.held().len())
            .collect::<Vec<_>>()
    );
    let rounds = running
        .iter()
        .zip(start)
        .map(|(r, s)| r.member.rounds() - s)
        .min()
        .unwrap();
    (owners.unwrap(), rounds)
}

/// The key of the `jobs` group's asks (under the clients' `lock:` prefix).
const ASKS: &str = "lock:redlease:group:{jobs}:asks";

/// Waits until the `jobs` group is at rest, not merely balanced: balanced by the
/// members' own views with no ask out, and still exactly so, with every
/// member's record saying what it holds, after every member ran two more full
/// rounds (a member short of its quota would have asked or taken by then).
/// Balanced alone can be a moment in a hand-over: the one that should hold
/// ⌈M/N⌉ still short by one, asking, its owner not yet told. Returns the owners
/// and the fewest rounds any member ran from `start` to the moment it came to
/// rest.
fn at_rest(
    server: &RedisServer,
    running: &[Running],
    start: &[u64],
    m: u32,
) -> (BTreeMap<u32, String>, u64) {
    let reader = client(&server.url());
    let quiet = || {
        let owners = balanced(&members(running), m)?;
        let asks: usize = server.query(redis::cmd("HLEN").arg(ASKS));
        (asks == 0).then_some(owners)
    };
    let found = wait_for(ROOMY, || {
        let owners = quiet()?;
        let seen = rounds_now(running);
        let rounds = seen.iter().zip(start).map(|(n, s)| n - s).min().unwrap();
        // The round under way when `seen` was read may have begun before it.
        let later = eventually(ROOMY, || {
            rounds_now(running)
                .iter()
                .zip(&seen)
                .all(|(n, s)| *n >= s + 3)
        });
        let records = group(&reader, m).status().ok()?;
        let agree = records.members.len() == running.len()
            && records.members.iter().all(|r| {
                let held: Vec<u32> = owners
                    .iter()
                    .filter(|(_, o)| **o == r.id)
                    .map(|(p, _)| *p)
                    .collect();
                let mut said = r.partitions.clone();
                said.sort_unstable();
                said == held
            });
        (later && agree && quiet().as_ref() == Some(&owners)).then_some((owners, rounds))
    });
    found.unwrap_or_else(|| {
        panic!(
            "never at rest: {:?}",
            running
                .iter()
                .map(|r| r.member.held().len())
                .collect::<Vec<_>>()
        )
    })
}

fn rounds_now(running: &[Running]) -> Vec<u64> {
    running.iter().map(|r| r.member.rounds()).collect()
}

#[test]
fn eight_members_balance_and_a_join_and_a_leave_move_only_their_share() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let clients: Vec<LockClient> = (0..9).map(|_| client(&server.url())).collect();
    let mut running: Vec<Running> = clients[..8]
        .iter()
        .map(|c| run(&group(c, M), &store, true))
        .collect();
    let (before, _) = at_rest(&server, &running, &rounds_now(&running), M);
    // A join: the ninth takes its share from the others, and only that.
    let mut start = rounds_now(&running);
    running.push(run(&group(&clients[8], M), &store, true));
    start.push(0);
    let (after, rounds) = at_rest(&server, &running, &start, M);
    let moved = moves(&before, &after);
    eprintln!("join: {moved} moves, balanced within {rounds} rounds");
    assert!(moved <= (M as usize).div_ceil(9) + 1, "{moved} moves");
    assert!(rounds <= 3, "balanced after {rounds} rounds");
    // A clean leave: its partitions go to the others, nothing else moves.
    let leaver = running.remove(3);
    let gone = leaver.member.id().to_owned();
    let start = rounds_now(&running);
    leaver.leave();
    let (last, rounds) = at_rest(&server, &running, &start, M);
    let moved_between_live = after
        .iter()
        .filter(|(p, o)| **o != gone && last.get(p) != Some(o))
        .count();
    eprintln!("leave: balanced within {rounds} rounds");
    assert_eq!(moved_between_live, 0);
    assert!(rounds <= 3, "balanced after {rounds} rounds");
    // The group reads the same from outside.
    let status = group(&clients[0], M).status().unwrap();
    assert_eq!(status.members.len(), 8);
    assert!(eventually(ROOMY, || group(&clients[0], M)
        .status()
        .unwrap()
        .is_balanced()));
    assert_eq!(
        store.stale.load(Ordering::SeqCst),
        0,
        "a fence did not rise"
    );
    for r in running {
        assert_eq!(r.lost.load(Ordering::SeqCst), 0);
        r.leave();
    }
    let status = group(&clients[0], M).status().unwrap();
    assert!(status.members.is_empty());
    assert!(
        status
            .partitions
            .iter()
            .all(|p| p.owner.is_none() && p.ttl.is_none())
    );
}

#[test]
fn a_revoked_partition_is_handed_over_and_one_kept_past_its_deadline_is_taken() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let (a, b, c) = (
        client(&server.url()),
        client(&server.url()),
        client(&server.url()),
    );
    let first = group(&a, 4).join().unwrap();
    assert!(eventually(ROOMY, || first.held().len() == 4));
    let fences: BTreeMap<u32, u64> = first.held().into_iter().collect();
    // A second member asks for two: the first is told, releases one, and
    // keeps the other past the deadline.
    let second = run(
        &group(&b, 4).revoke_grace(Duration::from_secs(1)),
        &store,
        true,
    );
    let mut revoked = Vec::new();
    while revoked.len() < 2 {
        match first.events().recv_timeout(ROOMY).unwrap() {
            PartitionEvent::Revoking {
                partition,
                deadline,
            } => {
                // At most the grace away.
                assert!(deadline <= Instant::now() + Duration::from_secs(1));
                revoked.push(partition);
            }
            PartitionEvent::Assigned { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(first.release(revoked[0]).unwrap());
    let (handed, kept) = (revoked[0], revoked[1]);
    assert!(eventually(ROOMY, || second
        .member
        .held()
        .iter()
        .any(|(p, _)| *p == handed)));
    // The one kept is taken anyway after the deadline; the first hears it lost.
    let lost = first.events().iter().find_map(|e| match e {
        PartitionEvent::Lost { partition, fence } => Some((partition, fence)),
        _ => None,
    });
    assert_eq!(lost, Some((kept, fences[&kept])));
    assert!(eventually(ROOMY, || second.member.held().len() == 2));
    for (p, f) in second.member.held() {
        assert!(
            f > fences[&p],
            "partition {p}: fence {f} not above {}",
            fences[&p]
        );
    }
    assert_eq!(first.held().len(), 2);
    assert_eq!(store.stale.load(Ordering::SeqCst), 0);
    drop(c);
    second.leave();
    first.leave().unwrap();
}

/// A member of `group` on a client behind a proxy, with a stable id.
fn behind(server: &RedisServer, store: &Arc<Store>, id: &str) -> (Proxy, LockClient, Running) {
    let proxy = Proxy::start(server.port());
    let client = LockClient::builder(proxy.url())
        .key_prefix("lock:")
        .read_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let running = run(&windowed(&client).member_id(id), store, true);
    (proxy, client, running)
}

const WINDOW: Duration = Duration::from_secs(6);

fn windowed(client: &LockClient) -> PartitionGroup {
    group(client, 12).stability(WINDOW)
}

/// Cuts a member off and ends it without a word reaching Redis; returns when
/// its handle is gone.
fn cut_off(proxy: &Proxy, client: LockClient, r: Running) {
    proxy.blackhole(true);
    r.stop.store(true, Ordering::SeqCst);
    r.handle.join().unwrap();
    // Its leave goes into the blackhole.
    drop(r.member);
    drop(client);
}

#[test]
fn a_member_back_inside_its_window_moves_nothing_and_one_gone_is_replaced_after_it() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let clients: Vec<LockClient> = (0..3).map(|_| client(&server.url())).collect();
    let mut running: Vec<Running> = clients
        .iter()
        .map(|c| run(&windowed(c), &store, true))
        .collect();
    let (proxy, cut, w3) = behind(&server, &store, "w3");
    running.push(w3);
    let (before, _) = settle(&running, &rounds_now(&running), 12);
    // Gone without a word, back with the same id inside the window: its
    // partitions waited for it.
    let t = Instant::now();
    cut_off(&proxy, cut, running.pop().unwrap());
    let (proxy, cut, w3) = behind(&server, &store, "w3");
    eprintln!("restarted {:?} after the cut", t.elapsed());
    assert!(t.elapsed() < WINDOW, "restarted after {:?}", t.elapsed());
    running.push(w3);
    let (after, _) = settle(&running, &rounds_now(&running), 12);
    assert_eq!(moves(&before, &after), 0, "{before:?} {after:?}");
    // Gone for good: after its window (and its leases' TTL) and a round, the
    // others hold everything.
    let t = Instant::now();
    cut_off(&proxy, cut, running.pop().unwrap());
    let (_, _) = settle(&running, &rounds_now(&running), 12);
    let took = t.elapsed();
    eprintln!("replaced after {took:?} (window {WINDOW:?}, ttl {TTL:?}, round {ROUND:?})");
    assert!(
        took + ROUND * 2 >= WINDOW,
        "taken inside the window: {took:?}"
    );
    assert!(
        took < WINDOW + TTL + ROUND + Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(store.stale.load(Ordering::SeqCst), 0);
    for r in running {
        assert_eq!(r.lost.load(Ordering::SeqCst), 0);
        r.leave();
    }
}

#[test]
fn shutdown_releases_a_members_partitions_for_the_others_at_once() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    // Long TTLs and windows: only the release lets the other take them soon.
    let (a, _b, running) = slow_pair(&server, &store);
    // The member's thread hears the shutdown and leaves (or the shutdown
    // releases its leases first): either way, released and gone at once.
    let report = a.shutdown(Instant::now() + ROOMY);
    assert_eq!(report.failed, 0, "{report:?}");
    assert!(second_takes_all(&running));
    assert!(matches!(leave_both(running), Ok(()) | Err(Error::Shutdown)));
}

#[test]
fn redlock_and_bad_groups_are_refused() {
    let masters = Masters::start(3);
    let redlock = LockClient::redlock(masters.urls()).build().unwrap();
    assert!(matches!(
        redlock.partitions("g", 4),
        Err(Error::Unsupported { .. })
    ));
    let server = RedisServer::start();
    let c = client(&server.url());
    assert!(matches!(c.partitions("", 4), Err(Error::Invalid { .. })));
    assert!(matches!(
        c.partitions("a{b}", 4),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(c.partitions("g", 0), Err(Error::Invalid { .. })));
    let g = c.partitions("g", 4).unwrap();
    assert!(matches!(
        g.clone().round(Duration::ZERO).join(),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        g.clone().member_id("a\tb").join(),
        Err(Error::Invalid { .. })
    ));
}

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_serves_a_group_from_one_slot() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let store = Arc::new(Store::default());
    let clients = [cluster.client(), cluster.client(), cluster.client()];
    let running = balanced_on(&clients, 16, &store);
    for r in running {
        r.leave();
    }
}

#[test]
fn a_member_whose_client_is_dropped_leaves_at_its_next_round() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let (a, b, running) = slow_pair(&server, &store);
    // The member does not keep its client alive: dropping the last clone ends
    // it, its partitions released and its record deleted.
    drop(a);
    assert!(second_takes_all(&running));
    let status = slow(&b).status().unwrap();
    assert_eq!(status.members.len(), 1);
    assert!(matches!(leave_both(running), Err(Error::Shutdown)));
}

#[cfg(feature = "sentinel")]
#[test]
fn a_sentinel_managed_master_serves_a_group_as_one_server() {
    let d = support::sentinel::Deployment::start();
    let store = Arc::new(Store::default());
    let clients: Vec<LockClient> = (0..2)
        .map(|_| {
            LockClient::sentinel(d.sentinel_urls(), support::sentinel::MASTER_NAME)
                .key_prefix("lock:")
                .build()
                .unwrap()
        })
        .collect();
    let running = balanced_on(&clients, 8, &store);
    assert_eq!(store.stale.load(Ordering::SeqCst), 0);
    for r in running {
        r.leave();
    }
}

#[test]
fn moves_per_round_stay_within_max_moves() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let clients: Vec<LockClient> = (0..5).map(|_| client(&server.url())).collect();
    let damped = |c: &LockClient| group(c, 16).max_moves(1);
    let mut running: Vec<Running> = clients[..4]
        .iter()
        .map(|c| run(&damped(c), &store, true))
        .collect();
    let (before, _) = settle(&running, &rounds_now(&running), 16);
    running.push(run(&damped(&clients[4]), &store, true));
    // The asks out at any moment: at most one (one move per round, group-wide).
    let mut con = server.conn();
    let mut most = 0;
    let mut owners = None;
    assert!(eventually(ROOMY, || {
        let out: u64 = redis::cmd("HLEN")
            .arg("lock:redlease:group:{jobs}:asks")
            .query(&mut con)
            .unwrap();
        most = most.max(out);
        owners = balanced(&members(&running), 16);
        owners.is_some()
    }));
    let moved = moves(&before, &owners.unwrap());
    eprintln!("damped join: {moved} moves, at most {most} asked at once");
    assert!((3..=4).contains(&moved), "{moved} moves");
    assert!(most <= 1, "{most} asks out at once");
    for r in running {
        r.leave();
    }
}

#[test]
fn the_status_names_a_joiners_partitions_and_says_balanced_the_moment_it_takes_them() {
    let server = RedisServer::start();
    let store = Arc::new(Store::default());
    let clients: Vec<LockClient> = (0..5).map(|_| client(&server.url())).collect();
    let m = 12;
    let running = balanced_on(&clients[..4], m, &store);
    // The fifth member's events are read here: the status is read the moment
    // its round tells that it took a partition, before its next round.
    let joiner = group(&clients[4], m).join().unwrap();
    let (mut taken, mut unnamed, mut wrong_fence) = (0, 0, 0);
    let mut last = None;
    let deadline = Instant::now() + ROOMY;
    let mut all = members(&running);
    all.push(&joiner);
    while balanced(&all, m).is_none() || last.is_none() || !joiner.events().is_empty() {
        assert!(Instant::now() < deadline, "the join never settled");
        let Ok(PartitionEvent::Assigned { partition, fence }) =
            joiner.events().recv_timeout(Duration::from_millis(50))
        else {
            continue;
        };
        let status = group(&clients[0], m).status().unwrap();
        taken += 1;
        let info = &status.partitions[partition as usize];
        if info.owner.as_deref() != Some(joiner.id()) {
            unnamed += 1;
        } else if info.fence != Some(fence) {
            wrong_fence += 1;
        }
        // Every held partition names a live member.
        unnamed += status
            .partitions
            .iter()
            .filter(|p| p.partition != partition && p.ttl.is_some() && p.owner.is_none())
            .count();
        last = Some(status);
    }
    let last = last.unwrap();
    eprintln!(
        "{taken} takes told: {unnamed} held partitions unnamed, {wrong_fence} wrong fences, \
         balanced at the last take: {}",
        last.is_balanced()
    );
    assert_eq!((unnamed, wrong_fence), (0, 0), "{last:#?}");
    assert!(last.is_balanced(), "{last:#?}");
    for p in &last.partitions {
        let owner = p.owner.as_deref().unwrap();
        let member = last.members.iter().find(|mem| mem.id == owner).unwrap();
        assert!(member.partitions.contains(&p.partition), "{last:#?}");
    }
    joiner.leave().unwrap();
    for r in running {
        r.leave();
    }
}
