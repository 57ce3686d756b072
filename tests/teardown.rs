//! A client's end: dropping it waits on nothing but local work, even against a
//! frozen server, and what earlier clients of the process left behind delays no
//! later client's loss report. The scenarios run one after another in a process
//! of their own, as a long-running service would run them.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient, LockOptions, LossReason};
use support::acl::set_user;
use support::alone::{ALONE_ENV, finish, spawn_self};
use support::{RedisServer, eventually};

/// How late `lost()` may fire after `valid_until()`: the target is 10 ms; a loaded
/// two-core machine may stall any thread for more than that, so the bound keeps
/// room for one scheduling stall, and the figure is printed.
const LOSS_SLACK: Duration = Duration::from_millis(100);
/// How long dropping a client may take against a frozen server: the target is
/// 100 ms of local work, with room for a loaded machine's stall.
const DROP_BOUND: Duration = Duration::from_millis(300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `test` in a process of its own (other tests' clients live in this one).
fn alone(test: &str) -> bool {
    if std::env::var_os(ALONE_ENV).is_some() {
        return true;
    }
    finish(
        spawn_self(test, &[(ALONE_ENV, "1".to_owned())]),
        Duration::from_secs(60),
    );
    false
}

/// This process's thread names, sorted.
fn threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .map(|n| n.trim_end().to_owned())
        .collect();
    names.sort();
    names
}

/// What a service does over its life before the lease that is measured: clients
/// built, used and dropped after bad input, an ACL refusal, a panicking callback
/// and a wait.
fn earlier_clients(server: &RedisServer) {
    let url = server.url();
    // Bad input.
    let lc = LockClient::builder(url.as_str()).build().unwrap();
    assert!(matches!(lc.lock(""), Err(Error::Invalid { .. })));
    let zero = LockClient::builder(url.as_str())
        .ttl(Duration::ZERO)
        .build();
    assert!(zero.is_err());
    drop(lc.lock("used").unwrap());
    drop(lc);
    // A user the server refuses.
    set_user(
        server,
        "refused",
        "pw",
        // Refused on every server (on Valkey 9 a user without scripts may lock).
        &["~*", "&*", "+@all", "-set"],
    );
    let refused = format!("redis://refused:pw@127.0.0.1:{}/", server.port());
    assert!(LockClient::builder(refused.as_str()).build().is_err());
    // A callback that panics.
    let lc = LockClient::builder(url.as_str())
        .ttl(ms(1000))
        .build()
        .unwrap();
    let opts = LockOptions::new().on_lost(|_| panic!("on_lost callback panics (expected)"));
    let doomed = lc.lock_with("doomed", &opts).unwrap().unwrap();
    let _: i64 = server.query(redis::cmd("DEL").arg("doomed"));
    let lost = doomed.lost().recv_timeout(Duration::from_secs(3)).unwrap();
    assert_eq!(lost.reason, LossReason::Expired);
    drop(doomed);
    drop(lc);
    // A waiter woken by a release.
    let holder = LockClient::builder(url.as_str()).build().unwrap();
    let waiter = LockClient::builder(url.as_str()).build().unwrap();
    let guard = holder.lock("busy").unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.try_lock_for("busy", Duration::from_secs(10)));
        assert!(eventually(Duration::from_secs(5), || {
            waiter.metrics().attempts >= 1
        }));
        let _ = guard.unlock().unwrap();
        assert!(waiting.join().unwrap().unwrap().is_some());
    });
    drop((holder, waiter));
}

/// How late `lost()` fires after `valid_until()` for a 1.2 s lease whose server is
/// frozen right after a renewal.
fn loss_delay(server: &RedisServer) -> Duration {
    let lc = LockClient::builder(server.url().as_str())
        .ttl(ms(1200))
        .build()
        .unwrap();
    let guard = lc.lock("measured").unwrap();
    let renewals = lc.metrics().renewals;
    assert!(eventually(Duration::from_secs(3), || {
        lc.metrics().renewals > renewals
    }));
    server.pause();
    let lost = guard.lost().recv_timeout(Duration::from_secs(5));
    let at = Instant::now();
    // Read before the server answers again (a renewal it holds may then land).
    let valid_until = guard.valid_until();
    server.resume();
    let lost = lost.expect("lost() never fired");
    assert_eq!(lost.reason, LossReason::Unreachable);
    assert!(at >= valid_until, "reported {:?} early", valid_until - at);
    drop(guard);
    drop(lc);
    at - valid_until
}

#[test]
fn loss_is_told_on_time_after_earlier_clients_came_and_went() {
    if !alone("loss_is_told_on_time_after_earlier_clients_came_and_went") {
        return;
    }
    let server = RedisServer::start();
    earlier_clients(&server);
    // Whatever they started ends with them (a pool's threads at once, not
    // asynchronously within the pool's reaper period).
    let gone = eventually(ms(500), || {
        !threads()
            .iter()
            .any(|t| t.starts_with("redlease-") || t.starts_with("r2d2"))
    });
    let left = threads();
    let late = loss_delay(&server);
    eprintln!("SIGSTOP after earlier clients: lost() {late:?} after valid_until()");
    assert!(
        late <= LOSS_SLACK,
        "reported {late:?} after the validity ended"
    );
    assert!(gone, "threads left by the earlier clients: {left:?}");
}

#[test]
fn dropping_a_client_of_a_frozen_server_waits_on_nothing_remote() {
    if !alone("dropping_a_client_of_a_frozen_server_waits_on_nothing_remote") {
        return;
    }
    let server = RedisServer::start();
    let lc = LockClient::builder(server.url().as_str())
        .read_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = lc.lock("held").unwrap();
    drop(lc.lock("released").unwrap());
    // A waiter subscribed, so the waiter thread reads its socket.
    assert!(lc.try_lock_for("held", ms(100)).unwrap().is_none());
    server.pause();
    // An acquire whose reply is lost: its value is left for the I/O thread to
    // remove, which it is still trying when the client goes.
    let lost_reply = lc.try_lock("lost-reply");
    assert!(lost_reply.is_err(), "{lost_reply:?}");
    let started = Instant::now();
    drop(lc);
    let took = started.elapsed();
    server.resume();
    eprintln!("drop(client) against a frozen server took {took:?}");
    assert!(took <= DROP_BOUND, "drop took {took:?}");
    assert_eq!(
        guard.lost().try_recv().unwrap().reason,
        LossReason::Shutdown
    );
    // The guard keeps the client's connections until it goes.
    drop(guard);
    // Nothing the client started outlives it.
    let gone = eventually(Duration::from_secs(2), || {
        !threads()
            .iter()
            .any(|t| t.starts_with("redlease-") || t.starts_with("r2d2"))
    });
    assert!(gone, "{:?}", threads());
}

#[test]
fn dropping_a_client_deletes_its_session_record_at_once() {
    let server = RedisServer::start();
    let lc = LockClient::builder(server.url().as_str()).build().unwrap();
    drop(lc.lock("k").unwrap());
    let dbsize = || server.query::<i64>(&redis::cmd("DBSIZE"));
    // Only the session record (and the fence counter if any) is left.
    let before = dbsize();
    assert!(before >= 1, "no session record");
    drop(lc);
    // Its delete is sent unanswered, and lands: far sooner than its 10 s TTL.
    let deleted = eventually(Duration::from_secs(2), || dbsize() == before - 1);
    assert!(deleted, "{} keys left of {before}", dbsize());
}
