mod support;
// Local hand-off: a releasing guard passes its lock straight to the oldest waiting
// caller of the same client.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockOptions, Release, Renewal};
use support::{RedisServer, eventually};

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Blocks until `client` has a caller waiting on `key` (a second attempt made).
fn wait_until_waiting(client: &LockClient, attempts_before: u64) {
    assert!(eventually(Duration::from_secs(5), || {
        client.metrics().attempts > attempts_before
    }));
    thread::sleep(Duration::from_millis(50)); // let it go to sleep on its offer
}

#[test]
fn a_release_hands_the_lock_to_the_waiting_thread_with_its_own_token_and_fence() {
    let server = RedisServer::start();
    let c = client(&server);
    let opts = LockOptions::new().fencing(true);
    // A waiter that has not gone to sleep on its offer yet when the holder
    // releases (a stalled machine) gets a real release instead: that round shows
    // nothing, and another is made.
    let handed = (0..10).any(|_| {
        let handoffs = c.metrics().handoffs;
        let dels = server.command_calls("del");
        let holder = c.lock_with("k", &opts).unwrap().unwrap();
        let first_fence = holder.fence().unwrap();
        let before = c.metrics().attempts;
        thread::scope(|s| {
            let waiter = s.spawn(|| c.lock_with("k", &opts).unwrap().unwrap());
            wait_until_waiting(&c, before);
            let holder_token: String = server.query(redis::cmd("GET").arg("k"));
            let floor = server.clock_micros();
            assert_eq!(holder.unlock().unwrap(), Release::Released);
            let guard = waiter.join().unwrap();
            if c.metrics().handoffs == handoffs {
                assert_eq!(guard.unlock().unwrap(), Release::Released);
                return false;
            }
            assert_eq!(c.metrics().handoffs, handoffs + 1);
            // The key never went free: it now holds the waiter's own token, a TTL
            // of its own, and the fence was taken for it in the same step.
            let token: String = server.query(redis::cmd("GET").arg("k"));
            assert_ne!(token, holder_token);
            assert!(guard.fence().unwrap() > first_fence);
            // Not below the server's clock, as every fence (see tests/fence.rs).
            assert!(guard.fence().unwrap() >= floor, "below the clock {floor}");
            let counter: u64 = server.query(redis::cmd("GET").arg("redlease:fence"));
            assert_eq!(guard.fence(), Some(counter), "the last fence taken");
            let pttl: i64 = server.query(redis::cmd("PTTL").arg("k"));
            assert!(pttl > 9_000, "{pttl}");
            assert!(guard.is_held());
            assert_eq!(guard.unlock().unwrap(), Release::Released);
            let exists: i64 = server.query(redis::cmd("EXISTS").arg("k"));
            assert_eq!(exists, 0);
            // The hand-off deleted nothing (its script sets the new token); the
            // release is one script's `DEL`, or on Valkey 9 `DELIFEQ` (no `DEL`).
            let release_dels = u64::from(!server.has_conditional_commands());
            assert_eq!(
                server.command_calls("del") - dels,
                release_dels,
                "only the last release deletes"
            );
            true
        })
    });
    assert!(
        handed,
        "no release was handed to the waiting thread in 10 rounds"
    );
}

#[test]
fn a_waiter_that_gives_up_is_not_left_holding_a_handed_lock() {
    let server = RedisServer::start();
    let c = client(&server);
    for _ in 0..20 {
        let holder = c.lock("k").unwrap();
        let before = c.metrics().attempts;
        thread::scope(|s| {
            let waiter = s.spawn(|| c.try_lock_for("k", Duration::from_millis(120)).unwrap());
            wait_until_waiting(&c, before);
            // Release right around the waiter's deadline.
            thread::sleep(Duration::from_millis(65));
            let _ = holder.unlock().unwrap();
            if let Some(g) = waiter.join().unwrap() {
                assert_eq!(g.unlock().unwrap(), Release::Released);
            }
        });
        // Whoever won, nobody holds the key afterwards.
        assert!(eventually(Duration::from_secs(2), || {
            server.query::<i64>(redis::cmd("EXISTS").arg("k")) == 0
        }));
    }
}

#[test]
fn an_expired_holder_hands_nothing_and_the_waiter_still_gets_the_lock() {
    let server = RedisServer::start();
    let c = client(&server);
    let short = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .renewal(Renewal::None);
    let holder = c.lock_with("k", &short).unwrap().unwrap();
    let before = c.metrics().attempts;
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let t = Instant::now();
            (c.lock("k").unwrap(), t.elapsed())
        });
        wait_until_waiting(&c, before);
        assert!(eventually(Duration::from_secs(2), || !holder.is_held()));
        let (guard, took) = waiter.join().unwrap();
        assert!(took < Duration::from_secs(2), "{took:?}");
        // The waiter took the lock on its own once the TTL ran out; the late
        // release finds someone else's token and leaves it.
        assert_eq!(holder.unlock().unwrap(), Release::Taken);
        assert!(guard.is_held());
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    });
    assert_eq!(c.metrics().handoffs, 0);
}

#[test]
fn another_process_gets_its_turn_while_one_client_hands_off_in_a_loop() {
    for threads in [2, 4] {
        another_client_gets_a_turn(threads);
    }
}

fn another_client_gets_a_turn(threads: usize) {
    let server = RedisServer::start();
    let busy = client(&server);
    let other = client(&server);
    let stop = AtomicBool::new(false);
    let loops = AtomicUsize::new(0);
    let start = Barrier::new(threads + 1);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let g = busy.lock("k").unwrap();
                    loops.fetch_add(1, Ordering::Relaxed);
                    thread::sleep(Duration::from_micros(200));
                    drop(g);
                }
            });
        }
        start.wait();
        assert!(eventually(Duration::from_secs(5), || {
            busy.metrics().handoffs > 50
        }));
        // Without the streak bound the four threads would pass the lock among
        // themselves for ever; a real release every few hand-offs lets this in.
        let t = Instant::now();
        let got = other.try_lock_for("k", Duration::from_secs(5)).unwrap();
        let waited = t.elapsed();
        stop.store(true, Ordering::Relaxed);
        assert!(got.is_some(), "starved for {waited:?}");
        println!(
            "{threads} threads: another client got the lock after {waited:?}; {} local hand-offs",
            busy.metrics().handoffs
        );
    });
    assert!(loops.load(Ordering::Relaxed) > 50);
}
