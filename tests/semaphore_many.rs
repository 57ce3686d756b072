mod support;

// Several permits of the lease semaphore at once, against real `redis-server`
// processes: all or none, bad counts, Redisson's `acquire(permits)` format in
// both directions (spoken with its own scripts through raw `EVAL`), a mixed
// queue never holding more than the total, a dead or releasing holder of k
// permits handing them to a waiter for k, and the reservation that keeps later
// single-permit callers from passing that waiter.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use redlease::{Error, LockClient, LockClientBuilder, Release, Semaphore};
use support::redisson::semaphore::RedissonSemaphore;
use support::{RedisServer, eventually, stress_factor};

const NAME: &str = "jobs";
/// `NAME` with the prefix of [`builder`], its expiry set, its reservations and
/// its channel.
const FULL: &str = "lock:jobs";
const TIMEOUTS: &str = "{lock:jobs}:timeout";
const RESERVE: &str = "{lock:jobs}:reserve";
const CHANNEL: &str = "redisson_sc:{lock:jobs}";
/// Far above a pub/sub wake-up, so that a waiter served sooner than
/// [`WOKEN_WITHIN`] after a release was woken by its message.
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

fn reservations(server: &RedisServer) -> usize {
    server.query(redis::cmd("ZCARD").arg(RESERVE))
}

fn subscribers(server: &RedisServer) -> i64 {
    let (_, n): (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(CHANNEL));
    n
}

fn hex(bytes: &[u8]) -> String {
    uuid::Uuid::from_slice(bytes).unwrap().simple().to_string()
}

#[test]
fn k_free_permits_are_taken_at_once_and_k_minus_one_free_take_nothing() {
    let server = RedisServer::start();
    let (sem, other) = (semaphore(&server), semaphore(&server));
    sem.ensure_permits(5).unwrap();
    let (one, two) = (other.acquire().unwrap(), other.acquire().unwrap());
    assert!(sem.try_acquire_many(4).unwrap().is_none(), "4 of 3 free");
    assert_eq!(free(&server), 3, "nothing taken");
    assert_eq!(held(&server).len(), 2, "nothing written");
    assert_eq!(
        reservations(&server),
        0,
        "a single attempt reserves nothing"
    );
    let three = sem.try_acquire_many(3).unwrap().expect("3 of 3 free");
    assert_eq!(three.permits(), 3);
    assert_eq!(free(&server), 0);
    let members = held(&server);
    assert_eq!(members.len(), 5);
    let ids: Vec<&str> = three.permit_ids().split(',').collect();
    assert_eq!(ids.len(), 3);
    let scores: Vec<u64> = ids
        .iter()
        .map(|id| {
            let member = members.iter().find(|(m, _)| hex(m) == *id);
            member.unwrap_or_else(|| panic!("{id} is no member")).1
        })
        .collect();
    assert!(
        scores.iter().all(|s| *s == scores[0]),
        "one score: {scores:?}"
    );
    assert!(other.try_acquire().unwrap().is_none(), "all 5 are held");
    assert_eq!(three.unlock().unwrap(), Release::Released);
    assert_eq!(free(&server), 3, "all 3 given back at once");
    drop((one, two));
    assert_eq!(free(&server), 5);
    assert!(held(&server).is_empty());
}

