mod support;

// The fair lock against real `redis-server` processes: strict
// arrival order across two clients, a Redisson waiter (Redisson's own scripts
// through raw `EVAL`) in the same queue woken by and waking ours, a dead
// waiter's entry delaying the next waiter by a bounded time only, and bad
// input.

use std::sync::Arc;

use parking_lot::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, FairLock, LockClient, LockFormat, Release};
use support::acl;
use support::fair_queue::{Turns, queue_ours, queue_redisson};
use support::format::wrong_format;
use support::redisson::fair::{RedissonFair, now_ms, prefix_name};
use support::{Masters, RedisServer, eventually};

const NAME: &str = "job";
/// `NAME` with the prefix of [`fair`].
const FULL: &str = "lock:job";
/// Bound on any one wait of these tests: far above every expected delay.
const BOUND: Duration = Duration::from_secs(20);

fn fair(server: &RedisServer) -> FairLock {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap()
        .fair_lock(NAME)
        .unwrap()
}

fn queue(server: &RedisServer) -> Vec<String> {
    server.query(
        redis::cmd("LRANGE")
            .arg(prefix_name("redisson_lock_queue", FULL))
            .arg(0)
            .arg(-1),
    )
}

/// Starts a thread that takes `lock` and records `id` in `order` once it holds
/// it, then waits until its entry is in the queue (it arrived).
fn queue_up(
    server: &RedisServer,
    lock: &FairLock,
    id: usize,
    order: &Arc<Mutex<Vec<usize>>>,
) -> thread::JoinHandle<()> {
    let before = queue(server).len();
    let (lock, order) = (lock.clone(), Arc::clone(order));
    let h = thread::spawn(move || {
        let guard = lock.try_lock_for(BOUND).unwrap().expect("its turn in time");
        order.lock().push(id);
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    });
    assert!(
        eventually(BOUND, || queue(server).len() == before + 1),
        "waiter {id} queued"
    );
    h
}

#[test]
fn waiters_of_two_clients_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let (a, b) = (fair(&server), fair(&server));
    let held = a.try_lock().unwrap().expect("free");
    let owner: Vec<String> = server.query(redis::cmd("HKEYS").arg(FULL));
    assert_eq!(owner.len(), 1, "the lock hash has one owner field");
    assert!(
        b.try_lock().unwrap().is_none(),
        "held: try_lock fails at once"
    );
    assert!(queue(&server).is_empty(), "try_lock never queues");
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..4)
        .map(|i| queue_up(&server, if i % 2 == 0 { &b } else { &a }, i, &order))
        .collect();
    assert_eq!(a.queue_len().unwrap(), 4);
    let zset: u64 =
        server.query(redis::cmd("ZCARD").arg(prefix_name("redisson_lock_timeout", FULL)));
    assert_eq!(zset, 4, "one deadline per waiter");
    assert_eq!(held.unlock().unwrap(), Release::Released);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock(), vec![0, 1, 2, 3]);
    assert!(queue(&server).is_empty());
}

#[test]
fn a_redisson_waiter_queues_with_ours_and_they_wake_each_other() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let held = lock.try_lock().unwrap().expect("free");
    let mut java = RedissonFair::new(&server);
    let mut listen = server.conn();
    let mut sub = listen.as_pubsub();
    sub.subscribe(java.channel(FULL)).unwrap();
    sub.set_read_timeout(Some(BOUND)).unwrap();
    assert!(java.attempt(FULL).is_some(), "held: Redisson queues");
    let order = Arc::new(Mutex::new(Vec::new()));
    let ours = queue_up(&server, &lock, 2, &order);
    assert_eq!(queue(&server)[0], java.owner, "Redisson arrived first");
    assert_eq!(held.unlock().unwrap(), Release::Released);
    // Our release wakes the head, Redisson's waiter, on its own channel.
    let msg = sub.get_message().expect("the head's wake-up");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    assert_eq!(java.attempt(FULL), None, "its turn: Redisson takes it");
    order.lock().push(1);
    assert_eq!(java.unlock(FULL), Some(1));
    // Its unlock wakes ours, the new head.
    ours.join().unwrap();
    assert_eq!(*order.lock(), vec![1, 2]);
}

/// What a redlease waiter that died just now, with nobody ahead of it, leaves:
/// its entry at the tail of the queue, with the deadline of its last attempt
/// as its score and as its own deadline.
fn leave_dead_entry(server: &RedisServer, dead: &str) {
    let timeouts = prefix_name("redisson_lock_timeout", FULL);
    let due = now_ms() + 4_000;
    server.query::<()>(
        redis::cmd("RPUSH")
            .arg(prefix_name("redisson_lock_queue", FULL))
            .arg(dead),
    );
    server.query::<()>(redis::cmd("ZADD").arg(&timeouts).arg(due).arg(dead));
    server.query::<()>(
        redis::cmd("ZADD")
            .arg(format!("{timeouts}:redlease"))
            .arg(due)
            .arg(dead),
    );
}

