mod support;

// The minimum hold (`LockOptions::min_hold`) against real `redis-server`
// processes: a release inside the hold keeps the key until the hold ends (a
// compare on the token, like every release), one after it deletes the key; no
// local waiter is handed the lock early; renewal, loss, a dead holder and
// `inspect`; Redlock and Cluster; bad input.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{
    Error, LockClient, LockClientBuilder, LockFormat, LockOptions, LossReason, MAX_TTL, Release,
    Scheme,
};
use support::cluster::Cluster;
use support::fleet::{assert_kept_for, held, hold};
use support::{Masters, RedisServer, eventually};

/// How long after a hold's end the key may take to be seen free on a loaded
/// 2-core machine (each look is a lock attempt; a Redlock one asks three
/// servers). When it expires is checked to the millisecond by its `PTTL`.
const STALL: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder(server.url()).key_prefix("lock:")
}

fn client(server: &RedisServer) -> LockClient {
    builder(server).build().unwrap()
}

/// A client whose leases have a TTL of 1 s (renewed every 333 ms).
fn short_lived(server: &RedisServer) -> LockClient {
    builder(server).ttl(Duration::from_secs(1)).build().unwrap()
}

/// Whether `client` takes `job` within `d` (what is left of a hold) and
/// [`STALL`] more.
fn taken_after_the_hold(client: &LockClient, d: Duration) -> bool {
    eventually(d + STALL, || client.try_lock("job").unwrap().is_some())
}

#[test]
fn a_release_inside_the_min_hold_keeps_the_key_until_the_hold_ends() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let d = Duration::from_secs(3);
    let (guard, began) = hold(&a, "job", d);
    let token = server.value("lock:job").unwrap();
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let ttl = server.pttl("lock:job");
    assert_kept_for(ttl, d, began, Instant::now());
    // Kept: the same token, marked, and nobody can take it.
    assert_eq!(server.value("lock:job"), Some(format!("{token}~")));
    assert!(b.try_lock("job").unwrap().is_none());
    assert!(a.try_lock("job").unwrap().is_none());
    // It expires when the hold ends, not at the 30 s TTL.
    assert!(taken_after_the_hold(&b, d));
    assert!(began.elapsed() >= d);
}

#[test]
fn a_release_after_the_min_hold_deletes_the_key() {
    let server = RedisServer::start();
    let a = client(&server);
    let d = ms(300);
    let guard = a.lock_with("job", &held(d)).unwrap().unwrap();
    let after = Instant::now() + d + ms(50);
    thread::sleep(after.saturating_duration_since(Instant::now()));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(server.pttl("lock:job"), -2, "key left behind");
    assert_eq!(a.metrics().released, 1);
}

#[test]
fn a_dropped_guard_inside_the_min_hold_keeps_the_key_too() {
    let server = RedisServer::start();
    let a = client(&server);
    let d = Duration::from_secs(3);
    let (guard, began) = hold(&a, "job", d);
    drop(guard);
    assert_kept_for(server.pttl("lock:job"), d, began, Instant::now());
    assert!(server.value("lock:job").unwrap().ends_with('~'));
}

#[test]
fn the_keep_leaves_a_key_someone_else_holds_untouched_and_says_so() {
    let server = RedisServer::start();
    let a = client(&server);
    let guard = a
        .lock_with("job", &held(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    // Someone else's value now (our lease was taken over, as after an expiry).
    let _: () = server.query(
        redis::cmd("SET")
            .arg("lock:job")
            .arg("theirs")
            .arg("PX")
            .arg(60_000),
    );
    assert_eq!(guard.unlock().unwrap(), Release::Taken);
    assert_eq!(server.value("lock:job").as_deref(), Some("theirs"));
    assert!(server.pttl("lock:job") > 55_000, "their TTL was changed");
    // A key gone before the release is not written back.
    let guard = a
        .lock_with("other", &held(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    server.del("lock:other");
    assert_eq!(guard.unlock().unwrap(), Release::Expired);
    assert_eq!(server.pttl("lock:other"), -2);
}

#[test]
fn a_waiter_of_the_same_client_is_not_handed_the_lock_inside_the_min_hold() {
    let server = RedisServer::start();
    let a = client(&server);
    let d = Duration::from_secs(2);
    let (guard, began) = hold(&a, "job", d);
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            let got = a.try_lock_for("job", Duration::from_secs(20)).unwrap();
            tx.send((Instant::now(), got.is_some())).unwrap();
        });
        // The waiter has found the lock busy and waits (it marked the token).
        assert!(eventually(Duration::from_secs(10), || {
            server.value("lock:job").is_some_and(|v| v.ends_with('+'))
        }));
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        let (at, got) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(got, "the waiter never got the lock");
        assert!(
            at >= began + d,
            "handed the lock {:?} early",
            (began + d).saturating_duration_since(at)
        );
    });
    assert_eq!(a.metrics().handoffs, 0);
}