#[test]
fn bad_permit_counts_are_invalid_at_once_and_write_nothing() {
    let server = RedisServer::start();
    let sem = semaphore(&server);
    sem.ensure_permits(3).unwrap();
    let one = sem.acquire().unwrap();
    let start = Instant::now();
    for (k, why) in [
        (0, "0 permits"),
        (4, "beyond the total"),
        (20_000, "too many"),
    ] {
        let e = sem
            .try_acquire_many_for(k, Duration::from_secs(30))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Invalid {
                    what: "permit count",
                    ..
                }
            ),
            "{why}: {e:?}"
        );
        println!("{why}: {e}");
    }
    assert!(matches!(sem.acquire_many(4), Err(Error::Invalid { .. })));
    assert!(matches!(
        sem.try_acquire_many(0),
        Err(Error::Invalid { .. })
    ));
    assert!(start.elapsed() < SLACK * 2, "no call waited");
    assert_eq!(free(&server), 2);
    assert_eq!(held(&server).len(), 1);
    assert_eq!(reservations(&server), 0);
    drop(one);
    // A total lowered below a waiter's count ends its wait with the error.
    let waiter = slow_polling(&server);
    let holder = semaphore(&server);
    let all = holder.acquire_many(3).unwrap();
    thread::scope(|s| {
        let waits = s.spawn(|| waiter.try_acquire_many_for(3, Duration::from_secs(30)));
        assert!(
            eventually(Duration::from_secs(5), || reservations(&server) == 1),
            "the waiter never reserved"
        );
        holder.set_permits(2).unwrap();
        drop(all);
        let got = waits.join().unwrap();
        assert!(matches!(got, Err(Error::Invalid { .. })), "{got:?}");
    });
    assert_eq!(reservations(&server), 0, "the reservation was withdrawn");
}

#[test]
fn a_redisson_holder_of_several_permits_and_ours_count_against_each_other() {
    let server = RedisServer::start();
    let mut redisson = RedissonSemaphore::new(&server, FULL);
    assert!(redisson.try_set_permits(4));
    let sem = semaphore(&server);
    let theirs = redisson.try_acquire_many(3, Some(30_000)).unwrap();
    assert_eq!(held(&server).len(), 3, "one member per permit");
    assert!(sem.try_acquire_many(2).unwrap().is_none(), "2 of 1 free");
    let single = sem.try_acquire().unwrap().expect("the one left");
    assert!(redisson.try_acquire_many(1, Some(30_000)).is_err());
    let theirs: Vec<&str> = theirs.iter().map(String::as_str).collect();
    assert_eq!(redisson.try_release_many(&theirs), 3);
    drop(single);
    let ours = sem.try_acquire_many(4).unwrap().expect("4 of 4 free");
    assert!(
        redisson.try_acquire_many(1, Some(30_000)).is_err(),
        "all held"
    );
    // Redisson reads our hold as its own: `release(List)` gives all of it back.
    let ids: Vec<&str> = ours.permit_ids().split(',').collect();
    assert_eq!(redisson.try_release_many(&ids), 4);
    assert_eq!(free(&server), 4);
    assert_eq!(
        ours.unlock().unwrap(),
        Release::Expired,
        "released by Redisson"
    );
    assert_eq!(free(&server), 4, "nothing counted back twice");
}

