mod support;

// The lease semaphore against real `redis-server` processes: permits
// shared up to N across clients, waiters woken by the release message, a dead
// holder's permit coming back at the end of its lease, renewal, Redisson's
// `RPermitExpirableSemaphore` format in both directions (spoken here with
// Redisson's own scripts through raw `EVAL`), and bad input.

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use redlease::{
    CancelToken, Error, LockClient, LockClientBuilder, LockFormat, LockOptions, Release, Renewal,
    Semaphore,
};
use support::acl;
use support::format::wrong_format;
use support::redisson::semaphore::{RedissonSemaphore, now_ms};
use support::{Masters, RedisServer, eventually};

const NAME: &str = "imports";
/// `NAME` with the prefix of [`builder`], its expiry set and its channel.
const FULL: &str = "lock:imports";
const TIMEOUTS: &str = "{lock:imports}:timeout";
const CHANNEL: &str = "redisson_sc:{lock:imports}";
/// A polling step far above any pub/sub wake-up (the first poll comes 375–500 ms
/// after an attempt), so a waiter served sooner than [`WOKEN_WITHIN`] after a
/// release was woken by the release message.
const SLOW_MIN: Duration = Duration::from_millis(500);
const SLOW_MAX: Duration = Duration::from_secs(1);
/// Room for a 200 ms stall of a loaded 2-core machine, under the first poll.
const WOKEN_WITHIN: Duration = Duration::from_millis(350);
const SLACK: Duration = Duration::from_millis(800);

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url()).key_prefix("lock:")
}

fn semaphore(server: &RedisServer) -> Semaphore {
    builder(server).build().unwrap().semaphore(NAME).unwrap()
}

fn slow_polling(server: &RedisServer) -> Semaphore {
    let client = builder(server).backoff(SLOW_MIN, SLOW_MAX).build().unwrap();
    client.semaphore(NAME).unwrap()
}

fn free(server: &RedisServer) -> i64 {
    server.query(redis::cmd("GET").arg(FULL))
}

fn held(server: &RedisServer) -> Vec<(Vec<u8>, u64)> {
    server.query(
        redis::cmd("ZRANGE")
            .arg(TIMEOUTS)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    )
}

fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let (_, n): (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
    n
}

/// Starts `acquire()` on `waiter` in another thread, waits until it sleeps on the
/// channel (two busy attempts: the first, and the one after subscribing), runs
/// `release`, and asserts the waiter had a permit within [`WOKEN_WITHIN`].
fn assert_woken_by(server: &RedisServer, waiter: &Semaphore, what: &str, release: impl FnOnce()) {
    server.reset_stats();
    let took = thread::scope(|s| {
        let (tx, rx) = bounded(1);
        s.spawn(move || {
            let permit = waiter.acquire().unwrap();
            tx.send(Instant::now()).unwrap();
            assert!(permit.unlock().unwrap().was_held());
        });
        let asleep = eventually(Duration::from_secs(5), || {
            server.command_calls("evalsha") >= 2 && subscribers(server, CHANNEL) >= 1
        });
        assert!(asleep, "the waiter never went to sleep on {CHANNEL}");
        let released = Instant::now();
        release();
        let at = rx.recv_timeout(SLOW_MAX + SLACK).unwrap();
        at.saturating_duration_since(released)
    });
    println!("{what} to the waiter's permit: {took:?}");
    assert!(
        took < WOKEN_WITHIN,
        "{what}: woken after {took:?}, by a poll"
    );
}

#[test]
fn permits_are_shared_up_to_n_across_two_clients() {
    let server = RedisServer::start();
    let (a, b) = (semaphore(&server), semaphore(&server));
    let created = a.ensure_permits(3).unwrap();
    assert_eq!((created.free(), created.held()), (3, 0));
    let one = a.try_acquire().unwrap().expect("first permit");
    let two = b.try_acquire().unwrap().expect("second permit");
    let three = a.try_acquire().unwrap().expect("third permit");
    assert!(b.try_acquire().unwrap().is_none(), "a fourth of three");
    assert!(a.try_acquire().unwrap().is_none(), "a fourth of three");
    assert_eq!(free(&server), 0);
    assert_eq!(held(&server).len(), 3);
    let ids = [one.permit_id(), two.permit_id(), three.permit_id()];
    assert!(ids.iter().all(|id| id.len() == 32), "{ids:?}");
    assert_eq!(ids[0][..16], ids[2][..16], "one client, one tag");
    assert_ne!(ids[0][..16], ids[1][..16], "two clients, two tags");
    assert_eq!(a.permits().unwrap().unwrap().held(), 3);
    assert_eq!(two.unlock().unwrap(), Release::Released);
    assert_eq!(b.available_permits().unwrap(), 1);
    let again = b.try_acquire().unwrap().expect("the permit given back");
    drop((one, three, again));
    assert_eq!(free(&server), 3, "dropped guards give their permits back");
    assert!(held(&server).is_empty());
}

