mod support;

// The reentrant scheme against real `redis-server` processes: nested holds,
// Redisson's wire format in both directions (spoken here with Redisson's own scripts
// through raw `EVAL`), mutual exclusion, the token scheme on the same key, renewal and
// loss, fencing, cancellation, and replica confirmation with `WAIT` on a real replica.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use redlease::{
    CancelToken, Error, LockClient, LockClientBuilder, LockOptions, LossReason, Release, Renewal,
    Scheme,
};
use support::counter::increment;
use support::info::master_and_replica;
use support::redisson::rlock::Redisson;
use support::{RedisServer, eventually, stress_factor};

const KEY: &str = "job";
/// `KEY` with the prefix of [`builder`], and Redisson's unlock channel for it.
const LOCK_KEY: &str = "lock:job";
const CHANNEL: &str = "redisson_lock__channel:{lock:job}";
/// A polling step far above any pub/sub wake-up: the first poll comes 375–500 ms
/// after an attempt (the top quarter of the step), so a waiter that gets the lock
/// sooner than [`WOKEN_WITHIN`] after a release was woken by the release message.
const SLOW_MIN: Duration = Duration::from_millis(500);
const SLOW_MAX: Duration = Duration::from_secs(1);
/// A wake-up by message takes milliseconds; this leaves room for a 200 ms stall of a
/// loaded 2-core machine and stays under the first poll.
const WOKEN_WITHIN: Duration = Duration::from_millis(350);
/// Slack on top of a bounded wait, for the same loaded machine.
const SLACK: Duration = Duration::from_millis(800);

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .scheme(Scheme::Reentrant)
}

fn client(server: &RedisServer) -> LockClient {
    builder(server).build().unwrap()
}

/// A client whose polling could never explain a wake-up within [`WOKEN_WITHIN`].
fn slow_polling(server: &RedisServer) -> LockClient {
    builder(server).backoff(SLOW_MIN, SLOW_MAX).build().unwrap()
}

/// The lock hash: `(owner field, hold count)` pairs.
fn holds(server: &RedisServer, key: &str) -> Vec<(String, i64)> {
    server.query(redis::cmd("HGETALL").arg(key))
}

fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let (_, n): (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
    n
}

/// Waits until a waiter that started after `reset_stats` has been told "busy" twice
/// (its first attempt, and the one right after its channel was subscribed) and
/// `channel` has a subscriber: it is now asleep until a release message, or its next
/// poll, at least 375 ms after its last attempt.
fn until_asleep(server: &RedisServer, channel: &str) {
    let asleep = eventually(Duration::from_secs(5), || {
        server.command_calls("evalsha") >= 2 && subscribers(server, channel) >= 1
    });
    assert!(asleep, "the waiter never went to sleep on {channel}");
}

/// Starts `lock(KEY)` on `waiter` (a slow-polling client) in another thread, waits
/// until it is asleep, runs `release` and asserts that the waiter had the lock
/// within [`WOKEN_WITHIN`], woken by the release message: no poll could explain it.
fn assert_woken_by(server: &RedisServer, waiter: &LockClient, what: &str, release: impl FnOnce()) {
    let wakeups = waiter.metrics().wakeups;
    server.reset_stats();
    let took = thread::scope(|s| {
        let (tx, rx) = bounded(1);
        s.spawn(move || {
            let guard = waiter.lock(KEY).unwrap();
            tx.send(Instant::now()).unwrap();
            assert!(guard.unlock().unwrap().was_held());
        });
        until_asleep(server, CHANNEL);
        let released = Instant::now();
        release();
        let at = rx.recv_timeout(SLOW_MAX + SLACK).unwrap();
        at.saturating_duration_since(released)
    });
    println!("{what} to the waiter's lock: {took:?}");
    assert!(
        took < WOKEN_WITHIN,
        "{what}: woken after {took:?}, by a poll"
    );
    assert_eq!(waiter.metrics().wakeups, wakeups + 1, "{what}: no message");
}

