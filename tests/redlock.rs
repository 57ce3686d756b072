mod support;

// Redlock over real `redis-server` processes: mutual exclusion, a minority
// and a majority of nodes down, slow and silent nodes (TCP proxy), a node restarted
// empty, renewal and loss, interop with redis-py- and redsync-style clients, and the
// options a quorum refuses.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{
    Error, LegacyTimestamp, LockClient, LockClientBuilder, LockOptions, LossReason, Release, Scheme,
};
use support::counter::increment;
use support::proxy::Proxy;
use support::{Masters, RedisServer, eventually, stress_factor};

/// Scheduling slack on a loaded two-core machine.
const SLACK: Duration = Duration::from_millis(300);
/// The node timeout of tests that are not about timing: a 200 ms stall of this
/// machine must not count a node as failed.
const ROOMY: Duration = Duration::from_millis(500);

/// The compare-and-delete every token client releases with.
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn builder(urls: &[String]) -> LockClientBuilder {
    LockClient::redlock(urls.iter().map(String::as_str)).key_prefix("lock:")
}

fn client(urls: &[String]) -> LockClient {
    builder(urls).node_timeout(ROOMY).build().unwrap()
}

/// On how many of `masters`' servers `key` exists.
fn holders(masters: &Masters, key: &str) -> usize {
    masters.servers.iter().filter(|s| s.exists(key)).count()
}

/// Waits (at most 2 s) until `key` exists on every running server: an acquire
/// returns on a majority, and the last `SET`s land just after.
fn held_everywhere(masters: &Masters, key: &str) {
    let alive = masters.servers.iter().filter(|s| s.is_running()).count();
    let everywhere = || holders_alive(masters, key) == alive;
    assert!(eventually(Duration::from_secs(2), everywhere), "{key}");
}

/// A raw `SET key token NX PX ms` on `server`: whether it was set.
fn set_nx(server: &RedisServer, key: &str, token: &str, ttl_ms: u64) -> bool {
    let set: redis::Value = server.query(
        redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms),
    );
    set != redis::Value::Nil
}

/// A raw compare-and-delete of `token` under `key` on `server`.
fn release_raw(server: &RedisServer, key: &str, token: &str) {
    let _: i64 = redis::Script::new(RELEASE)
        .key(key)
        .arg(token)
        .invoke(&mut server.conn())
        .unwrap();
}

/// A redsync-style acquire, in raw commands: one token, `SET NX PX` on every node,
/// held when a majority granted it; otherwise released everywhere.
fn redsync_lock(masters: &Masters, key: &str, token: &str) -> bool {
    let granted = masters
        .servers
        .iter()
        .filter(|s| set_nx(s, key, token, 10_000))
        .count();
    if granted > masters.servers.len() / 2 {
        return true;
    }
    redsync_unlock(masters, key, token);
    false
}

fn redsync_unlock(masters: &Masters, key: &str, token: &str) {
    for s in &masters.servers {
        release_raw(s, key, token);
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

#[test]
fn eight_threads_over_five_nodes_never_hold_the_lock_together() {
    let masters = Masters::start(5);
    let urls = masters.urls();
    let clients = [client(&urls), client(&urls)];
    let rounds = 20 * stress_factor();
    let barrier = Barrier::new(8);
    thread::scope(|s| {
        for t in 0..8 {
            let (client, barrier) = (&clients[t % 2], &barrier);
            let mut con = masters.servers[0].conn();
            s.spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    let guard = client.lock("counter-lock").unwrap();
                    increment(&mut con);
                    assert_eq!(guard.unlock().unwrap(), Release::Released);
                }
            });
        }
    });
    let total: u64 = masters.servers[0].query(redis::cmd("GET").arg("counter"));
    assert_eq!(total, 8 * rounds as u64);
    let m = clients[0].metrics();
    assert_eq!(m.acquired, 4 * rounds as u64);
    assert_eq!(m.release_errors, 0);
    // Tokens of busy attempts are taken out in the background.
    let free = || holders(&masters, "lock:counter-lock") == 0;
    assert!(eventually(Duration::from_secs(2), free));
}