#[test]
fn a_mixed_queue_never_holds_more_than_the_total() {
    const TOTAL: i64 = 5;
    let server = RedisServer::start();
    semaphore(&server).ensure_permits(5).unwrap();
    let rounds = 12 * stress_factor();
    let in_use = AtomicI64::new(0);
    let peak = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    let work = |weight: i64| {
        let now = in_use.fetch_add(weight, Ordering::SeqCst) + weight;
        peak.fetch_max(now, Ordering::SeqCst);
        assert!(now <= TOTAL, "{now} permits in use of {TOTAL}");
        thread::sleep(Duration::from_millis(3)); // the job itself
        in_use.fetch_sub(weight, Ordering::SeqCst);
    };
    thread::scope(|s| {
        // The checker: free and held always add up to the total, and no
        // more than the total is ever held.
        let checker = s.spawn(|| {
            let mut con = server.conn();
            let mut looks = 0;
            while !done.load(Ordering::SeqCst) {
                let (count, members): (i64, i64) = redis::pipe()
                    .atomic()
                    .cmd("GET")
                    .arg(FULL)
                    .cmd("ZCARD")
                    .arg(TIMEOUTS)
                    .query(&mut con)
                    .unwrap();
                assert!(members <= TOTAL, "{members} held");
                assert_eq!(count + members, TOTAL, "free {count}, held {members}");
                looks += 1;
                thread::sleep(Duration::from_millis(1)); // leave the cores to the workers
            }
            looks
        });
        let mut workers = Vec::new();
        for weight in [1_u32, 1, 2, 3] {
            let (work, server) = (&work, &server);
            workers.push(s.spawn(move || {
                let sem = semaphore(server);
                for _ in 0..rounds {
                    if weight == 1 {
                        let permit = sem.acquire().unwrap();
                        work(1);
                        assert!(permit.unlock().unwrap().was_held());
                    } else {
                        let permits = sem.acquire_many(weight).unwrap();
                        work(i64::from(weight));
                        assert!(permits.unlock().unwrap().was_held());
                    }
                }
            }));
        }
        // A Redisson client taking 2 at a time, polling as it would.
        workers.push(s.spawn(|| {
            let mut redisson = RedissonSemaphore::new(&server, FULL);
            for _ in 0..rounds {
                let ids = loop {
                    match redisson.try_acquire_many(2, Some(30_000)) {
                        Ok(ids) => break ids,
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                };
                work(2);
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                assert_eq!(redisson.try_release_many(&ids), 2);
            }
        }));
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        let looks = checker.join().unwrap();
        assert!(looks > 0);
    });
    let peak = peak.load(Ordering::SeqCst);
    println!("peak {peak} of {TOTAL} permits in use");
    assert!((3..=TOTAL).contains(&peak), "peak {peak}");
    assert_eq!(free(&server), TOTAL);
    assert_eq!(reservations(&server), 0, "every reservation was used up");
}

#[test]
fn a_dead_holder_of_k_permits_frees_them_at_its_lease_end_for_a_waiter_for_k() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let dying = builder(&server).ttl(ttl).build().unwrap();
    let sem = dying.semaphore(NAME).unwrap();
    sem.ensure_permits(3).unwrap();
    let permits = sem.acquire_many(3).unwrap();
    // The process dies: no release, no renewal.
    std::mem::forget(permits);
    drop((sem, dying));
    let died = Instant::now();
    let waiter = semaphore(&server);
    assert!(
        waiter.try_acquire_many(3).unwrap().is_none(),
        "still leased"
    );
    let got = waiter
        .try_acquire_many_for(3, Duration::from_secs(10))
        .unwrap();
    let after = died.elapsed();
    let got = got.expect("the permits never came back");
    println!("the dead hold's permits came back after {after:?}");
    assert!(after + SLACK >= ttl, "too early: {after:?}");
    assert!(after < ttl + SLACK * 2, "came back after {after:?}");
    assert_eq!(held(&server).len(), 3, "the dead hold is gone, ours is in");
    assert_eq!(got.unlock().unwrap(), Release::Released);
}

/// Starts `acquire_many(3)` on `waiter` in another thread, waits until it
/// sleeps on the channel with its reservation written, runs `release`, and
/// asserts the waiter had its permits within [`WOKEN_WITHIN`].
fn assert_woken_by(server: &RedisServer, waiter: &Semaphore, what: &str, release: impl FnOnce()) {
    let took = thread::scope(|s| {
        let (tx, rx) = bounded(1);
        s.spawn(move || {
            let got = waiter.acquire_many(3).unwrap();
            tx.send(Instant::now()).unwrap();
            assert!(got.unlock().unwrap().was_held());
        });
        let asleep = eventually(Duration::from_secs(5), || {
            reservations(server) == 1 && subscribers(server) >= 1
        });
        assert!(asleep, "the waiter never went to sleep on {CHANNEL}");
        let released = Instant::now();
        release();
        let at = rx.recv_timeout(SLOW_MAX + SLACK).unwrap();
        at.saturating_duration_since(released)
    });
    println!("{what} to the waiter's 3 permits: {took:?}");
    assert!(
        took < WOKEN_WITHIN,
        "{what}: woken after {took:?}, by a poll"
    );
}