#[test]
fn the_waiter_beyond_n_is_woken_by_a_release_message() {
    let server = RedisServer::start();
    let holder = semaphore(&server);
    holder.ensure_permits(2).unwrap();
    let (first, second) = (holder.acquire().unwrap(), holder.acquire().unwrap());
    let waiter = slow_polling(&server);
    assert_woken_by(&server, &waiter, "a release", || {
        assert!(first.unlock().unwrap().was_held());
    });
    assert!(second.is_held());
}

#[test]
fn a_dead_holders_permit_comes_back_when_its_lease_ends() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let dying = builder(&server).ttl(ttl).build().unwrap();
    let sem = dying.semaphore(NAME).unwrap();
    sem.ensure_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    // The process dies: no release, no renewal.
    std::mem::forget(permit);
    drop((sem, dying));
    let start = Instant::now();
    let other = semaphore(&server);
    assert!(
        other.try_acquire().unwrap().is_none(),
        "still within its lease"
    );
    let got = other.try_acquire_for(Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(got.is_some(), "the permit never came back");
    assert!(waited < ttl + SLACK * 2, "came back after {waited:?}");
    assert_eq!(
        held(&server).len(),
        1,
        "the dead permit is gone, ours is in"
    );
}

#[test]
fn renewal_keeps_a_permit_past_its_ttl() {
    let server = RedisServer::start();
    let client = builder(&server)
        .ttl(Duration::from_millis(1200))
        .build()
        .unwrap();
    let sem = client.semaphore(NAME).unwrap();
    sem.ensure_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let other = semaphore(&server);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(
            other.try_acquire().unwrap().is_none(),
            "taken while renewed"
        );
        thread::sleep(Duration::from_millis(300));
    }
    assert!(permit.is_held());
    let (_, score) = held(&server)[0].clone();
    assert!(score > now_ms(), "the lease in Redis is ahead of now");
    assert!(permit.unlock().unwrap().was_held());
}

#[test]
fn redisson_and_redlease_permits_count_against_each_other() {
    let server = RedisServer::start();
    let mut redisson = RedissonSemaphore::new(&server, FULL);
    assert!(redisson.try_set_permits(2), "Redisson creates it");
    let ours = semaphore(&server);
    assert!(ours.ensure_permits(2).is_ok(), "the same total");
    let theirs = redisson
        .try_acquire(Some(30_000))
        .expect("Redisson's permit");
    let mine = ours.try_acquire().unwrap().expect("our permit");
    assert!(ours.try_acquire().unwrap().is_none(), "Redisson's counts");
    let busy = redisson.try_acquire(Some(30_000)).unwrap_err();
    let first_end: u64 = busy
        .expect("a lease end")
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!(first_end > now_ms(), "Redisson reads our lease end");
    // Redisson gives back our permit by its id, as `release(permitId)` does.
    assert!(redisson.try_release(mine.permit_id()));
    assert_eq!(
        mine.unlock().unwrap(),
        Release::Expired,
        "released by Redisson"
    );
    assert!(
        ours.release_by_id(&theirs).unwrap().was_held(),
        "we give back Redisson's"
    );
    assert_eq!(free(&server), 2);
}

#[test]
fn a_redisson_release_wakes_our_waiter() {
    let server = RedisServer::start();
    let mut redisson = RedissonSemaphore::new(&server, FULL);
    assert!(redisson.try_set_permits(1));
    let id = redisson
        .try_acquire(None)
        .expect("Redisson's permit, no lease");
    let waiter = slow_polling(&server);
    assert!(waiter.try_acquire().unwrap().is_none());
    assert_woken_by(&server, &waiter, "Redisson's release", || {
        assert!(redisson.try_release(&id));
    });
}

#[test]
fn our_release_publishes_the_count_redissons_waiters_read() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    sem.ensure_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let mut sub = server.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(permit.unlock().unwrap().was_held());
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_payload::<i64>().unwrap(), 1, "the free count");
}

#[test]
fn an_existing_semaphore_with_another_total_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    sem.ensure_permits(3).unwrap();
    let _held = sem.acquire().unwrap();
    match sem.ensure_permits(5) {
        Err(Error::PermitsMismatch {
            key,
            existing: 3,
            requested: 5,
        }) => assert_eq!(&*key, FULL),
        other => panic!("{other:?}"),
    }
    let msg = sem.ensure_permits(5).unwrap_err().to_string();
    assert!(msg.contains('3') && msg.contains('5'), "{msg}");
    assert_eq!(free(&server), 2, "left as it was");
    assert_eq!(sem.set_permits(5).unwrap().total(), 5, "set changes it");
    assert_eq!(sem.add_permits(1).unwrap().total(), 6);
    assert_eq!(sem.available_permits().unwrap(), 5);
}