#[test]
fn every_entry_point_works_over_a_quorum_and_release_counts_its_nodes() {
    let masters = Masters::start(3);
    let client = builder(&masters.urls())
        .node_timeout(ROOMY)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = client.try_lock("k").unwrap().unwrap();
    held_everywhere(&masters, "lock:k");
    assert!(guard.is_held());
    assert!(guard.fence().is_none());
    // Busy is `Ok(None)` for every bounded entry point, within its wait.
    assert!(client.try_lock("k").unwrap().is_none());
    let (r, took) = timed(|| client.try_lock_for("k", ms(200)));
    assert!(r.unwrap().is_none());
    assert!(took >= ms(200) && took < ms(200) + SLACK, "{took:?}");
    let until = Instant::now() + ms(100);
    assert!(client.try_lock_until("k", until).unwrap().is_none());
    let opts = LockOptions::new().wait(ms(100));
    assert!(client.lock_with("k", &opts).unwrap().is_none());
    // Extend sets the TTL on every node; validity follows. It returns once a
    // majority answered, so the last node's extend may still be on its way.
    guard.extend(Duration::from_secs(20)).unwrap();
    let pttls = || -> Vec<i64> {
        let pttl = |s: &RedisServer| s.pttl("lock:k");
        masters.servers.iter().map(pttl).collect()
    };
    let now = pttls();
    assert!(now.iter().filter(|&&t| t > 15_000).count() >= 2, "{now:?}");
    assert!(
        eventually(Duration::from_secs(5), || pttls()
            .iter()
            .all(|&t| t > 15_000)),
        "{:?}",
        pttls()
    );
    assert!(guard.valid_until() > Instant::now() + Duration::from_secs(15));
    // A node that lost the key (deleted here) leaves a majority: still released.
    let _: i64 = masters.servers[2].query(redis::cmd("DEL").arg("lock:k"));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let m = client.metrics();
    assert_eq!((m.released, m.node_releases), (1, 2));
    assert!(eventually(Duration::from_secs(1), || holders(
        &masters, "lock:k"
    ) == 0));
    // `with_lock` and a waiting `lock` take it again.
    assert_eq!(client.with_lock("k", || 7).unwrap(), 7);
    drop(client.lock("k").unwrap());
    // The drop returns once a majority deleted it; the last node may answer later.
    assert!(eventually(Duration::from_secs(2), || holders(
        &masters, "lock:k"
    ) == 0));
}

#[test]
fn a_lease_that_lost_its_majority_unlocks_as_expired() {
    let masters = Masters::start(3);
    let client = client(&masters.urls());
    let guard = client.lock("k").unwrap();
    held_everywhere(&masters, "lock:k");
    for s in &masters.servers[..2] {
        let _: i64 = s.query(redis::cmd("DEL").arg("lock:k"));
    }
    assert_eq!(guard.unlock().unwrap(), Release::Expired);
    // The third node is counted when it answers, maybe after `unlock` returned.
    let counted = || client.metrics().node_releases == 1;
    assert!(eventually(Duration::from_secs(2), counted));
    assert_eq!(holders(&masters, "lock:k"), 0);
}

#[test]
fn a_guard_outliving_its_client_still_releases_on_every_node() {
    let masters = Masters::start(3);
    let client = client(&masters.urls());
    let guard = client.lock("k").unwrap();
    held_everywhere(&masters, "lock:k");
    // The client's threads are joined here; the guard asks the nodes itself.
    drop(client);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(holders(&masters, "lock:k"), 0);
}