#[test]
fn renewals_never_shorten_the_key_below_the_min_hold_and_continue_past_it() {
    let server = RedisServer::start();
    let a = short_lived(&server);
    let d = Duration::from_secs(3);
    let (guard, began) = hold(&a, "job", d);
    // Several renewals (every 333 ms) fall inside the hold: the key always lasts
    // until the hold's end at least.
    while began.elapsed() < ms(2400) {
        let ttl = server.pttl("lock:job");
        let left = (began + d).saturating_duration_since(Instant::now());
        assert!(
            ttl + 20 >= i64::try_from(left.as_millis()).unwrap() - 600,
            "PTTL {ttl} ms, hold left {left:?}"
        );
        thread::sleep(ms(100));
    }
    assert!(a.metrics().renewals >= 3, "{:?}", a.metrics());
    // Past the hold the lease is renewed with its own TTL.
    let past = began + d + ms(700);
    thread::sleep(past.saturating_duration_since(Instant::now()));
    assert!(guard.is_held());
    assert!(server.pttl("lock:job") <= 1000);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(server.pttl("lock:job"), -2);
}

#[test]
fn an_extend_inside_the_min_hold_never_shortens_the_key_below_its_end() {
    let server = RedisServer::start();
    let a = client(&server);
    let d = Duration::from_secs(5);
    let (guard, began) = hold(&a, "job", d);
    guard.extend(Duration::from_secs(1)).unwrap();
    let ttl = server.pttl("lock:job");
    assert_kept_for(ttl, d, began, Instant::now());
    // The lease itself counts the TTL asked for.
    assert!(guard.valid_until() <= Instant::now() + Duration::from_secs(1));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_lease_lost_inside_the_min_hold_is_reported_and_not_written_back() {
    let server = RedisServer::start();
    let a = short_lived(&server);
    let guard = a
        .lock_with("job", &held(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    server.del("lock:job");
    let lost = guard.lost().recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(lost.reason, LossReason::Expired);
    assert!(!guard.is_held());
    assert_eq!(guard.unlock().unwrap(), Release::Expired);
    assert_eq!(server.pttl("lock:job"), -2);
}

#[test]
fn a_holder_that_dies_inside_the_min_hold_keeps_the_key_until_the_hold_ends() {
    let server = RedisServer::start();
    let a = short_lived(&server);
    let d = Duration::from_secs(3);
    // The acquire writes the hold, not the 1 s TTL.
    let (guard, began) = hold(&a, "job", d);
    assert_kept_for(server.pttl("lock:job"), d, began, Instant::now());
    // A renewal (with the 1 s TTL) lands inside the hold, then the holder
    // vanishes without releasing: nothing renews or releases any more.
    assert!(eventually(Duration::from_secs(2), || a.metrics().renewals >= 1));
    std::mem::forget(guard);
    drop(a);
    let b = client(&server);
    thread::sleep((began + ms(2300)).saturating_duration_since(Instant::now()));
    assert!(
        b.try_lock("job").unwrap().is_none(),
        "free 2.3 s into a 3 s hold"
    );
    assert!(taken_after_the_hold(&b, d));
    assert!(began.elapsed() >= d);
}

#[test]
fn inspect_says_the_lock_is_kept_for_its_minimum_hold() {
    let server = RedisServer::start();
    let a = client(&server);
    let d = Duration::from_secs(5);
    let guard = a.lock_with("job", &held(d)).unwrap().unwrap();
    let info = a.inspect("job").unwrap();
    assert_eq!(info.format(), LockFormat::Token);
    assert!(!info.kept());
    let _ = guard.unlock().unwrap();
    let info = a.inspect("job").unwrap();
    assert_eq!(info.format(), LockFormat::Token);
    assert!(info.kept());
    assert!(info.ttl().is_some_and(|t| t <= d));
    // The kept value still names its client.
    assert_eq!(info.holders().len(), 1);
    assert!(info.holders()[0].owner().tag().is_some());
}

#[test]
fn redlock_keeps_the_key_on_every_master_inside_the_min_hold() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    // Each master gets up to 1 s to answer (the 50 ms default is for a LAN, not
    // a loaded test machine).
    let a = LockClient::redlock(urls.iter().map(String::as_str))
        .key_prefix("lock:")
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let d = Duration::from_secs(3);
    let (guard, began) = hold(&a, "job", d);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    // The release returns once a majority answered; each master that keeps
    // the key keeps it for what is left of the hold.
    let kept = |s: &RedisServer| s.value("lock:job").is_some_and(|v| v.ends_with('~'));
    assert!(eventually(Duration::from_secs(2), || {
        masters.servers.iter().filter(|s| kept(s)).count() >= 2
    }));
    for server in masters.servers.iter().filter(|s| kept(s)) {
        assert_kept_for(server.pttl("lock:job"), d, began, Instant::now());
    }
    assert!(a.try_lock("job").unwrap().is_none());
    let free = taken_after_the_hold(&a, d);
    let state: Vec<(Option<String>, i64)> = masters
        .servers
        .iter()
        .map(|s| (s.value("lock:job"), s.pttl("lock:job")))
        .collect();
    assert!(free, "never free: {state:?}, {:?}", a.metrics());
    assert!(began.elapsed() >= d);
}

#[test]
fn a_cluster_keeps_the_key_inside_the_min_hold() {
    let cluster = Cluster::start(3, 0);
    let a = cluster.client();
    let d = Duration::from_secs(3);
    let (guard, began) = hold(&a, "job", d);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let owner = &cluster.nodes[cluster.owner(cluster.slot("lock:job"))];
    assert_kept_for(owner.pttl("lock:job"), d, began, Instant::now());
    assert!(a.inspect("job").unwrap().kept());
    assert!(a.try_lock("job").unwrap().is_none());
    assert!(taken_after_the_hold(&a, d));
}

#[test]
fn bad_minimum_holds_are_typed_errors() {
    let server = RedisServer::start();
    let a = client(&server);
    let config = |opts: LockOptions| match a.lock_with("job", &opts) {
        Err(Error::Config { option, .. }) => option,
        other => panic!("not a config error: {other:?}"),
    };
    assert_eq!(config(held(Duration::ZERO)), "min_hold");
    assert_eq!(config(held(MAX_TTL + ms(1))), "min_hold");
    let longer = held(Duration::from_secs(60)).max_hold(Duration::from_secs(30));
    assert_eq!(config(longer), "min_hold");
    // Schemes and primitives that cannot keep a key refuse the option.
    for scheme in [
        Scheme::Reentrant,
        Scheme::LegacyTimestamp(redlease::LegacyTimestamp::new()),
    ] {
        let opts = held(Duration::from_secs(1)).scheme(scheme);
        assert!(
            matches!(a.lock_with("job", &opts), Err(Error::Unsupported { .. })),
            "{opts:?}"
        );
    }
    let fair = a.fair_lock("job").unwrap();
    assert!(matches!(
        fair.lock_with(&held(Duration::from_secs(1))),
        Err(Error::Unsupported { .. })
    ));
    // Nothing was written.
    assert_eq!(server.pttl("lock:job"), -2);
    // A hold equal to max_hold is fine.
    let same = held(Duration::from_secs(1)).max_hold(Duration::from_secs(1));
    assert!(a.lock_with("job", &same).unwrap().is_some());
}