#[test]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::start();
    let client = builder(&server).build().unwrap();
    assert!(matches!(client.semaphore(""), Err(Error::Invalid { .. })));
    let sem = client.semaphore(NAME).unwrap();
    assert!(matches!(
        sem.ensure_permits(0),
        Err(Error::Config {
            option: "permits",
            ..
        })
    ));
    assert!(matches!(
        sem.release_by_id("not-hex"),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        sem.acquire_with(&LockOptions::new().fencing(true)),
        Err(Error::Config { .. })
    ));
    // A permit released twice: the second finds it gone.
    sem.ensure_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let id = permit.permit_id().to_owned();
    assert!(permit.unlock().unwrap().was_held());
    assert_eq!(sem.release_by_id(&id).unwrap(), Release::Expired);
    assert_eq!(free(&server), 1, "counted back once");
    // Other formats under the name: named, left alone.
    let token = "rl1:00112233445566778899aabbccddeeff";
    let _: () = server.query(redis::cmd("SET").arg("lock:tok").arg(token));
    let _: () = server.query(redis::cmd("RPUSH").arg("lock:list").arg("a"));
    let _: () = server.query(redis::cmd("HSET").arg("lock:hash").arg("f").arg(1));
    for (name, found) in [("tok", "a string"), ("list", "a list"), ("hash", "a hash")] {
        let other = client.semaphore(name).unwrap();
        for result in [
            other.try_acquire().map(|_| ()),
            other.ensure_permits(2).map(|_| ()),
            other.add_permits(2).map(|_| ()),
        ] {
            let f = wrong_format(result, &format!("lock:{name}"), LockFormat::Semaphore);
            assert!(f.starts_with(found), "{f}");
        }
    }
    assert_eq!(
        server.query::<String>(redis::cmd("GET").arg("lock:tok")),
        token
    );
    assert_eq!(server.query::<i64>(redis::cmd("LLEN").arg("lock:list")), 1);
    assert_eq!(
        server.query::<i64>(redis::cmd("HGET").arg("lock:hash").arg("f")),
        1
    );
}

#[test]
fn with_permit_runs_the_closure_on_a_permit_and_a_forced_release_by_id_ends_it() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    assert_eq!(
        (sem.name(), sem.key()),
        (NAME, FULL),
        "name as passed, key prefixed"
    );
    sem.ensure_permits(2).unwrap();
    let inside = sem.with_permit(|| free(&server)).unwrap();
    assert_eq!(inside, 1, "one permit taken while the closure ran");
    assert_eq!(free(&server), 2, "given back after it");
    // Another client forces the release of the permit by its id, while the
    // closure runs: the closure's result is not returned.
    let other = semaphore(&server);
    let lost = sem.with_permit(|| {
        let ids = held(&server);
        assert_eq!(ids.len(), 1);
        let id = uuid::Uuid::from_slice(&ids[0].0)
            .unwrap()
            .simple()
            .to_string();
        other.release_by_id(&id).unwrap()
    });
    match lost {
        Err(Error::LockLost { key }) => assert_eq!(&*key, FULL),
        other => panic!("{other:?}"),
    }
    assert_eq!(free(&server), 2, "counted back once");
    assert!(held(&server).is_empty());
}

#[test]
fn a_wait_ends_at_its_deadline_and_on_cancel() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    sem.ensure_permits(1).unwrap();
    let _held = sem.acquire().unwrap();
    let start = Instant::now();
    assert!(
        sem.try_acquire_for(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_millis(300) + SLACK);
    let cancel = CancelToken::new();
    let opts = LockOptions::new().cancel(cancel.clone());
    let got = thread::scope(|s| {
        let waiting = s.spawn(|| sem.acquire_with(&opts));
        thread::sleep(Duration::from_millis(100));
        cancel.cancel();
        waiting.join().unwrap()
    });
    assert!(matches!(got, Err(Error::Cancelled { .. })), "{got:?}");
}

#[test]
fn a_fixed_lease_ends_and_its_release_says_expired() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    sem.ensure_permits(1).unwrap();
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(200))
        .renewal(Renewal::None);
    let permit = sem.acquire_with(&opts).unwrap().unwrap();
    assert!(eventually(Duration::from_secs(3), || !permit.is_held()));
    assert!(eventually(Duration::from_secs(3), || {
        sem.available_permits().unwrap() == 1
    }));
    assert_eq!(permit.unlock().unwrap(), Release::Expired);
    assert_eq!(free(&server), 1);
}