#[test]
fn nested_locks_release_at_the_outermost_unlock_whose_message_wakes_a_waiter() {
    let server = RedisServer::start();
    let holder = builder(&server)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let guards: Vec<_> = (0..3).map(|_| holder.lock(KEY).unwrap()).collect();
    let field = match holds(&server, LOCK_KEY).as_slice() {
        [(field, 3)] => field.clone(),
        other => panic!("three holds of one owner expected: {other:?}"),
    };
    let mut guards = guards.into_iter();
    let outer = guards.next().unwrap();
    for inner in guards {
        assert_eq!(inner.unlock().unwrap(), Release::Released);
    }
    assert_eq!(holds(&server, LOCK_KEY), [(field, 1)]);
    assert!(outer.is_held());

    // Another thread of the same client is another owner: it waits, and times out.
    let other = thread::scope(|s| {
        s.spawn(|| holder.try_lock_for(KEY, Duration::from_millis(300)))
            .join()
            .unwrap()
    });
    assert!(other.unwrap().is_none(), "another thread got a held lock");

    let waiter = slow_polling(&server);
    assert_woken_by(&server, &waiter, "the outermost unlock", || {
        assert_eq!(outer.unlock().unwrap(), Release::Released);
    });
    assert!(!server.exists(LOCK_KEY));
}

#[test]
fn a_redisson_owner_makes_redlease_wait_and_its_unlock_wakes_the_waiter() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    assert_eq!(redisson.try_lock(LOCK_KEY), None, "Redisson acquires");
    let waiter = slow_polling(&server);
    let busy = waiter
        .try_lock_for(KEY, Duration::from_millis(300))
        .unwrap();
    assert!(busy.is_none(), "redlease took a lock Redisson holds");
    assert_eq!(holds(&server, LOCK_KEY), [(redisson.owner.clone(), 1)]);

    assert_woken_by(&server, &waiter, "Redisson's unlock", || {
        assert_eq!(redisson.unlock(LOCK_KEY), Some(1));
    });
}

#[test]
fn redlease_holds_exclude_redisson_and_its_release_publishes_redissons_message() {
    let server = RedisServer::start();
    let lc = client(&server);
    let mut redisson = Redisson::new(&server);
    for (key, lock_key, channel) in [
        (KEY, LOCK_KEY, CHANNEL),
        // A key with a hash tag is not wrapped again, as Redisson's `prefixName`.
        ("{job}", "lock:{job}", "redisson_lock__channel:lock:{job}"),
    ] {
        assert_eq!(support::redisson::rlock::channel(lock_key), channel);
        let mut sub = server.conn();
        sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut pubsub = sub.as_pubsub();
        pubsub.subscribe(channel).unwrap();

        let guard = lc.lock(key).unwrap();
        let nested = lc.lock(key).unwrap();
        let left = redisson.try_lock(lock_key);
        assert!(
            left.is_some_and(|ms| ms > 0),
            "Redisson took our lock: {left:?}"
        );
        let fields = holds(&server, lock_key);
        assert!(
            matches!(fields.as_slice(), [(owner, 2)] if owner.split_once(':').is_some_and(
                |(id, thread)| uuid::Uuid::parse_str(id).is_ok() && thread.parse::<u64>().is_ok()
            )),
            "not Redisson's `<uuid>:<thread id>` layout: {fields:?}"
        );
        assert_eq!(nested.unlock().unwrap(), Release::Released);
        assert_eq!(guard.unlock().unwrap(), Release::Released);

        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), channel);
        assert_eq!(msg.get_payload::<String>().unwrap(), "0");
        // One message, for the outermost unlock only.
        pubsub
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(pubsub.get_message().is_err(), "a nested unlock published");
        assert_eq!(
            redisson.try_lock(lock_key),
            None,
            "Redisson acquires after us"
        );
        assert_eq!(redisson.unlock(lock_key), Some(1));
    }
}

#[test]
fn eight_threads_mixing_nested_and_plain_locks_lose_no_update() {
    let server = RedisServer::start();
    let clients = [client(&server), client(&server)];
    let rounds = 20 * stress_factor();
    let barrier = Barrier::new(8);
    thread::scope(|s| {
        for t in 0..8 {
            let (lc, barrier, server) = (&clients[t % 2], &barrier, &server);
            s.spawn(move || {
                let mut con = server.conn();
                barrier.wait();
                for _ in 0..rounds {
                    let outer = lc.lock(KEY).unwrap();
                    if t < 4 {
                        let inner = lc.lock(KEY).unwrap();
                        increment(&mut con);
                        assert!(inner.unlock().unwrap().was_held());
                    }
                    // Still under the outer hold after an inner unlock.
                    increment(&mut con);
                    assert!(outer.unlock().unwrap().was_held());
                }
            });
        }
    });
    let total: u64 = server.query(redis::cmd("GET").arg("counter"));
    assert_eq!(total, 12 * rounds as u64, "an update was lost");
    assert!(!server.exists(LOCK_KEY));
}