#[test]
fn two_of_five_nodes_down_still_lock_three_down_fail_with_no_quorum() {
    let masters = Masters::start(5);
    let client = client(&masters.urls());
    masters.servers[3].kill();
    masters.servers[4].kill();
    let guard = client.lock("k").unwrap();
    held_everywhere(&masters, "lock:k");
    assert_eq!(guard.unlock().unwrap(), Release::Released);

    masters.servers[2].kill();
    // `lock` makes three rounds before giving up; each round waits for no node
    // (dead nodes refuse at once), plus a random pause of at most 50 ms between.
    let (r, took) = timed(|| client.lock("k"));
    let Err(Error::NoQuorum {
        acquired,
        required,
        failures,
    }) = r
    else {
        panic!("{r:?}");
    };
    assert_eq!((acquired, required), (2, 3));
    assert_eq!(failures.len(), 3);
    for f in &failures {
        assert!(f.error.is_connection_error(), "{f:?}");
        assert!(f.node.starts_with("redis://127.0.0.1:"), "{f:?}");
    }
    assert!(took < 3 * ROOMY + SLACK, "{took:?}");
    // `try_lock` makes one round.
    let r = client.try_lock("k");
    assert!(
        matches!(r, Err(Error::NoQuorum { acquired: 2, .. })),
        "{r:?}"
    );
    // The two live nodes that granted it are cleaned up in the background.
    assert!(eventually(Duration::from_secs(2), || {
        holders_alive(&masters, "lock:k") == 0
    }));
}

/// On how many running servers `key` exists.
fn holders_alive(masters: &Masters, key: &str) -> usize {
    let alive = masters.servers.iter().filter(|s| s.is_running());
    alive.filter(|s| s.exists(key)).count()
}

#[test]
fn a_release_is_an_error_only_while_a_majority_may_still_hold_the_value() {
    let masters = Masters::start(5);
    let client = client(&masters.urls());
    let (k, j) = (client.lock("k").unwrap(), client.lock("j").unwrap());
    held_everywhere(&masters, "lock:k");
    held_everywhere(&masters, "lock:j");
    // A live master without the value (one that said busy to an acquire a
    // majority won), two dead with it: nothing of ours is left on a majority.
    let _: i64 = masters.servers[2].query(redis::cmd("DEL").arg("lock:k"));
    masters.servers[3].kill();
    masters.servers[4].kill();
    assert_eq!(k.unlock().unwrap(), Release::Released);
    assert_eq!(holders_alive(&masters, "lock:k"), 0);
    // Three dead with the value: it may still be on a majority.
    masters.servers[2].kill();
    let r = j.unlock();
    assert!(
        matches!(r, Err(Error::NoQuorum { acquired: 2, required: 3, ref failures }) if failures.len() == 3),
        "{r:?}"
    );
}

/// What the clients of one [`four_clients_while_two_of_five_die`] run saw.
#[derive(Debug, Default)]
struct Run {
    /// Lock cycles whose acquire began after the kill.
    after: usize,
    /// Releases of those cycles that returned an error, and the first error.
    release_errors: usize,
    first: Option<String>,
    /// Releases of those cycles that found the lease ended.
    not_held: usize,
    /// Acquires that failed or whose wait ran out (after the kill, the three
    /// live masters must all answer).
    acquire_errors: usize,
    waits_out: usize,
    /// The slowest release after the kill.
    slowest: Duration,
}

