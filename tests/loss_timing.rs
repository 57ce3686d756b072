//! When a loss is told: at the end of the validity the lock gave, whatever the
//! process did before (other clients' waits, slow and panicking callbacks,
//! dropped clients) and wherever the lock falls among the renewal ticks.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{LockClient, LockGuard, LockOptions, LossReason};
use support::{RedisServer, eventually, wait_for};

/// The TTL of the frozen server's lease, and its renewal interval (the default,
/// a third of it, set so the probe and the leases share one grid of ticks).
const TTL: Duration = Duration::from_millis(1200);
const INTERVAL: Duration = Duration::from_millis(400);
/// The validity a renewal sent at `t` gives: `t + TTL - drift` (2 ms + 1 %).
const VALID: Duration = Duration::from_millis(1200 - 14);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Another process's key stored without a TTL: a client's wait on it runs out.
fn wait_on_a_key_without_ttl() {
    let server = RedisServer::start();
    let _: () = server.query(redis::cmd("SET").arg("nottl").arg("someone"));
    let lc = LockClient::builder(server.url()).build().unwrap();
    assert!(lc.try_lock_for("nottl", ms(300)).unwrap().is_none());
}

/// Five leases lost at once whose callbacks sleep (and then panic, if `panics`),
/// twenty others kept; all dropped, and the server stopped, while the callbacks
/// still run.
fn slow_callbacks_then_drop(panics: bool) {
    let server = RedisServer::start();
    let lc = LockClient::builder(server.url())
        .ttl(ms(600))
        .build()
        .unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&started);
    let slow = LockOptions::new().on_lost(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        thread::sleep(Duration::from_secs(3));
        assert!(!panics, "on_lost callback panics (expected)");
    });
    let doomed: Vec<LockGuard> = (0..5)
        .map(|i| {
            lc.lock_with(&format!("doomed:{i}"), &slow)
                .unwrap()
                .unwrap()
        })
        .collect();
    let others: Vec<LockGuard> = (0..20)
        .map(|i| lc.lock(&format!("other:{i}")).unwrap())
        .collect();
    for i in 0..5 {
        let _: i64 = server.query(redis::cmd("DEL").arg(format!("doomed:{i}")));
    }
    assert!(eventually(Duration::from_secs(2), || {
        started.load(Ordering::SeqCst) >= 1
    }));
    // Part of the scenario: the other work goes on a while.
    thread::sleep(ms(2500));
    drop((others, doomed, lc));
}

fn client(url: String) -> LockClient {
    LockClient::builder(url)
        .ttl(TTL)
        .renew_interval(INTERVAL)
        .read_timeout(Duration::from_secs(1))
        .write_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// A renewal tick of the process's clients with [`INTERVAL`]: a probe lease's
/// validity moves on its first renewal to `sent + VALID`.
fn a_renewal_tick() -> Instant {
    let server = RedisServer::start();
    let lc = client(server.url());
    let guard = lc.lock("probe").unwrap();
    let first = guard.valid_until();
    let moved = wait_for(Duration::from_secs(3), || {
        Some(guard.valid_until()).filter(|until| *until != first)
    });
    moved
        .expect("the probe was never renewed")
        .checked_sub(VALID)
        .unwrap()
}

/// Locks a name `before` ahead of a renewal tick (`tick` plus whole intervals),
/// freezes the server 100 ms later, and blocks the calling thread on another
/// name meanwhile. Returns how long after the validity the lock gave `lost()`
/// fired; checks it fired no earlier than the validity of that moment.
fn lateness_of_a_loss_while_the_server_is_frozen(tick: Instant, before: Duration) -> Duration {
    let server = RedisServer::start();
    let lc = client(server.url());
    let mut at = tick;
    while at < Instant::now() + before + ms(20) {
        at += INTERVAL;
    }
    // Part of the scenario: where the lock falls among the ticks.
    let lock_at = at.checked_sub(before).unwrap();
    thread::sleep(lock_at.saturating_duration_since(Instant::now()));
    let guard = lc.lock("job").unwrap();
    let given = guard.valid_until();
    // Part of the scenario: the server freezes a little after the lock.
    thread::sleep(ms(100));
    server.pause();
    let (told, until) = thread::scope(|s| {
        let told = s.spawn(|| {
            let lost = guard.lost().recv_timeout(Duration::from_secs(5)).unwrap();
            let at = Instant::now();
            assert_eq!(lost.reason, LossReason::Unreachable);
            // Read before the server speaks again: a renewal's late reply may
            // move it then.
            (at, guard.valid_until())
        });
        assert!(lc.try_lock_for("other", ms(300)).is_err());
        let told = told.join().unwrap();
        server.resume();
        told
    });
    assert!(
        told >= until,
        "reported {:?} early",
        until.saturating_duration_since(told)
    );
    told.saturating_duration_since(given)
}

#[test]
fn a_loss_is_told_when_the_validity_the_lock_gave_ends_whatever_the_process_did_before() {
    wait_on_a_key_without_ttl();
    slow_callbacks_then_drop(false);
    slow_callbacks_then_drop(true);
    let tick = a_renewal_tick();
    // Locks 60 to 90 ms ahead of a tick: a lease renewed on it, before the freeze,
    // would have its loss told that much after the validity its lock gave.
    let mut late: Vec<Duration> = [60, 70, 80, 90, 65, 75]
        .into_iter()
        .map(|before| lateness_of_a_loss_while_the_server_is_frozen(tick, ms(before)))
        .collect();
    late.sort();
    eprintln!("lost() after the validity the lock gave: {late:?}");
    // A timed wake-up on a loaded two-core machine is late by a few ms; one run
    // may meet a scheduling stall, the others may not.
    assert!(late[late.len() - 2] <= ms(40), "{late:?}");
    assert!(late[late.len() - 1] <= ms(250), "{late:?}");
}