#[test]
fn token_and_reentrant_locks_on_one_key_exclude_each_other_in_both_orders() {
    let server = RedisServer::start();
    let reentrant = client(&server);
    let token = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    for (first, second, kind) in [(&token, &reentrant, "string"), (&reentrant, &token, "hash")] {
        let held = first.lock(KEY).unwrap();
        let before: redis::Value = server.query(redis::cmd("DUMP").arg(LOCK_KEY));
        // One attempt: busy, not an error (no WRONGTYPE), and nothing overwritten.
        assert!(second.try_lock(KEY).unwrap().is_none());
        let attempts = second.metrics().attempts;
        thread::scope(|s| {
            let (tx, rx) = bounded(1);
            s.spawn(move || {
                let got = second.try_lock_for(KEY, Duration::from_secs(10)).unwrap();
                tx.send(got.map(|g| g.unlock().unwrap())).unwrap();
            });
            // It keeps trying while the first holds, and keeps being told "busy".
            let tried = eventually(Duration::from_secs(5), || {
                second.metrics().attempts >= attempts + 3
            });
            assert!(tried && rx.is_empty(), "the second did not wait");
            let after: redis::Value = server.query(redis::cmd("DUMP").arg(LOCK_KEY));
            assert_eq!(before, after, "the first holder's value changed");
            let t: String = server.query(redis::cmd("TYPE").arg(LOCK_KEY));
            assert_eq!(t, kind);
            assert!(held.unlock().unwrap().was_held());
            let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(got, Some(Release::Released), "the second never got it");
        });
    }
}