#[test]
fn a_dead_waiter_delays_the_next_by_a_bounded_time_only() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let held = lock.try_lock().unwrap().expect("free");
    // A redlease waiter that died just now, at the head.
    let dead = "00000000-0000-4000-8000-000000000000:7";
    leave_dead_entry(&server, dead);
    let other = fair(&server);
    let took = Arc::new(Mutex::new(None));
    let (o, t) = (other.clone(), Arc::clone(&took));
    let waiter = thread::spawn(move || {
        let g = o.try_lock_for(BOUND).unwrap().expect("in time");
        *t.lock() = Some(Instant::now());
        drop(g);
    });
    assert!(
        eventually(BOUND, || queue(&server).len() == 2),
        "queued behind the dead one"
    );
    let released = Instant::now();
    assert_eq!(held.unlock().unwrap(), Release::Released);
    waiter.join().unwrap();
    let delay = took.lock().unwrap() - released;
    assert!(
        delay <= Duration::from_secs(6),
        "the dead waiter held it {delay:?}"
    );
    eprintln!("FIGURE next waiter took it {delay:?} after the release (dead head before it)");
    assert!(!queue(&server).contains(&dead.to_owned()), "dropped");
}

/// How long each waiter of a mixed queue holds the lock: shorter than a
/// redlease waiter's poll, so a Redisson holder's release comes before it.
const SECTION: Duration = Duration::from_millis(100);

#[test]
fn a_queue_of_redlease_and_redisson_waiters_in_turn_keeps_arrival_order() {
    let server = RedisServer::start();
    let mut holder = RedissonFair::new(&server);
    assert_eq!(
        holder.attempt(FULL),
        None,
        "free: the Redisson holder takes it"
    );
    let turns = Turns::default();
    // Six waiters, ours (each a client of its own, as processes would be) and
    // Redisson's in turn, each queued before the next
    // arrives; each Redisson acquisition lowers the deadlines queued behind it
    // by its thread wait time.
    let waiters: Vec<_> = (0..6)
        .map(|id| {
            if id % 2 == 0 {
                queue_ours(&server, FULL, &fair(&server), id, SECTION, &turns, BOUND)
            } else {
                queue_redisson(&server, FULL, id, SECTION, &turns, BOUND)
            }
        })
        .collect();
    let released = Instant::now();
    assert_eq!(holder.unlock(FULL), Some(1));
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(turns.order(), vec![0, 1, 2, 3, 4, 5], "arrival order");
    let (gap, who) = turns.worst_gap(released);
    eprintln!("FIGURE mixed queue of 6: longest release-to-turn gap {gap:?} (waiter {who})");
    assert!(
        gap <= Duration::from_secs(6),
        "waiter {who} woken after {gap:?}"
    );
    assert!(queue(&server).is_empty());
}

#[test]
fn a_dead_redisson_waiter_ahead_of_ours_delays_it_to_its_deadline_only() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let short = redlease::LockOptions::default().ttl(Duration::from_secs(1));
    let held = lock.lock_with(&short).unwrap().expect("free");
    // A Redisson `tryLock(3 s)` that queued and died: its entry is due 3 s
    // after the lock's PTTL.
    let mut java = RedissonFair::new(&server);
    let wait_ms = 3_000;
    let pttl = java.attempt_waiting(FULL, wait_ms).expect("held: queued");
    let due = Instant::now() + Duration::from_millis(u64::try_from(pttl).unwrap() + wait_ms);
    drop(java); // no `acquireFailed`: it died
    let turns = Turns::default();
    let ours = queue_ours(&server, FULL, &fair(&server), 1, SECTION, &turns, BOUND);
    assert_eq!(held.unlock().unwrap(), Release::Released);
    ours.join().unwrap();
    let late = turns.all()[0].took.saturating_duration_since(due);
    eprintln!("FIGURE ours took it {late:?} after the dead Redisson entry was due");
    assert!(
        late <= Duration::from_secs(2),
        "held up {late:?} past its deadline"
    );
    assert!(queue(&server).is_empty());
}