#[test]
fn redlock_refuses_a_semaphore() {
    let masters = Masters::start(3);
    let client = LockClient::redlock(masters.urls()).build().unwrap();
    assert!(matches!(
        client.semaphore(NAME),
        Err(Error::Unsupported {
            what: "a semaphore",
            by: "redlock"
        })
    ));
}

#[test]
fn a_user_with_the_readmes_acl_rule_runs_a_semaphore() {
    let server = RedisServer::start();
    // The guide's lock rule, then what a semaphore adds.
    let mut rule = acl::lock_rule(&server);
    rule.push(acl::SEMAPHORE_RULE);
    acl::set_user(&server, "worker", "pw", &rule);
    let url = format!("redis://worker:pw@127.0.0.1:{}/", server.port());
    let worker = LockClient::builder(url.as_str())
        .key_prefix("lock:")
        .backoff(SLOW_MIN, SLOW_MAX)
        .build()
        .unwrap()
        .semaphore(NAME)
        .unwrap();
    assert_eq!(worker.ensure_permits(1).unwrap().total(), 1);
    let permit = worker.acquire().unwrap();
    assert!(worker.try_acquire().unwrap().is_none());
    assert_eq!(worker.available_permits().unwrap(), 0);
    // The user's waiter is subscribed to the channel and woken by a release.
    assert_woken_by(&server, &worker, "a release under the ACL", move || {
        assert!(permit.unlock().unwrap().was_held());
    });
    assert_eq!(worker.add_permits(1).unwrap().total(), 2);
    // Several at once, and a wait for them that runs out (a reservation
    // written, then withdrawn).
    let both = worker.acquire_many(2).unwrap();
    assert!(
        worker
            .try_acquire_many_for(2, Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    assert!(both.unlock().unwrap().was_held());
    let log = acl::refusals(&server);
    assert!(log.is_empty(), "refused: {log:?}");
}

#[cfg(feature = "cluster")]
#[test]
fn a_semaphore_on_a_cluster_lives_in_its_names_slot_and_wakes_its_waiters() {
    use support::cluster::Cluster;
    let cluster = Cluster::start(3, 0);
    let client = |backoff: bool| {
        let b = LockClient::cluster(cluster.urls()).key_prefix("lock:");
        let b = if backoff {
            b.backoff(SLOW_MIN, SLOW_MAX)
        } else {
            b
        };
        b.build().unwrap()
    };
    let (a, b) = (client(false), client(true));
    for name in ["imports", "exports", "user:{7}:jobs"] {
        let full = format!("lock:{name}");
        let sem = a.semaphore(name).unwrap();
        sem.ensure_permits(2).unwrap();
        let (one, two) = (sem.acquire().unwrap(), sem.acquire().unwrap());
        let waiter = b.semaphore(name).unwrap();
        assert!(
            waiter.try_acquire().unwrap().is_none(),
            "{name}: a third of two"
        );
        let owner = &cluster.nodes[cluster.owner(cluster.slot(&full))];
        let timeouts = if name.contains('{') {
            format!("{full}:timeout")
        } else {
            format!("{{{full}}}:timeout")
        };
        let held: i64 = owner.query(redis::cmd("ZCARD").arg(&timeouts));
        assert_eq!(held, 2, "{name}: both permits on the slot's master");
        let channel = if name.contains('{') {
            format!("redisson_sc:{full}")
        } else {
            format!("redisson_sc:{{{full}}}")
        };
        let wakeups = b.metrics().wakeups;
        owner.reset_stats();
        thread::scope(|s| {
            let got = s.spawn(|| waiter.try_acquire_for(Duration::from_secs(10)));
            // Asleep: two busy attempts (the first, and the one after subscribing)
            // and, with sharded pub/sub (Redis 7), listening on the slot's master.
            let listening = eventually(Duration::from_secs(5), || {
                let (_, n): (String, i64) =
                    owner.query(redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel));
                n >= 1 && owner.command_calls("evalsha") >= 2
            });
            assert!(listening, "{name}: nobody listens on {channel}");
            assert!(one.unlock().unwrap().was_held());
            let permit = got
                .join()
                .unwrap()
                .unwrap()
                .expect("a permit after the release");
            assert!(permit.unlock().unwrap().was_held());
        });
        assert!(
            b.metrics().wakeups > wakeups,
            "{name}: not woken by a message"
        );
        drop(two);
        assert_eq!(sem.available_permits().unwrap(), 2, "{name}");
    }
}