/// Four clients of two threads each (as four processes would be: each its own
/// lanes, waiter and local hand-offs) take and release one name on five masters,
/// holding it 2 ms, with waiting acquires; two masters are killed once `half`
/// cycles are done, and the run ends `half` cycles later (each half bounded by
/// 8 s). A lease taken before the kill passes between a client's threads with its
/// token, so a lock whose acquire began after the kill may be on two live masters
/// only, the third holding another client's passing value or nothing.
fn four_clients_while_two_of_five_die(half: usize) -> Run {
    let masters = Masters::start(5);
    let urls = masters.urls();
    // The defaults a user runs with: a 50 ms node timeout.
    let clients: Vec<LockClient> = (0..4)
        .map(|_| builder(&urls).ttl(Duration::from_secs(5)).build().unwrap())
        .collect();
    let (cycles, killed, stop) = (
        AtomicUsize::new(0),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    thread::scope(|s| {
        let workers: Vec<_> = clients
            .iter()
            .chain(&clients)
            .map(|client| {
                let (cycles, killed, stop) = (&cycles, &killed, &stop);
                s.spawn(move || {
                    let mut run = Run::default();
                    while !stop.load(SeqCst) {
                        let after = killed.load(SeqCst);
                        let guard = match client.try_lock_for("name", Duration::from_secs(3)) {
                            Ok(Some(guard)) => guard,
                            Ok(None) => {
                                run.waits_out += 1;
                                continue;
                            }
                            Err(_) => {
                                run.acquire_errors += usize::from(after);
                                continue;
                            }
                        };
                        // The critical section.
                        thread::sleep(ms(2));
                        let (released, took) = timed(|| guard.unlock());
                        cycles.fetch_add(1, SeqCst);
                        if !after {
                            continue;
                        }
                        run.after += 1;
                        run.slowest = run.slowest.max(took);
                        match released {
                            Ok(outcome) => run.not_held += usize::from(!outcome.was_held()),
                            Err(e) => {
                                run.release_errors += 1;
                                run.first.get_or_insert_with(|| format!("{e}: {e:?}"));
                            }
                        }
                    }
                    run
                })
            })
            .collect();
        let halfway = eventually(Duration::from_secs(8), || cycles.load(SeqCst) >= half);
        masters.servers[3].kill();
        masters.servers[4].kill();
        killed.store(true, SeqCst);
        let mark = cycles.load(SeqCst);
        let done = eventually(Duration::from_secs(8), || {
            cycles.load(SeqCst) >= mark + half
        });
        stop.store(true, SeqCst);
        let mut total = Run::default();
        for w in workers {
            let run = w.join().unwrap();
            total.after += run.after;
            total.release_errors += run.release_errors;
            total.not_held += run.not_held;
            total.acquire_errors += run.acquire_errors;
            total.waits_out += run.waits_out;
            total.slowest = total.slowest.max(run.slowest);
            total.first = total.first.or(run.first);
        }
        assert!(halfway && done, "too few cycles: {total:?}");
        total
    })
}

#[test]
fn releases_on_the_three_masters_left_of_five_all_succeed_under_contention() {
    let runs = 6 * stress_factor();
    let mut failed = Vec::new();
    for run in 0..runs {
        let seen = four_clients_while_two_of_five_die(60);
        eprintln!("run {run}: {seen:?}");
        if seen.release_errors + seen.not_held > 0 {
            failed.push((run, seen));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {runs} runs: {failed:?}",
        failed.len()
    );
}

#[test]
fn a_password_never_shows_in_a_no_quorum_error() {
    let masters = Masters::start(3);
    let mut urls = masters.urls();
    urls[1] = urls[1].replace("redis://", "redis://:hunter2@");
    // The server has no password: `AUTH` fails on that node, a minority.
    let client = builder(&urls).node_timeout(ROOMY).build().unwrap();
    masters.servers[0].kill();
    let err = client.try_lock("k").unwrap_err();
    let shown = format!("{err:?} {err}");
    assert!(matches!(err, Error::NoQuorum { .. }), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn silent_nodes_do_not_slow_an_acquire_past_the_node_timeout() {
    let masters = Masters::start(5);
    let proxies = [
        Proxy::start(masters.servers[3].port()),
        Proxy::start(masters.servers[4].port()),
    ];
    let mut urls = masters.urls();
    urls[3] = proxies[0].url();
    urls[4] = proxies[1].url();
    let timeout = ms(100);
    let client = builder(&urls).node_timeout(timeout).build().unwrap();
    drop(client.lock("warm").unwrap());
    for p in &proxies {
        p.blackhole(true);
    }
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let key = format!("k{i}");
        let (guard, took) = timed(|| client.lock(&key).unwrap());
        slowest = slowest.max(took);
        // Release returns on a majority; the silent nodes' deletes are left to
        // their lanes and I/O threads.
        let (released, took) = timed(|| guard.unlock().unwrap());
        assert_eq!(released, Release::Released);
        assert!(took < timeout + SLACK, "release took {took:?}");
    }
    assert!(slowest < timeout + SLACK, "slowest acquire {slowest:?}");
    for p in &proxies {
        p.blackhole(false);
    }
    eprintln!("two silent nodes of five: slowest acquire {slowest:?}");
}

#[test]
fn an_acquire_slower_than_its_ttl_is_refused_and_cleaned_up() {
    let masters = Masters::start(3);
    let proxies: Vec<Proxy> = masters
        .servers
        .iter()
        .map(|s| Proxy::start(s.port()))
        .collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    // Every node answers within its timeout, but a round trip (2 × 150 ms) takes
    // longer than the lease's validity (200 ms - 4 ms drift).
    let client = builder(&urls)
        .ttl(ms(200))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    for s in &masters.servers {
        s.reset_stats();
    }
    for p in &proxies {
        p.delay(ms(150));
    }
    let (r, took) = timed(|| client.try_lock("k"));
    let Err(Error::NoQuorum {
        acquired, failures, ..
    }) = r
    else {
        panic!("{r:?}");
    };
    assert!(took >= ms(300), "{took:?}");
    assert_eq!(acquired, 0);
    assert_eq!(failures.len(), 3);
    assert!(
        failures.iter().all(|f| f.error.is_timeout()),
        "{failures:?}"
    );
    // Every node was sent the compare-and-delete, and no key is left.
    assert!(eventually(Duration::from_secs(3), || {
        masters
            .servers
            .iter()
            .all(|s| s.command_calls("evalsha") + s.command_calls("delifeq") >= 1)
    }));
    assert!(eventually(Duration::from_secs(1), || holders(
        &masters, "lock:k"
    ) == 0));
}

#[test]
fn a_node_restarted_empty_does_not_let_a_second_client_in() {
    let masters = Masters::start(5);
    let urls = masters.urls();
    let ttl = Duration::from_millis(1500);
    let holder = builder(&urls).node_timeout(ROOMY).ttl(ttl).build().unwrap();
    let other = client(&urls);
    let guard = holder.lock("k").unwrap();
    held_everywhere(&masters, "lock:k");
    masters.servers[0].restart();
    assert_eq!(holders(&masters, "lock:k"), 4);
    // The restarted node grants the second client; the other four do not.
    assert!(other.try_lock("k").unwrap().is_none());
    assert!(other.try_lock_for("k", ms(300)).unwrap().is_none());
    // The holder's renewals go on with four of five.
    let before = holder.metrics().renewals;
    assert!(eventually(ttl * 2, || holder.metrics().renewals >= before + 10));
    assert!(guard.is_held());
    assert!(guard.lost().is_empty());
    assert!(other.try_lock("k").unwrap().is_none());
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(eventually(Duration::from_secs(2), || holders(
        &masters, "lock:k"
    ) == 0));
    assert!(other.try_lock("k").unwrap().is_some());
}

#[test]
fn renewal_keeps_the_lock_for_several_ttls() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let ttl = Duration::from_secs(1);
    let holder = builder(&urls).node_timeout(ROOMY).ttl(ttl).build().unwrap();
    let other = client(&urls);
    let guard = holder.lock("job").unwrap();
    let start = Instant::now();
    while start.elapsed() < ttl * 3 + ms(500) {
        assert!(other.try_lock("job").unwrap().is_none());
        assert!(guard.is_held());
        thread::sleep(ms(100));
    }
    let m = holder.metrics();
    assert!(m.renewals >= 3 * 8, "{m:?}");
    assert_eq!(m.leases_lost, 0);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn killing_a_majority_loses_the_lease_within_one_renewal_period() {
    let masters = Masters::start(5);
    let ttl = Duration::from_secs(2);
    let every = ms(600);
    let client = builder(&masters.urls())
        .node_timeout(ROOMY)
        .ttl(ttl)
        .renew_interval(every)
        .build()
        .unwrap();
    let guard = client.lock("k").unwrap();
    held_everywhere(&masters, "lock:k");
    let killed = Instant::now();
    for s in &masters.servers[..3] {
        s.kill();
    }
    let lost = guard.lost().recv_timeout(every + SLACK).unwrap();
    let after = killed.elapsed();
    assert_eq!(lost.reason, LossReason::Unreachable);
    assert!(!guard.is_held());
    assert!(after < every + SLACK, "{after:?}");
    // Never deletes a key it does not hold: the live nodes keep ours until release.
    assert_eq!(holders_alive(&masters, "lock:k"), 2);
    drop(guard);
    assert_eq!(holders_alive(&masters, "lock:k"), 0);
    eprintln!("majority killed: lease lost after {after:?}");
}

#[test]
fn a_redis_py_style_holder_on_a_majority_blocks_an_acquire() {
    let masters = Masters::start(5);
    let client = client(&masters.urls());
    for s in &masters.servers[..3] {
        assert!(set_nx(s, "lock:k", "py-token", 10_000));
    }
    assert!(client.try_lock("k").unwrap().is_none());
    assert!(client.try_lock_for("k", ms(300)).unwrap().is_none());
    // Our token left on the two free nodes is taken out again.
    assert!(eventually(Duration::from_secs(2), || {
        holders(&masters, "lock:k") == 3
    }));
    // redis-py releases without publishing: a caller already waiting finds out by
    // its bounded wait.
    let attempts = client.metrics().attempts;
    let waiter = thread::scope(|s| {
        let waiting = s.spawn(|| client.try_lock_for("k", Duration::from_secs(5)));
        let busy = || client.metrics().attempts > attempts;
        assert!(eventually(Duration::from_secs(2), busy));
        for s in &masters.servers[..3] {
            release_raw(s, "lock:k", "py-token");
        }
        waiting.join().unwrap()
    });
    let guard = waiter.unwrap().unwrap();
    // The raw releases go one node at a time, so the waiter may win a majority
    // between two of them: the node released last then stays free. Our token is
    // on a majority, and redis-py's on none.
    let py_on = || {
        masters
            .servers
            .iter()
            .filter(|s| s.value("lock:k").as_deref() == Some("py-token"))
            .count()
    };
    assert!(eventually(Duration::from_secs(2), || holders(
        &masters, "lock:k"
    ) >= 3));
    assert_eq!(py_on(), 0);
    // And a redis-py-style client cannot take a majority while we hold it.
    let taken = masters
        .servers
        .iter()
        .filter(|s| set_nx(s, "lock:k", "py", 10_000))
        .count();
    assert!(
        taken < 3,
        "redis-py-style writes landed on {taken} of 5 nodes"
    );
    drop(guard);
}

#[test]
fn redsync_style_clients_and_redlease_exclude_each_other() {
    let masters = Masters::start(5);
    let client = client(&masters.urls());
    assert!(redsync_lock(&masters, "lock:k", "go-token"));
    assert!(client.try_lock("k").unwrap().is_none());
    redsync_unlock(&masters, "lock:k", "go-token");
    let guard = client.try_lock("k").unwrap().unwrap();
    held_everywhere(&masters, "lock:k");
    assert!(!redsync_lock(&masters, "lock:k", "go-token-2"));
    assert_eq!(holders(&masters, "lock:k"), 5);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(redsync_lock(&masters, "lock:k", "go-token-3"));
}

#[test]
fn options_a_quorum_cannot_honour_are_refused() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let config_error = |r: Result<LockClient, Error>, option: &str| match r {
        Err(Error::Config { option: o, .. }) => assert_eq!(o, option),
        other => panic!("{option}: {other:?}"),
    };
    config_error(builder(&urls).fencing(true).build(), "fencing");
    let legacy = Scheme::LegacyTimestamp(LegacyTimestamp::new());
    config_error(builder(&urls).scheme(legacy.clone()).build(), "scheme");
    config_error(LockClient::redlock(Vec::<String>::new()).build(), "urls");
    let twice = vec![urls[0].clone(), urls[1].clone(), urls[0].clone()];
    config_error(LockClient::redlock(twice).build(), "urls");
    config_error(
        builder(&urls).node_timeout(Duration::ZERO).build(),
        "node_timeout",
    );
    // Per call too, and nothing is written.
    let client = client(&urls);
    for opts in [
        LockOptions::new().fencing(true),
        LockOptions::new().scheme(legacy),
    ] {
        let r = client.lock_with("k", &opts);
        assert!(matches!(r, Err(Error::Config { .. })), "{r:?}");
    }
    assert_eq!(holders(&masters, "lock:k"), 0);
}

#[test]
fn a_majority_down_at_build_is_an_error_a_minority_is_not() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    masters.servers[0].kill();
    let client = builder(&urls).node_timeout(ROOMY).build().unwrap();
    drop(client.lock("k").unwrap());
    masters.servers[1].kill();
    let r = builder(&urls).build();
    assert!(
        matches!(&r, Err(Error::NoQuorum { acquired: 1, required: 2, failures }) if failures.len() == 2),
        "{r:?}"
    );
}

#[test]
fn with_the_first_node_down_waiters_still_hear_releases_from_another() {
    // A release publishes on every node; the waiter thread listens on one and moves
    // to the next when it fails. With polling far slower than a wake-up, only a
    // release message can explain a prompt hand-over.
    let masters = Masters::start(3);
    let urls = masters.urls();
    let slow = |b: LockClientBuilder| b.backoff(ms(2000), ms(4000));
    let holder = client(&urls);
    let waiter = slow(builder(&urls)).build().unwrap();
    masters.servers[0].kill();
    let numsub = |s: &RedisServer| -> i64 {
        let (_, n): (String, i64) = s.query(
            redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("{lock:job}:released"),
        );
        n
    };
    for round in 0..3 {
        let guard = holder.lock("job").unwrap();
        thread::scope(|s| {
            let w = s.spawn(|| {
                let g = waiter.try_lock_for("job", Duration::from_secs(20)).unwrap();
                (g, Instant::now())
            });
            // The waiter listens on a live node.
            let listening = eventually(Duration::from_secs(10), || {
                masters.servers[1..].iter().any(|s| numsub(s) >= 1)
            });
            assert!(listening, "round {round}: nobody subscribed on a live node");
            let released = Instant::now();
            assert!(guard.unlock().unwrap().was_held());
            let (got, at) = w.join().unwrap();
            assert!(got.is_some());
            let took = at - released;
            assert!(took < ms(1000), "round {round}: woken after {took:?}");
        });
    }
}

/// What a Redlock waiter may cost a master beyond one server's waiter in the same
/// time: its first round's take-back of the value a free master stored (the
/// release script and the `GET` and `DEL` it runs: 3), and two polls of jitter
/// (each waiter draws its polling steps at random within the top quarter of the
/// step, so over 3 s the two may differ by a poll; two is four times the
/// difference's standard deviation).
const TOLERANCE: u64 = 5;

/// A Redlock waiter behind a foreign holder of 2 of 3 masters (the third,
/// `free`, is free) and one server's waiter behind a foreign holder wait 3 s side
/// by side; returns the commands each master and the one server received.
fn counted_waits(free: usize) -> (Vec<u64>, u64) {
    let masters = Masters::start(3);
    let single = RedisServer::start();
    let quorum = client(&masters.urls());
    let one = LockClient::builder(single.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    for (i, s) in masters.servers.iter().enumerate() {
        if i != free {
            assert!(set_nx(s, "lock:k", "foreign", 30_000));
        }
    }
    assert!(set_nx(&single, "lock:k", "foreign", 30_000));
    for s in masters.servers.iter().chain([&single]) {
        s.reset_stats();
    }
    let wait = Duration::from_secs(3);
    thread::scope(|s| {
        let ours = s.spawn(|| quorum.try_lock_for("k", wait).unwrap().is_none());
        let theirs = s.spawn(|| one.try_lock_for("k", wait).unwrap().is_none());
        assert!(ours.join().unwrap(), "the quorum waiter got a held lock");
        assert!(
            theirs.join().unwrap(),
            "one server's waiter got a held lock"
        );
    });
    let per_master: Vec<u64> = masters
        .servers
        .iter()
        .map(RedisServer::client_commands)
        .collect();
    let one_server = single.client_commands();
    // Nothing of ours is left on the free master.
    let cleaned = eventually(Duration::from_secs(2), || {
        !masters.servers[free].exists("lock:k")
    });
    assert!(cleaned, "our value stayed on the free master");
    for (i, s) in masters.servers.iter().enumerate() {
        eprintln!(
            "master {i} (free: {}): {:?}",
            i == free,
            s.client_command_stats()
        );
    }
    eprintln!("one server: {:?}", single.client_command_stats());
    eprintln!(
        "free master {free}: the masters received {per_master:?} commands in 3 s, one server {one_server}"
    );
    (per_master, one_server)
}

fn assert_waits_like_one_server(free: usize) {
    let (per_master, one_server) = counted_waits(free);
    // One server's waiter polled all along: the comparison means something.
    assert!(one_server >= 10, "one server's waiter sent {one_server}");
    for (i, n) in per_master.into_iter().enumerate() {
        assert!(
            n <= one_server + TOLERANCE,
            "master {i} received {n} commands, one server {one_server}"
        );
    }
}

#[test]
fn a_waiter_short_of_a_majority_costs_each_master_what_one_servers_waiter_costs() {
    // The free master is the one whose channel the waiter hears.
    assert_waits_like_one_server(0);
}

#[test]
fn a_waiter_short_of_a_majority_costs_a_free_master_it_does_not_hear_what_one_server_costs() {
    assert_waits_like_one_server(2);
}

/// Takes a foreign holder's token off `servers`, publishing on the key's channel
/// when `publish` says, as a redlease-style holder does (redis-py does not).
fn release_foreign(servers: &[RedisServer], token: &str, publish: bool) {
    for s in servers {
        release_raw(s, "lock:k", token);
        if publish {
            let _: i64 = s.query(
                redis::cmd("PUBLISH")
                    .arg("{lock:k}:released")
                    .arg("released"),
            );
        }
    }
}

/// A waiter over 3 masters, 2 of them held by a foreign token, takes the lock
/// once the holder releases; how long after the release it had it.
fn taken_after_release(waiter: &LockClient, masters: &Masters, publish: bool) -> Duration {
    for s in &masters.servers[..2] {
        assert!(set_nx(s, "lock:k", "foreign", 30_000));
    }
    let looked = || masters.servers[1].command_calls("get");
    let before = looked();
    thread::scope(|s| {
        let w = s.spawn(|| {
            let g = waiter.try_lock_for("k", Duration::from_secs(20)).unwrap();
            (g, Instant::now())
        });
        // It is waiting: it has looked at the lock at least once after its first
        // round (its first look follows its subscription).
        let waiting = eventually(Duration::from_secs(10), || looked() > before);
        assert!(waiting, "the waiter never polled");
        let released = Instant::now();
        release_foreign(&masters.servers[..2], "foreign", publish);
        let (got, at) = w.join().unwrap();
        let guard = got.expect("the waiter never got the lock");
        assert!(holders(masters, "lock:k") >= 2);
        drop(guard);
        at - released
    })
}

#[test]
fn a_waiter_short_of_a_majority_takes_the_lock_on_the_release_message() {
    // Polling every 1.5 s at the soonest: only the message explains a prompt take.
    let masters = Masters::start(3);
    let waiter = builder(&masters.urls())
        .node_timeout(ROOMY)
        .backoff(ms(2000), ms(4000))
        .build()
        .unwrap();
    let took = taken_after_release(&waiter, &masters, true);
    eprintln!("taken {took:?} after a release that published");
    assert!(took < ms(1000), "taken {took:?} after the release");
}

#[test]
fn a_waiter_short_of_a_majority_finds_a_silent_release_within_a_polling_step() {
    let masters = Masters::start(3);
    let waiter = builder(&masters.urls())
        .node_timeout(ROOMY)
        .backoff(ms(4), ms(200))
        .build()
        .unwrap();
    let took = taken_after_release(&waiter, &masters, false);
    eprintln!("taken {took:?} after a release that did not publish");
    assert!(took < ms(200) + SLACK, "taken {took:?} after the release");
}