#[test]
fn try_lock_until_gives_up_at_its_deadline_and_takes_the_lock_released_before_it() {
    let server = RedisServer::start();
    let (a, b) = (fair(&server), fair(&server));
    assert_eq!(
        (b.name(), b.key()),
        (NAME, FULL),
        "name as passed, key prefixed"
    );
    let held = a.try_lock().unwrap().expect("free");
    let deadline = Instant::now() + Duration::from_millis(300);
    assert!(b.try_lock_until(deadline).unwrap().is_none(), "held");
    assert!(Instant::now() >= deadline, "waited until its deadline");
    assert!(
        queue(&server).is_empty(),
        "it left the queue when it gave up"
    );
    let (b2, deadline) = (b.clone(), Instant::now() + BOUND);
    let waiter = thread::spawn(move || {
        let guard = b2
            .try_lock_until(deadline)
            .unwrap()
            .expect("released in time");
        let at = Instant::now();
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        at
    });
    assert!(eventually(BOUND, || queue(&server).len() == 1), "queued");
    let released = Instant::now();
    assert_eq!(held.unlock().unwrap(), Release::Released);
    assert!(
        waiter.join().unwrap() >= released,
        "took it after the release"
    );
    assert!(queue(&server).is_empty());
}

#[test]
fn with_lock_runs_the_closure_under_the_lock_and_releases_it() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let out = lock
        .with_lock(|| server.query::<u64>(redis::cmd("EXISTS").arg(FULL)))
        .unwrap();
    assert_eq!(out, 1, "held while the closure ran");
    let exists: u64 = server.query(redis::cmd("EXISTS").arg(FULL));
    assert_eq!(exists, 0, "released after it");
    // A lock lost while the closure ran: its result is not returned.
    let lost = lock.with_lock(|| server.query::<()>(redis::cmd("DEL").arg(FULL)));
    match lost {
        Err(Error::LockLost { key }) => assert_eq!(&*key, FULL),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_format_under_the_name_is_a_typed_error_and_left_alone() {
    let server = RedisServer::start();
    let lock = fair(&server);
    server.query::<()>(redis::cmd("SET").arg(FULL).arg("rl1:someone"));
    let found = wrong_format(lock.try_lock(), FULL, LockFormat::Fair);
    assert!(found.contains("string"), "{found}");
    let v: String = server.query(redis::cmd("GET").arg(FULL));
    assert_eq!(v, "rl1:someone", "nothing overwritten");
    server.query::<()>(redis::cmd("DEL").arg(FULL));
    let q = prefix_name("redisson_lock_queue", FULL);
    server.query::<()>(redis::cmd("SET").arg(&q).arg("x"));
    // The queue holds it; the error names the lock's key.
    let found = wrong_format(
        lock.try_lock_for(Duration::from_millis(200)),
        FULL,
        LockFormat::Fair,
    );
    assert!(found.contains("string"), "{found}");
    let v: String = server.query(redis::cmd("GET").arg(&q));
    assert_eq!(v, "x");
    let exists: u64 = server.query(redis::cmd("EXISTS").arg(FULL));
    assert_eq!(exists, 0, "no lock taken");
}

#[test]
fn redlock_refuses_a_fair_lock_and_options_it_has_none_of() {
    let masters = Masters::start(3);
    let client = LockClient::redlock(masters.urls()).build().unwrap();
    assert!(matches!(
        client.fair_lock(NAME),
        Err(Error::Unsupported {
            what: "a fair lock",
            by: "redlock"
        })
    ));
    let server = RedisServer::start();
    let lock = fair(&server);
    let fenced = redlease::LockOptions::default().fencing(true);
    assert!(matches!(lock.lock_with(&fenced), Err(Error::Config { .. })));
    assert!(matches!(
        LockClient::builder(server.url())
            .build()
            .unwrap()
            .fair_lock(""),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn a_user_with_exactly_the_documented_rule_queues_and_is_woken() {
    let server = RedisServer::start();
    // The guide's lock rule, and its fair lock additions.
    let mut rule = acl::lock_rule(&server);
    rule.push(acl::FAIR_RULE);
    acl::set_user(&server, "fair", "pw", &rule);
    let url = format!("redis://fair:pw@127.0.0.1:{}/", server.port());
    let lock = |url: &str| {
        LockClient::builder(url)
            .key_prefix("lock:")
            .build()
            .unwrap()
            .fair_lock(NAME)
            .unwrap()
    };
    let (a, b) = (lock(&url), lock(&url));
    let held = a.lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiter = queue_up(&server, &b, 1, &order);
    let own: Vec<String> = server.query(
        redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("redisson_lock__channel:{lock:job}:*"),
    );
    assert!(
        eventually(BOUND, || {
            let own: Vec<String> = server.query(
                redis::cmd("PUBSUB")
                    .arg("CHANNELS")
                    .arg("redisson_lock__channel:{lock:job}:*"),
            );
            own.len() == 1
        }),
        "the waiter listens on its own channel: {own:?}"
    );
    let quitter = lock(&url);
    assert!(
        quitter
            .try_lock_for(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "behind the waiter: gives up and leaves"
    );
    assert_eq!(queue(&server).len(), 1);
    assert!(held.unlock().unwrap().was_held());
    waiter.join().unwrap();
    assert_eq!(*order.lock(), vec![1]);
    let refusals = acl::refusals(&server);
    assert!(refusals.is_empty(), "nothing refused: {refusals:?}");
}

#[test]
fn a_live_redlease_waiter_drops_a_dead_head_and_wakes_the_redisson_one_behind_it() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let held = lock.try_lock().unwrap().expect("free");
    let dead = "00000000-0000-4000-8000-000000000000:9";
    leave_dead_entry(&server, dead);
    let mut java = RedissonFair::new(&server);
    let mut listen = server.conn();
    let mut sub = listen.as_pubsub();
    sub.subscribe(java.channel(FULL)).unwrap();
    sub.set_read_timeout(Some(BOUND)).unwrap();
    assert!(java.attempt(FULL).is_some(), "queued behind the dead one");
    let order = Arc::new(Mutex::new(Vec::new()));
    let ours = queue_up(&server, &fair(&server), 2, &order);
    let released = Instant::now();
    assert!(held.unlock().unwrap().was_held());
    let msg = sub.get_message().expect("woken by our waiter");
    let delay = released.elapsed();
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    assert!(delay <= Duration::from_secs(6), "woken after {delay:?}");
    eprintln!("FIGURE Redisson head woken {delay:?} after the release (dead head before it)");
    assert_eq!(java.attempt(FULL), None, "its turn");
    order.lock().push(1);
    assert_eq!(java.unlock(FULL), Some(1));
    ours.join().unwrap();
    assert_eq!(*order.lock(), vec![1, 2]);
}

#[test]
fn a_held_fair_lock_is_renewed_past_its_ttl_and_a_thread_may_lock_again() {
    let server = RedisServer::start();
    let lock = fair(&server);
    let opts = redlease::LockOptions::default().ttl(Duration::from_secs(1));
    let guard = lock.lock_with(&opts).unwrap().expect("free");
    let again = lock.try_lock().unwrap().expect("this thread locks again");
    let count: i64 = server.query(redis::cmd("HGET").arg(FULL).arg(guard_owner(&server)));
    assert_eq!(count, 2, "one hash field counting both holds");
    drop(again);
    // Three TTLs pass: only the renewal thread keeps the key.
    thread::sleep(Duration::from_secs(3));
    assert!(guard.is_held());
    let pttl: i64 = server.query(redis::cmd("PTTL").arg(FULL));
    assert!(pttl > 0, "renewed: {pttl}");
    assert!(guard.unlock().unwrap().was_held());
    let exists: u64 = server.query(redis::cmd("EXISTS").arg(FULL));
    assert_eq!(exists, 0);
}

fn guard_owner(server: &RedisServer) -> String {
    let fields: Vec<String> = server.query(redis::cmd("HKEYS").arg(FULL));
    assert_eq!(fields.len(), 1, "{fields:?}");
    fields[0].clone()
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_the_next_goes_on() {
    let server = RedisServer::start();
    let (a, b) = (fair(&server), fair(&server));
    let held = a.try_lock().unwrap().expect("free");
    let quitter = {
        let b = b.clone();
        thread::spawn(move || b.try_lock_for(Duration::from_millis(1500)).unwrap())
    };
    assert!(eventually(BOUND, || queue(&server).len() == 1), "queued");
    let order = Arc::new(Mutex::new(Vec::new()));
    let next = queue_up(&server, &a, 1, &order);
    assert!(quitter.join().unwrap().is_none(), "not in time");
    assert_eq!(queue(&server).len(), 1, "its entry left with it");
    let released = Instant::now();
    assert!(held.unlock().unwrap().was_held());
    next.join().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken, not held up by the quitter's entry"
    );
    assert_eq!(*order.lock(), vec![1]);
}

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_keeps_the_queue_on_the_names_slot_and_wakes_the_head() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let lock = || cluster.client().fair_lock(NAME).unwrap();
    let (a, b) = (lock(), lock());
    let owner = &cluster.nodes[cluster.owner(cluster.slot(FULL))];
    let held = a.lock().unwrap();
    let waiter = thread::spawn(move || {
        let g = b.try_lock_for(BOUND).unwrap().expect("its turn in time");
        let at = Instant::now();
        assert!(g.unlock().unwrap().was_held());
        at
    });
    let queue_key = prefix_name("redisson_lock_queue", FULL);
    assert!(
        eventually(BOUND, || owner
            .query::<i64>(redis::cmd("LLEN").arg(&queue_key))
            == 1),
        "the queue sits on the name's node"
    );
    let released = Instant::now();
    assert!(held.unlock().unwrap().was_held());
    let took = waiter.join().unwrap() - released;
    assert!(took < Duration::from_secs(5), "woken after {took:?}");
    let exists: i64 = owner.query(redis::cmd("EXISTS").arg(FULL));
    assert_eq!(exists, 0);
}