#[test]
fn renewal_keeps_a_nested_lock_over_several_ttls_and_a_deleted_key_is_lost() {
    let server = RedisServer::start();
    let lc = builder(&server)
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let outer = lc.lock(KEY).unwrap();
    let inner = lc.lock(KEY).unwrap();
    let start = Instant::now();
    // Sampled over 3.5 TTLs: nothing to wait for, only a state that must last.
    while start.elapsed() < Duration::from_millis(3500) {
        assert!(outer.is_held() && inner.is_held(), "lost while renewed");
        assert!(server.pttl(LOCK_KEY) > 0, "the key expired while renewed");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(matches!(holds(&server, LOCK_KEY).as_slice(), [(_, 2)]));
    server.del(LOCK_KEY);
    for guard in [&outer, &inner] {
        let msg = guard.lost().recv_timeout(Duration::from_secs(3)).unwrap();
        assert_eq!(msg.reason, LossReason::Expired);
        assert!(!guard.is_held());
    }
    assert_eq!(inner.unlock().unwrap(), Release::Expired);
    assert_eq!(outer.unlock().unwrap(), Release::Expired);
}

#[test]
fn a_nested_hold_with_a_shorter_ttl_never_shortens_the_key() {
    let server = RedisServer::start();
    let lc = builder(&server)
        .ttl(Duration::from_secs(20))
        .renewal(Renewal::None)
        .build()
        .unwrap();
    let outer = lc.lock(KEY).unwrap();
    let short = LockOptions::new().ttl(Duration::from_secs(1));
    let inner = lc.lock_with(KEY, &short).unwrap().unwrap();
    assert!(
        server.pttl(LOCK_KEY) > 15_000,
        "the nested hold shortened the key"
    );
    inner.extend(Duration::from_secs(1)).unwrap();
    assert!(
        server.pttl(LOCK_KEY) > 15_000,
        "the nested extend shortened the key"
    );
    assert!(inner.unlock().unwrap().was_held());
    assert!(
        server.pttl(LOCK_KEY) > 15_000,
        "the nested unlock shortened the key"
    );
    // Alone, a hold sets its TTL as asked, as Redisson's renewal does.
    outer.extend(Duration::from_secs(2)).unwrap();
    assert!(server.pttl(LOCK_KEY) <= 2_000);
    assert!(outer.unlock().unwrap().was_held());
}

#[test]
fn a_guard_moved_to_another_thread_unlocks_its_own_hold() {
    let server = RedisServer::start();
    let lc = client(&server);
    let outer = lc.lock(KEY).unwrap();
    let nested = lc.lock(KEY).unwrap();
    let field = holds(&server, LOCK_KEY)[0].0.clone();
    let lc = &lc;
    thread::scope(|s| {
        s.spawn(move || {
            // This thread is another owner: it cannot lock, yet unlocks the moved hold.
            assert!(lc.try_lock(KEY).unwrap().is_none());
            assert_eq!(nested.unlock().unwrap(), Release::Released);
        });
    });
    assert_eq!(holds(&server, LOCK_KEY), [(field, 1)]);
    assert!(outer.unlock().unwrap().was_held());
    assert!(!server.exists(LOCK_KEY));
}

#[test]
fn fences_are_taken_by_the_outermost_acquisition_and_carried_by_nested_ones() {
    let server = RedisServer::start();
    let lc = client(&server);
    let fenced = LockOptions::new().fencing(true);
    let fence = |key: &str| lc.lock_with(key, &fenced).unwrap().unwrap();
    let floor = server.clock_micros();
    let outer = fence(KEY);
    let first = outer.fence().unwrap();
    assert!(first >= floor, "{first} < the server's clock {floor}");
    // The counter is shared by every key under the prefix: another key moves it.
    let other = fence("other");
    let second = other.fence().unwrap();
    assert!(second > first);
    let nested = fence(KEY);
    let unasked = lc.lock(KEY).unwrap();
    assert_eq!(
        (nested.fence(), unasked.fence()),
        (Some(first), None),
        "a nested hold carries the outermost's fence"
    );
    drop((nested, unasked, other, outer));
    // A fenced hold nested in one without a fence takes a fence of its own: a
    // fenced acquire never returns a guard without one.
    let plain = lc.lock(KEY).unwrap();
    let own = fence(KEY)
        .fence()
        .expect("a fenced acquire returns a fence");
    assert!(own > second);
    drop(plain);
    let third = fence(KEY).fence().unwrap();
    assert!(third > own);
    // One counter, whatever the scheme.
    let token = fenced.clone().scheme(Scheme::Token);
    let g = lc.lock_with(KEY, &token).unwrap().unwrap();
    assert!(g.fence().unwrap() > third);
    let counter: u64 = server.query(redis::cmd("GET").arg("lock:redlease:fence"));
    assert_eq!(g.fence(), Some(counter));
}

#[test]
fn a_waiting_reentrant_lock_is_cancelled_within_milliseconds() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    assert_eq!(redisson.try_lock(LOCK_KEY), None);
    let lc = slow_polling(&server);
    let cancel = CancelToken::new();
    thread::scope(|s| {
        let waiting = s.spawn(|| lc.lock_with(KEY, &LockOptions::new().cancel(cancel.clone())));
        assert!(eventually(Duration::from_secs(5), || {
            subscribers(&server, CHANNEL) >= 1
        }));
        let t = Instant::now();
        cancel.cancel();
        let outcome = waiting.join().unwrap();
        assert!(
            matches!(outcome, Err(Error::Cancelled { .. })),
            "{outcome:?}"
        );
        assert!(t.elapsed() < WOKEN_WITHIN, "cancel took {:?}", t.elapsed());
    });
    assert_eq!(holds(&server, LOCK_KEY), [(redisson.owner.clone(), 1)]);
}