#[test]
fn a_release_of_k_permits_ours_or_redissons_wakes_a_waiter_for_k() {
    let server = RedisServer::start();
    let holder = semaphore(&server);
    holder.ensure_permits(4).unwrap();
    let mut redisson = RedissonSemaphore::new(&server, FULL);
    let waiter = slow_polling(&server);

    let ours = holder.acquire_many(3).unwrap();
    let theirs = redisson.try_acquire_many(1, Some(30_000)).unwrap();
    assert_woken_by(&server, &waiter, "our release of 3", || {
        assert!(ours.unlock().unwrap().was_held());
    });
    assert_eq!(redisson.try_release_many(&[&theirs[0]]), 1);
    assert_eq!(free(&server), 4);

    let theirs = redisson.try_acquire_many(3, Some(30_000)).unwrap();
    let one = holder.acquire().unwrap();
    assert_woken_by(&server, &waiter, "Redisson's release of 3", || {
        let ids: Vec<&str> = theirs.iter().map(String::as_str).collect();
        assert_eq!(redisson.try_release_many(&ids), 3);
    });
    drop(one);
    assert_eq!(free(&server), 4);
    assert_eq!(reservations(&server), 0);
}

#[test]
fn a_waiter_for_k_is_not_passed_by_later_single_permit_callers() {
    let server = RedisServer::start();
    let holder = semaphore(&server);
    holder.ensure_permits(3).unwrap();
    let one = holder.acquire().unwrap();
    let (waiter, late) = (slow_polling(&server), semaphore(&server));
    thread::scope(|s| {
        let waits = s.spawn(|| waiter.acquire_many(3).unwrap());
        assert!(
            eventually(Duration::from_secs(5), || reservations(&server) == 1),
            "the waiter never reserved"
        );
        // 2 are free, but reserved for the waiter ahead.
        assert_eq!(free(&server), 2);
        assert!(late.try_acquire().unwrap().is_none(), "passed the waiter");
        assert!(
            late.try_acquire_many(2).unwrap().is_none(),
            "passed the waiter"
        );
        let queued = s.spawn(|| late.try_acquire_for(Duration::from_secs(20)).unwrap());
        assert!(one.unlock().unwrap().was_held());
        let three = waits.join().unwrap();
        assert_eq!(three.permits(), 3);
        assert_eq!(reservations(&server), 0, "used up");
        drop(three);
        let single = queued.join().unwrap();
        assert!(single.is_some(), "the single caller came after");
    });
    // A wait that runs out withdraws its reservation: singles go on at once.
    let all = holder.acquire_many(2).unwrap();
    let gave_up = waiter
        .try_acquire_many_for(3, Duration::from_millis(300))
        .unwrap();
    assert!(gave_up.is_none());
    assert_eq!(reservations(&server), 0, "withdrawn");
    assert!(late.try_acquire().unwrap().is_some(), "the free one");
    drop(all);
}

#[test]
fn renewal_keeps_k_permits_and_a_forced_release_of_one_ends_the_hold() {
    let server = RedisServer::start();
    let client = builder(&server)
        .ttl(Duration::from_millis(1200))
        .build()
        .unwrap();
    let sem = client.semaphore(NAME).unwrap();
    sem.ensure_permits(3).unwrap();
    let inside = sem.with_permits(2, || free(&server)).unwrap();
    assert_eq!(inside, 1, "two taken while the closure ran");
    assert_eq!(free(&server), 3, "both given back after it");
    let hold = sem.acquire_many(2).unwrap();
    let other = semaphore(&server);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(
            other.try_acquire_many(2).unwrap().is_none(),
            "taken while renewed"
        );
        thread::sleep(Duration::from_millis(300));
    }
    assert!(hold.is_held());
    let scores: Vec<u64> = held(&server).into_iter().map(|(_, s)| s).collect();
    assert_eq!(scores.len(), 2);
    assert_eq!(scores[0], scores[1], "renewed together");
    assert!(scores[0] > support::redisson::now_ms(), "ahead of now");
    // One of the two is released by id: the hold is lost as a whole.
    let first = hold.permit_ids().split(',').next().unwrap().to_owned();
    assert!(other.release_by_id(&first).unwrap().was_held());
    assert!(
        hold.lost().recv_timeout(Duration::from_secs(5)).is_ok(),
        "the renewal never told the loss"
    );
    assert!(!hold.is_held());
    assert_eq!(hold.unlock().unwrap(), Release::Expired);
    assert_eq!(free(&server), 3, "and given back by the guard");
    assert!(held(&server).is_empty());
}
