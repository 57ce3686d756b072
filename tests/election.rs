mod support;

// Leader election: terms, one leader at a time, hand-over on resign and on a
// leader's death, leader() and observe(), bad input, Cluster and Redlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use redlease::{Error, LockClient, LockFormat, LockOptions, Observer, Owner, Release, Renewal};
use support::cluster::Cluster;
use support::fleet::{listening, released, spawned};
use support::{Masters, RedisServer, eventually};

const TTL: Duration = Duration::from_secs(10);
/// Longer than any change an observer must report (a message, or a poll).
const SEEN: Duration = Duration::from_secs(5);

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(TTL)
        .build()
        .unwrap()
}

/// Clients subscribed to the name's release channel: its waiting candidates'
/// waiter threads.
fn listeners(server: &RedisServer, name: &str) -> i64 {
    server.subscribers(&released(&format!("lock:{name}")))
}

/// Whether `observer` reports the leader of `term` within [`SEEN`] (a slow
/// reader may see a gap, `None`, first).
fn sees(observer: &Observer, term: u64) -> bool {
    let seen = support::wait_for(SEEN, || {
        observer
            .recv_timeout(SEEN)
            .ok()
            .flatten()
            .filter(|l| l.term() == term)
    });
    seen.is_some()
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

#[test]
fn terms_strictly_increase_over_many_leaders_and_clients() {
    let server = RedisServer::start();
    let clients = [client(&server), client(&server), client(&server)];
    // Other fenced locks under the prefix move the shared counter: terms still rise.
    let other = LockClient::builder(server.url())
        .key_prefix("lock:")
        .fencing(true)
        .build()
        .unwrap();
    let mut terms = Vec::new();
    for round in 0..30 {
        let election = clients[round % 3].election("sched").unwrap();
        let leadership = election.try_campaign().unwrap().expect("free");
        assert!(leadership.is_held());
        terms.push(leadership.term());
        drop(other.lock("unrelated").unwrap());
        if round % 2 == 0 {
            assert_eq!(leadership.resign().unwrap(), Release::Released);
        } // else resigned on drop
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

#[test]
fn only_one_candidate_leads_at_a_time() {
    let server = RedisServer::start();
    let leading = Arc::new(AtomicUsize::new(0));
    let rounds = 10 * support::stress_factor();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let client = client(&server);
            let leading = Arc::clone(&leading);
            thread::spawn(move || {
                let election = client.election("one").unwrap();
                let mut terms = Vec::new();
                for _ in 0..rounds {
                    let leadership = election.campaign().unwrap();
                    assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                    terms.push(leadership.term());
                    thread::yield_now();
                    leading.fetch_sub(1, Ordering::SeqCst);
                    let _ = leadership.resign().unwrap();
                }
                terms
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a term was given twice");
}

#[test]
fn a_resign_hands_over_to_a_waiting_candidate_of_another_client_promptly() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let mut handovers = Vec::new();
    let mut leadership = a.election("handover").unwrap().campaign().unwrap();
    for round in 0..7 {
        let next = if round % 2 == 0 { &b } else { &a };
        let election = next.election("handover").unwrap();
        let rx = spawned(move || election.campaign().unwrap());
        // The candidate's waiter thread listens for the release.
        listening(&server, &released("lock:handover"));
        let old = leadership.term();
        let began = Instant::now();
        assert_eq!(leadership.resign().unwrap(), Release::Released);
        let won_at;
        (leadership, won_at) = rx.recv_timeout(SEEN).expect("the candidate never led");
        assert!(leadership.term() > old);
        handovers.push(won_at - began);
    }
    println!("hand-overs: {handovers:?}");
    // Woken, not polled: a single hand-over may meet a stall on a loaded machine,
    // the median does not.
    assert!(
        median(handovers.clone()) < Duration::from_millis(100),
        "{handovers:?}"
    );
    assert!(
        handovers.iter().all(|d| *d < Duration::from_secs(1)),
        "{handovers:?}"
    );
}

#[test]
fn a_resign_hands_over_to_a_candidate_of_the_same_client() {
    let server = RedisServer::start();
    let (shared, watcher) = (client(&server), client(&server));
    let observer = watcher.election("local").unwrap().observe().unwrap();
    let first = shared.election("local").unwrap().campaign().unwrap();
    let election = shared.election("local").unwrap();
    let rx = spawned(move || election.campaign().unwrap());
    // The candidate waits in this client's line for the name.
    assert!(eventually(SEEN, || listeners(&server, "local") >= 2));
    assert!(rx.try_recv().is_err());
    let old = first.term();
    assert_eq!(first.resign().unwrap(), Release::Released);
    let (second, _) = rx.recv_timeout(SEEN).expect("the candidate leads");
    assert!(second.term() > old && second.is_held());
    let leader = watcher
        .election("local")
        .unwrap()
        .leader()
        .unwrap()
        .unwrap();
    assert_eq!(leader.term(), second.term());
    assert!(sees(&observer, second.term()));
}

#[test]
fn a_leader_that_stops_renewing_is_replaced_after_its_lease() {
    let server = RedisServer::start();
    let dying = client(&server);
    let ttl = Duration::from_secs(1);
    let leadership = dying
        .election("dies")
        .unwrap()
        .campaign_with(&LockOptions::new().ttl(ttl))
        .unwrap()
        .unwrap();
    let old = leadership.term();
    // Its process "dies": nothing releases, nothing renews.
    std::mem::forget(leadership);
    let began = Instant::now();
    drop(dying);
    let next = client(&server)
        .election("dies")
        .unwrap()
        .campaign()
        .unwrap();
    let took = began.elapsed();
    assert!(next.term() > old);
    assert!(took < ttl + Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_deposed_leader_is_told_and_its_term_is_lower() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let fixed = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .renewal(Renewal::None);
    let old = a
        .election("deposed")
        .unwrap()
        .campaign_with(&fixed)
        .unwrap()
        .unwrap();
    let new = b.election("deposed").unwrap().campaign().unwrap();
    assert!(!old.is_held());
    assert!(old.check().is_err());
    assert!(new.term() > old.term());
    assert_ne!(old.resign().unwrap(), Release::Released);
    assert!(new.is_held());
}

#[test]
fn leader_reads_term_ttl_and_a_live_owner() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let election = b.election("who").unwrap();
    assert_eq!(election.leader().unwrap(), None);
    let leadership = a.election("who").unwrap().campaign().unwrap();
    let leader = election.leader().unwrap().expect("a leader");
    assert_eq!(leader.term(), leadership.term());
    assert_eq!(leader.key(), "lock:who");
    assert!(
        leader.ttl() > TTL / 2 && leader.ttl() <= TTL,
        "{:?}",
        leader.ttl()
    );
    // The session record is written in the background when the client starts.
    let owner = support::wait_for(SEEN, || {
        let leader = election.leader().unwrap().unwrap();
        leader.owner().is_alive().then(|| leader.owner().clone())
    })
    .expect("the owner's record");
    let session = owner.session().unwrap();
    assert_eq!(session.pid(), std::process::id());
    assert!(!session.host().is_empty());
    assert_eq!(leadership.resign().unwrap(), Release::Released);
    assert_eq!(election.leader().unwrap(), None);
}

#[test]
fn a_plain_lock_of_the_name_reads_as_no_election() {
    let server = RedisServer::start();
    let c = client(&server);
    // An earlier leader's term record stays: it must not name the plain lock's holder.
    let earlier = c.election("plain").unwrap().campaign().unwrap();
    assert_eq!(earlier.resign().unwrap(), Release::Released);
    let guard = c.lock("plain").unwrap();
    let e = c.election("plain").unwrap().leader().unwrap_err();
    assert!(matches!(e, Error::WrongFormat { .. }), "{e:?}");
    drop(guard);
}

#[test]
fn observe_sends_the_leader_then_each_change_then_none() {
    let server = RedisServer::start();
    let (a, b, watcher) = (client(&server), client(&server), client(&server));
    let first = a.election("seen").unwrap().campaign().unwrap();
    let observer = watcher.election("seen").unwrap().observe().unwrap();
    let seen = observer.recv_timeout(SEEN).unwrap().expect("a leader");
    assert_eq!(seen.term(), first.term());
    let owner_tag = seen.owner().tag();
    assert!(owner_tag.is_some());

    // A hand-over to another client's waiting candidate.
    let election = b.election("seen").unwrap();
    let waiter = spawned(move || election.campaign().unwrap());
    assert!(eventually(SEEN, || listeners(&server, "seen") >= 2));
    let _ = first.resign().unwrap();
    let (second, _) = waiter.recv_timeout(SEEN).expect("the candidate never led");
    // A slow reader may see the gap (None) first; it then sees the new leader.
    assert!(sees(&observer, second.term()));

    // No candidate left: the resign reads as nobody leading.
    let began = Instant::now();
    let _ = second.resign().unwrap();
    assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
    // Woken by the release message, not the poll (with room for a stall).
    assert!(began.elapsed() < redlease::OBSERVE_POLL + Duration::from_millis(400));

    watcher.close();
    let end = Instant::now() + SEEN;
    loop {
        match observer.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("the observer outlived its client"),
            Ok(_) => {}
        }
    }
}

#[test]
fn observe_stops_when_the_client_is_dropped() {
    let server = RedisServer::start();
    let watcher = client(&server);
    let observer = watcher.election("gone").unwrap().observe().unwrap();
    assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
    drop(watcher);
    assert_eq!(
        observer.recv_timeout(SEEN),
        Err(RecvTimeoutError::Disconnected)
    );
}

#[test]
fn an_observer_is_woken_by_messages_not_its_poll() {
    let server = RedisServer::start();
    let (a, watcher) = (client(&server), client(&server));
    let observer = watcher.election("woken").unwrap().observe().unwrap();
    assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
    let election = a.election("woken").unwrap();
    let (mut elected, mut resigned) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let leadership = election.try_campaign().unwrap().expect("free");
        let won = Instant::now();
        let seen = observer.recv_timeout(SEEN).unwrap().expect("the leader");
        elected.push(won.elapsed());
        assert_eq!(seen.term(), leadership.term());
        let began = Instant::now();
        let _ = leadership.resign().unwrap();
        assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
        resigned.push(began.elapsed());
    }
    println!("seen after election {elected:?}, after resign {resigned:?}");
    // A poll alone would take half its interval (250 ms) in the median.
    assert!(
        median(elected.clone()) < Duration::from_millis(150),
        "{elected:?}"
    );
    assert!(
        median(resigned.clone()) < Duration::from_millis(150),
        "{resigned:?}"
    );
}

#[test]
fn a_dropped_observer_stops_its_thread() {
    let server = RedisServer::start();
    let watcher = client(&server);
    let elected = |server: &RedisServer| server.subscribers("{lock:dropped}:elected");
    let observer = watcher.election("dropped").unwrap().observe().unwrap();
    assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
    assert!(eventually(SEEN, || elected(&server) == 1));
    drop(observer);
    // Its thread ends within a poll interval, and its connection with it.
    assert!(eventually(SEEN, || elected(&server) == 0));
}

/// Pub/sub connections open on `server`.
fn pubsub_connections(server: &RedisServer) -> usize {
    let list: String = server.query(redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub"));
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

#[test]
fn a_hundred_observers_share_the_clients_one_pubsub_connection() {
    let server = RedisServer::start();
    let (a, watcher) = (client(&server), client(&server));
    // The two clients' own waiter threads: one pub/sub connection each.
    assert!(eventually(SEEN, || pubsub_connections(&server) == 2));
    let observers: Vec<_> = (0..100)
        .map(|i| {
            let observer = watcher
                .election(&format!("many{}", i % 10))
                .unwrap()
                .observe()
                .unwrap();
            assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
            observer
        })
        .collect();
    assert_eq!(pubsub_connections(&server), 2);
    // Every observer sees every change of its election.
    for round in 0..3 {
        let leaders: Vec<_> = (0..10)
            .map(|i| {
                a.election(&format!("many{i}"))
                    .unwrap()
                    .try_campaign()
                    .unwrap()
                    .expect("free")
            })
            .collect();
        for (i, observer) in observers.iter().enumerate() {
            let seen = observer.recv_timeout(SEEN).unwrap().expect("the leader");
            assert_eq!(
                seen.term(),
                leaders[i % 10].term(),
                "observer {i}, round {round}"
            );
        }
        for leadership in leaders {
            let _ = leadership.resign().unwrap();
        }
        for observer in &observers {
            assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
        }
    }
    assert_eq!(pubsub_connections(&server), 2);
    // Dropped, they leave the client's subscriptions (after the waiter thread's
    // linger), and the client keeps its one connection.
    drop(observers);
    assert!(eventually(SEEN, || listeners(&server, "many0") == 0));
    assert_eq!(pubsub_connections(&server), 2);
}

#[test]
fn a_slow_observer_reads_the_latest_leader_not_a_backlog() {
    let server = RedisServer::start();
    let (a, watcher) = (client(&server), client(&server));
    let observer = watcher.election("slow").unwrap().observe().unwrap();
    let election = a.election("slow").unwrap();
    // Not read meanwhile: five leaders come and go, then one stays.
    for _ in 0..5 {
        drop(election.campaign().unwrap());
        assert!(observer.receiver().len() <= 1);
    }
    let kept = election.campaign().unwrap();
    let seen = support::wait_for(SEEN, || {
        assert!(observer.receiver().len() <= 1);
        observer
            .recv_timeout(SEEN)
            .ok()
            .flatten()
            .filter(|l| l.term() == kept.term())
    });
    assert!(seen.is_some());
}

#[test]
fn bad_names_get_typed_errors() {
    let server = RedisServer::start();
    let c = client(&server);
    assert!(matches!(c.election(""), Err(Error::Invalid { .. })));

    server.query::<()>(redis::cmd("HSET").arg("lock:hash").arg("f").arg("1"));
    let hash = c.election("hash").unwrap();
    for e in [
        hash.try_campaign().unwrap_err(),
        hash.campaign().unwrap_err(),
        hash.leader().unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                Error::WrongFormat {
                    expected: LockFormat::Token,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    let sem = c.semaphore("count").unwrap();
    sem.set_permits(3).unwrap();
    let count = c.election("count").unwrap();
    assert!(matches!(count.campaign(), Err(Error::WrongFormat { .. })));
    assert!(matches!(count.leader(), Err(Error::WrongFormat { .. })));

    let no_fence = LockOptions::new().fencing(false);
    assert!(matches!(
        c.election("x").unwrap().campaign_with(&no_fence),
        Err(Error::Config { .. })
    ));
}

#[test]
fn an_election_on_redlock_is_unsupported() {
    let masters = Masters::start(3);
    let client = LockClient::redlock(masters.urls()).build().unwrap();
    assert!(matches!(
        client.election("quorum"),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn an_election_on_a_cluster_hands_over_and_is_observed() {
    let cluster = Cluster::start(3, 0);
    let build = || {
        LockClient::cluster(cluster.urls())
            .key_prefix("lock:")
            .ttl(TTL)
            .build()
            .unwrap()
    };
    let (a, b, watcher) = (build(), build(), build());
    let observer = watcher.election("shard").unwrap().observe().unwrap();
    assert_eq!(observer.recv_timeout(SEEN).unwrap(), None);
    let first = a.election("shard").unwrap().campaign().unwrap();
    let election = b.election("shard").unwrap();
    assert!(election.try_campaign().unwrap().is_none());
    let leader = election.leader().unwrap().unwrap();
    assert_eq!(leader.term(), first.term());
    assert!(matches!(leader.owner(), Owner::Alive(_) | Owner::Gone(_)));
    let seen = observer.recv_timeout(SEEN).unwrap().unwrap();
    assert_eq!(seen.term(), first.term());

    let waiter = spawned(move || election.campaign().unwrap());
    let began = Instant::now();
    let _ = first.resign().unwrap();
    let (second, _) = waiter.recv_timeout(SEEN).expect("the candidate never led");
    assert!(began.elapsed() < Duration::from_secs(2));
    assert!(second.term() > leader.term());
    assert!(sees(&observer, second.term()));
}

/// Candidates campaigning in their own clients, each in a thread, until their
/// client is `close`d; each win is sent on the channel (and resigned at once).
fn waiting_candidates(
    server: &RedisServer,
    name: &str,
    n: usize,
) -> (
    Vec<LockClient>,
    Vec<thread::JoinHandle<()>>,
    crossbeam_channel::Receiver<Instant>,
) {
    let clients: Vec<LockClient> = (0..n).map(|_| client(server)).collect();
    let (tx, rx) = crossbeam_channel::unbounded();
    let threads = clients
        .iter()
        .map(|c| {
            let election = c.election(name).unwrap();
            let tx = tx.clone();
            thread::spawn(move || {
                if election.campaign().is_ok() {
                    let _ = tx.send(Instant::now());
                }
            })
        })
        .collect();
    (clients, threads, rx)
}

#[test]
fn waiting_candidates_cost_redis_almost_nothing_while_one_leads() {
    const CANDIDATES: usize = 6;
    const WINDOW: Duration = Duration::from_secs(4);
    let server = RedisServer::start();
    let leader = client(&server);
    let leadership = leader.election("cost").unwrap().campaign().unwrap();
    let (candidates, threads, won) = waiting_candidates(&server, "cost", CANDIDATES);
    assert!(eventually(SEEN, || {
        listeners(&server, "cost") >= i64::try_from(CANDIDATES).unwrap()
    }));
    server.reset_stats();
    // A window to count in, not a synchronisation: nothing changes meanwhile.
    thread::sleep(WINDOW);
    let stats = server.command_stats();
    let calls = server.command_calls("evalsha");
    println!("{CANDIDATES} candidates over {WINDOW:?}: {calls} script calls; {stats:?}");
    // Each candidate tries again when the leader's TTL last seen runs out (renewed
    // every TTL / 3, so at most once in the window), and once more if its
    // subscription was confirmed just before the window; the leader renews, each
    // client refreshes its session record. A candidate polling every 200 ms
    // alone would send some 20 in the window.
    let bound = 3 * CANDIDATES as u64 + 10;
    assert!(calls <= bound, "{calls} script calls > {bound}: {stats:?}");
    // Still woken at once by a resign.
    let began = Instant::now();
    assert_eq!(leadership.resign().unwrap(), Release::Released);
    let won_at = won.recv_timeout(SEEN).expect("no candidate took over");
    assert!(
        won_at - began < Duration::from_secs(1),
        "{:?}",
        won_at - began
    );
    for c in &candidates {
        c.close();
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_waiting_candidate_rechecks_when_its_subscription_drops_with_the_release() {
    let server = RedisServer::start();
    let leader = client(&server);
    let leadership = leader.election("lossy").unwrap().campaign().unwrap();
    let old = leadership.term();
    let candidate = client(&server);
    let election = candidate.election("lossy").unwrap();
    let rx = spawned(move || election.campaign().unwrap());
    listening(&server, &released("lock:lossy"));
    // The candidate's subscription drops, and the name is freed before it is
    // back (atomically: no release message can reach it), as if the leader had
    // resigned while its message was lost.
    let began = Instant::now();
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .cmd("DEL")
        .arg("lock:lossy")
        .query(&mut server.conn())
        .unwrap();
    // The reconnection makes it look again: well before the leader's TTL.
    let (won, won_at) = rx.recv_timeout(TTL).expect("the candidate never led");
    let took = won_at - began;
    assert!(won.term() > old);
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop(leadership);
}

#[test]
fn a_waiting_candidate_polls_a_holder_that_never_publishes() {
    let server = RedisServer::start();
    // Another client's lock under the name: a bare `SET NX PX`, freed with a
    // bare `DEL` that announces nothing.
    server.set_for("lock:foreign", "someone-else", TTL);
    let c = client(&server);
    let election = c.election("foreign").unwrap();
    let rx = spawned(move || election.campaign().unwrap());
    listening(&server, &released("lock:foreign"));
    let began = Instant::now();
    server.del("lock:foreign");
    let (won, won_at) = rx.recv_timeout(TTL).expect("the candidate never led");
    assert!(
        won_at - began < Duration::from_secs(2),
        "{:?}",
        won_at - began
    );
    drop(won);
}