#[test]
fn replica_confirmation_passes_with_a_live_replica_and_gives_the_lock_back_without_one() {
    let (master, replica) = master_and_replica(&[]);
    // A live replica acknowledges as soon as it can: a long timeout costs nothing
    // there and keeps a loaded machine from failing the confirmation. The calls
    // made while the replica is paused ask for a short one.
    let live = Duration::from_secs(10);
    let timeout = Duration::from_millis(500);
    let short = LockOptions::new().replicas(1, timeout);
    let confirmed = |scheme: Scheme| {
        LockClient::builder(master.url())
            .key_prefix("lock:")
            .scheme(scheme)
            .replicas(1, live)
            .build()
            .unwrap()
    };
    let reentrant = confirmed(Scheme::Reentrant);
    let token = confirmed(Scheme::Token);
    let fenced = LockOptions::new().fencing(true);
    for lc in [&token, &reentrant] {
        assert!(lc.lock(KEY).unwrap().unlock().unwrap().was_held());
        let g = lc.lock_with(KEY, &fenced).unwrap().unwrap();
        assert!(g.unlock().unwrap().was_held());
    }
    let outer = reentrant.lock(KEY).unwrap();

    replica.pause();
    // A nested hold nobody confirms is given back; the outer hold stays.
    let t = Instant::now();
    let nested = reentrant.lock_with(KEY, &short.clone().wait(Duration::ZERO));
    let took = t.elapsed();
    assert!(
        matches!(
            nested,
            Err(Error::NotReplicated { ref key, acked: 0, required: 1 }) if &**key == LOCK_KEY
        ),
        "{nested:?}"
    );
    // It waited for the replica (WAIT's timeout), and no longer than that.
    assert!(
        took >= timeout.mul_f32(0.9) && took < timeout + SLACK,
        "took {took:?}"
    );
    assert!(matches!(holds(&master, LOCK_KEY).as_slice(), [(_, 1)]));
    assert!(outer.unlock().unwrap().was_held());

    for (lc, opts) in [
        (&token, short.clone()),
        (&token, short.clone().fencing(true)),
        (&reentrant, short.clone()),
    ] {
        let t = Instant::now();
        let got = lc.lock_with(KEY, &opts.wait(Duration::ZERO));
        let took = t.elapsed();
        assert!(
            matches!(
                got,
                Err(Error::NotReplicated { ref key, acked: 0, required: 1 }) if &**key == LOCK_KEY
            ),
            "{got:?}"
        );
        assert!(took < timeout + SLACK, "took {took:?}");
        assert!(
            !master.exists(LOCK_KEY),
            "the unconfirmed lock was left behind"
        );
    }
    // Per call: confirmation turned off, or asked of a client without it.
    let off = LockOptions::new().replicas(0, Duration::ZERO);
    assert!(
        token
            .lock_with(KEY, &off)
            .unwrap()
            .unwrap()
            .unlock()
            .is_ok()
    );
    let plain = LockClient::builder(master.url()).build().unwrap();
    let asked = LockOptions::new().replicas(1, Duration::from_millis(100));
    let got = plain.lock_with(KEY, &asked);
    assert!(matches!(got, Err(Error::NotReplicated { .. })), "{got:?}");
    replica.resume();
    assert!(reentrant.lock(KEY).unwrap().unlock().unwrap().was_held());
}

#[test]
fn redlock_refuses_the_reentrant_scheme_and_replica_confirmation() {
    // Refused before connecting: no server needs to answer.
    let urls = [
        "redis://127.0.0.1:1/",
        "redis://127.0.0.1:2/",
        "redis://127.0.0.1:3/",
    ];
    let reentrant = LockClient::redlock(urls).scheme(Scheme::Reentrant).build();
    assert!(
        matches!(
            &reentrant,
            Err(Error::Config {
                option: "scheme",
                ..
            })
        ),
        "{reentrant:?}"
    );
    let confirmed = LockClient::redlock(urls)
        .replicas(1, Duration::from_millis(100))
        .build();
    assert!(
        matches!(
            &confirmed,
            Err(Error::Config {
                option: "replicas",
                ..
            })
        ),
        "{confirmed:?}"
    );
}

/// Redisson names an owner `<client uuid>:<thread id>` in every primitive, so one
/// thread of one client holding an `RLock`, a read lock and a fair lock shows one
/// owner id in all three hashes. Another thread of the client read-locks first,
/// so thread numbers drawn per primitive would differ.
#[test]
fn one_thread_of_one_client_is_one_owner_in_every_redisson_hash() {
    let server = RedisServer::start();
    let c = client(&server);
    let rw = c.read_write_lock("rw").unwrap();
    thread::scope(|s| {
        s.spawn(|| drop(rw.read().unwrap())).join().unwrap();
    });

    let lock = c.lock("r").unwrap();
    let read = rw.read().unwrap();
    let fair = c.fair_lock("f").unwrap().lock().unwrap();
    let mut owners = Vec::new();
    for key in ["lock:r", "lock:rw", "lock:f"] {
        let hash: Vec<(String, String)> = server.query(redis::cmd("HGETALL").arg(key));
        let fields: Vec<String> = hash
            .into_iter()
            .filter(|(field, _)| field != "mode")
            .map(|(field, _)| field)
            .collect();
        assert_eq!(fields.len(), 1, "{key}: {fields:?}");
        owners.push(fields[0].clone());
    }
    let (uuid, thread) = owners[0].rsplit_once(':').unwrap();
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{owners:?}");
    assert!(thread.parse::<u64>().is_ok(), "{owners:?}");
    assert!(owners.iter().all(|o| *o == owners[0]), "{owners:?}");
    drop((lock, read, fair));
}
