mod support;

// Real faults under the token scheme: a killed server, a paused (`SIGSTOP`) server, a port
// nobody listens on, a proxy that delays replies past the read timeout (no ghost locks), and
// one that delays them past a short lease's validity (no lease handed over already over).

use std::time::{Duration, Instant};

use redlease::{
    Error, LegacyTimestamp, LockClient, LockClientBuilder, LockOptions, Release, Scheme,
};
use support::proxy::Proxy;
use support::{RedisServer, eventually, free_port};

/// Connect, read and write timeout of the clients here.
const TIMEOUT: Duration = Duration::from_millis(200);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);

fn builder(url: &str) -> LockClientBuilder {
    LockClient::builder(url)
        .key_prefix("lock:")
        .connect_timeout(TIMEOUT)
        .read_timeout(TIMEOUT)
        .write_timeout(TIMEOUT)
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

/// Runs `f` and returns its result with how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

#[test]
fn try_lock_on_a_killed_server_fails_fast_with_a_connection_error() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let guard = client.try_lock("held").unwrap().unwrap();
    server.kill();

    let (r, took) = timed(|| client.try_lock("k"));
    let err = r.unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    assert!(!err.is_lock_lost());
    assert!(took < Duration::from_secs(1), "{took:?}");

    // Every entry point fails rather than waits: `lock` too, and again after the first
    // failure (the pool has no good connection left to hand out).
    let (r, took) = timed(|| client.lock("k"));
    assert!(r.unwrap_err().is_connection_error());
    assert!(took < Duration::from_secs(1), "{took:?}");
    let (r, took) = timed(|| client.try_lock_for("k", Duration::from_secs(30)));
    assert!(r.unwrap_err().is_connection_error());
    assert!(took < Duration::from_secs(1), "{took:?}");

    // The release of a guard taken before the kill reports the failure, bounded too.
    let (r, took) = timed(|| guard.unlock());
    assert!(r.unwrap_err().is_connection_error());
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(client.metrics().release_errors, 1);
    eprintln!("killed server: errors within {took:?}");
}

#[test]
fn a_guard_dropped_on_a_killed_server_returns_promptly_and_counts_the_error() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let guard = client.lock("k").unwrap();
    server.kill();
    let ((), took) = timed(|| drop(guard));
    assert!(took < Duration::from_secs(1), "{took:?}");
    let m = client.metrics();
    assert_eq!((m.released, m.release_errors), (0, 1));
}

#[test]
fn try_lock_on_a_paused_server_times_out_within_the_configured_timeouts() {
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    assert!(client.try_lock("warm").unwrap().is_some());
    server.pause();

    let (r, took) = timed(|| client.try_lock("k"));
    let err = r.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.is_connection_error(), "{err:?}");
    // The reply is awaited for the read timeout; then the cleanup of a possible ghost
    // lock gets at most a pool checkout (connect timeout) and one more read timeout.
    assert!(took >= TIMEOUT, "{took:?}");
    let bound = TIMEOUT * 3 + SLACK;
    assert!(took < bound, "{took:?} >= {bound:?}");

    let (r, took_lock) = timed(|| client.lock("k"));
    assert!(r.unwrap_err().is_timeout());
    assert!(took_lock < bound, "{took_lock:?} >= {bound:?}");
    eprintln!("paused server: timeouts after {took:?} (try_lock), {took_lock:?} (lock)");

    // Once resumed, the same client works again: broken connections were thrown away.
    // (The acquires sent while paused may land on resume: their cleanup could not
    // reach the server, so they run out with their TTL; the caller got an error, never
    // a false "not acquired".)
    server.resume();
    let recovered = eventually(Duration::from_secs(2), || {
        client.try_lock("other").is_ok_and(|g| g.is_some())
    });
    assert!(recovered);
}

#[test]
fn build_against_a_port_nobody_listens_on_fails_fast() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let (r, took) = timed(|| builder(&url).build());
    let err = r.unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    assert!(err.is_connection_error(), "{err:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// Acquires through a proxy that delays every chunk by more than the read timeout, so
/// the `SET` reaches Redis but its reply comes too late; returns the error and time.
fn acquire_with_lost_reply(server: &RedisServer, fencing: bool) -> (Error, Duration, Proxy) {
    let proxy = Proxy::start(server.port());
    // The pool's connections are opened now, while the proxy is fast; the cleanup's
    // connection is opened under the delay, so it gets a longer connect timeout.
    // `build` checks the server with the 200 ms read timeout: a loaded machine may
    // stall it past that, so it is tried again (setup, not what is checked).
    let client = (0..5)
        .find_map(|_| {
            builder(&proxy.url())
                .connect_timeout(Duration::from_secs(3))
                .fencing(fencing)
                .build()
                .ok()
        })
        .expect("a client through the fast proxy");
    // Load the scripts, so the delayed acquire is the command itself, not a NOSCRIPT:
    // straight on the server (scripts are the server's), by a client whose reads a
    // loaded machine's stall does not outlast.
    let warm = LockClient::builder(server.url())
        .key_prefix("lock:")
        .read_timeout(READ)
        .fencing(fencing)
        .build()
        .unwrap();
    assert_eq!(
        warm.lock("warm").unwrap().unlock().unwrap(),
        Release::Released
    );
    proxy.delay(TIMEOUT * 2);
    let (r, took) = timed(|| client.try_lock("k"));
    let err = match r {
        Err(e) => e,
        Ok(guard) => panic!("a reply later than the read timeout gave {guard:?}"),
    };
    (err, took, proxy)
}

#[test]
fn an_acquire_whose_reply_is_lost_leaves_no_ghost_lock() {
    let server = RedisServer::start();
    server.reset_stats();
    let (err, took, proxy) = acquire_with_lost_reply(&server, false);
    assert!(
        err.is_timeout(),
        "not Ok(None): the outcome is unknown: {err:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    proxy.delay(Duration::ZERO);
    // The delayed `SET` (TTL 30 s) lands first; the compare-and-delete sent after it
    // on a new connection then removes our token.
    let sets = || server.command_calls("set");
    assert!(
        eventually(Duration::from_secs(5), || sets() >= 2),
        "the SET reached Redis"
    );
    assert!(
        eventually(Duration::from_secs(5), || !exists(&server, "lock:k")),
        "our token is still stored: {:?}",
        server.query::<Option<String>>(redis::cmd("GET").arg("lock:k"))
    );
    let other = builder(&server.url()).build().unwrap();
    let guard = other.try_lock("k").unwrap().expect("nobody holds it");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_fenced_acquire_whose_reply_is_lost_leaves_no_ghost_lock() {
    let server = RedisServer::start();
    let (err, _, proxy) = acquire_with_lost_reply(&server, true);
    assert!(err.is_timeout(), "{err:?}");
    proxy.delay(Duration::ZERO);
    // The acquire script ran (its fence was taken: the warm-up lock took one
    // before), and its lock was cleaned up.
    let incrs = || server.command_calls("incr");
    assert!(eventually(Duration::from_secs(5), || incrs() == 2));
    assert!(eventually(Duration::from_secs(5), || !exists(
        &server, "lock:k"
    )));
    let lost: u64 = server.query(redis::cmd("GET").arg("lock:redlease:fence"));
    let other = builder(&server.url()).fencing(true).build().unwrap();
    let guard = other.try_lock("k").unwrap().expect("nobody holds it");
    assert!(
        guard.fence().unwrap() > lost,
        "fences still rise past the lost acquire"
    );
}

// ---- a call takes the time the caller gave it, and says what failed ----

/// Read timeout of the clients below; their connect timeout stays at its 2 s default.
const READ: Duration = Duration::from_secs(2);
/// The bound is `max(wait, read timeout) + 400 ms`; on a loaded 2-core machine (a CI
/// run beside a soak: a call was seen 0.8 s late) a call may also be scheduled late,
/// by this much at most. Two read timeouts (4 s) stay well above the bound.
const LOADED: Duration = Duration::from_millis(800);
/// The bound for a call that waits at most [`READ`] (2.4 s, plus [`LOADED`]).
const BOUND: Duration = Duration::from_millis(2400).saturating_add(LOADED);
const PASSWORD: &str = "faults-s3cret-pw";

/// A client reading with [`READ`], connecting with the default timeout.
fn slow_builder(url: &str) -> LockClientBuilder {
    LockClient::builder(url)
        .key_prefix("lock:")
        .read_timeout(READ)
        .write_timeout(READ)
}

/// Display and Debug of `err`, checked for the password.
fn shown(err: &Error) -> String {
    let text = format!("{err} | {err:?}");
    assert!(!text.contains(PASSWORD), "password printed: {text}");
    text
}

/// Asserts that `err` is a timeout of `op` on `key` that names its limit, and that
/// the cause from `redis` or `r2d2` is its source.
fn assert_timeout_of(err: &Error, op: &str, key: &str) {
    let text = shown(err);
    assert!(err.is_timeout(), "{text}");
    let shown = err.to_string();
    let prefix = format!("{op} lock \"{key}\": ");
    assert!(shown.starts_with(&prefix), "{shown}");
    let limit = [
        "no reply from redis within 2s",
        "no connection available within 2s",
    ];
    assert!(limit.contains(&&shown[prefix.len()..]), "{shown}");
    assert!(std::error::Error::source(err).is_some(), "{text}");
}

#[test]
fn calls_on_a_frozen_server_return_within_the_read_timeout_and_say_so() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let client = slow_builder(&server.url()).build().unwrap();
    assert!(client.try_lock("warm").unwrap().is_some());
    let held = client.lock("held").unwrap();
    server.reset_stats();
    server.pause();

    // The acquire gets no reply: one read timeout, not two (the removal of the value
    // it may have written runs on the node's I/O thread).
    let wait = Duration::from_millis(300);
    let (r, took) = timed(|| client.try_lock_for("jobs:7", wait));
    let err = r.expect_err("a lock Redis may hold is an error, never Ok(None)");
    assert_timeout_of(&err, "acquiring", "lock:jobs:7");
    assert_eq!(
        err.to_string(),
        r#"acquiring lock "lock:jobs:7": no reply from redis within 2s"#
    );
    assert!(took + Duration::from_millis(50) >= READ, "{took:?}");
    assert!(took < BOUND, "try_lock_for took {took:?}");
    let mut timings = vec![("try_lock_for(300 ms)", took)];

    // The pool is empty now and new connections hang in their handshake: a checkout
    // waits at most the read timeout, never the 2 s connect timeout.
    for key in ["jobs:8", "jobs:9"] {
        let (r, took) = timed(|| client.try_lock(key));
        assert_timeout_of(&r.unwrap_err(), "acquiring", &format!("lock:{key}"));
        assert!(took < BOUND, "try_lock took {took:?}");
        timings.push(("try_lock", took));
    }
    let (r, took) = timed(|| held.extend(Duration::from_secs(30)));
    assert_timeout_of(&r.unwrap_err(), "extending", "lock:held");
    assert!(took < BOUND, "extend took {took:?}");
    timings.push(("extend", took));
    let (r, took) = timed(|| held.unlock());
    assert_timeout_of(&r.unwrap_err(), "releasing", "lock:held");
    assert!(took < BOUND, "unlock took {took:?}");
    timings.push(("unlock", took));
    eprintln!("frozen server: {timings:?}");

    // Once the server runs again, the acquire sent while it was frozen lands (its
    // `SET`), and the I/O thread removes the value: no ghost lock.
    server.resume();
    let sets = || server.command_calls("set");
    assert!(eventually(Duration::from_secs(10), || sets() >= 1));
    assert!(
        eventually(Duration::from_secs(10), || !exists(&server, "lock:jobs:7")),
        "ghost lock: {:?}",
        server.query::<Option<String>>(redis::cmd("GET").arg("lock:jobs:7"))
    );
    let guard = client.try_lock("jobs:7").unwrap().expect("nobody holds it");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn try_lock_through_a_blackholed_proxy_returns_within_the_read_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = slow_builder(&proxy.url()).build().unwrap();
    assert_eq!(
        client.lock("warm").unwrap().unlock().unwrap(),
        Release::Released
    );
    server.reset_stats();
    proxy.blackhole(true);
    let (r, took) = timed(|| client.try_lock("jobs:7"));
    let err = r.expect_err("a lock Redis may hold is an error, never Ok(None)");
    assert_timeout_of(&err, "acquiring", "lock:jobs:7");
    assert!(took < BOUND, "try_lock took {took:?}");
    let (r, took_again) = timed(|| client.try_lock_for("jobs:8", Duration::from_millis(300)));
    assert_timeout_of(&r.unwrap_err(), "acquiring", "lock:jobs:8");
    assert!(took_again < BOUND, "try_lock_for took {took_again:?}");
    eprintln!("blackholed proxy: try_lock {took:?}, try_lock_for {took_again:?}");

    // The held bytes are forwarded in order once the proxy passes traffic again.
    proxy.blackhole(false);
    assert!(eventually(Duration::from_secs(10), || server
        .command_calls("set")
        >= 1));
    assert!(
        eventually(Duration::from_secs(10), || !exists(&server, "lock:jobs:7")),
        "ghost lock"
    );
}

#[test]
fn an_unlock_whose_hand_off_gets_no_reply_waits_one_read_timeout_not_two() {
    let server = RedisServer::start();
    let client = slow_builder(&server.url()).build().unwrap();
    let guard = client.lock("k").unwrap();
    // A fenced waiter needs a new fence: the lock is handed over by script, in a
    // round trip, not passed on as the same lease.
    let opts = LockOptions::new()
        .wait(Duration::from_secs(20))
        .fencing(true);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| client.lock_with("k", &opts));
        // The waiter subscribed, was told to try again, found the lock busy again and
        // sleeps with an offer out for a releasing guard to hand it the lock.
        let channel = "{lock:k}:released";
        let subscribed = || {
            let (_, n): (String, i64) =
                server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
            n >= 1
        };
        assert!(eventually(Duration::from_secs(10), || subscribed()
            && client.metrics().attempts >= 3));
        server.pause();
        let (r, took) = timed(|| guard.unlock());
        assert_timeout_of(&r.unwrap_err(), "releasing", "lock:k");
        assert!(took < BOUND, "unlock took {took:?}");
        eprintln!("unlock with a hand-off on a frozen server: {took:?}");
        server.resume();
        // The waiter's own attempts may have timed out meanwhile; either way it ends.
        let _ = waiter.join().unwrap();
    });
    assert!(eventually(Duration::from_secs(10), || !exists(
        &server, "lock:k"
    )));
}

#[test]
fn a_wait_that_redis_stops_answering_midway_returns_by_its_deadline() {
    // A foreign holder; the caller waits 1.5 s with a 1 s read timeout, and the
    // server freezes while it waits: the poll in flight at the deadline must not
    // add a whole read timeout to the wait.
    let server = RedisServer::start();
    let client = slow_builder(&server.url())
        .read_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let () = server.query(
        redis::cmd("SET")
            .arg("lock:busy")
            .arg("foreign")
            .arg("PX")
            .arg(30_000),
    );
    let wait = Duration::from_millis(1500);
    let (out, took) = std::thread::scope(|s| {
        let waiter = s.spawn(|| timed(|| client.try_lock_for("busy", wait)));
        // Freeze late in the wait: ten polls on the ramp take 0.8-1.05 s.
        let before = client.metrics().attempts;
        assert!(eventually(Duration::from_secs(5), || {
            client.metrics().attempts >= before + 10
        }));
        server.pause();
        let out = waiter.join().unwrap();
        server.resume();
        out
    });
    println!("a wait of {wait:?} on a server frozen midway returned after {took:?}: {out:?}");
    match out {
        // The last poll was answered before the freeze.
        Ok(None) => {}
        Err(e) => assert!(e.is_timeout(), "{e:?}"),
        Ok(Some(_)) => panic!("a held lock was acquired"),
    }
    assert!(
        took <= wait + Duration::from_millis(200) + SLACK,
        "returned after {took:?}"
    );
}

// ---- a grant whose reply comes after the lease's validity is never handed over ----

/// The lease of the late-reply tests: under 1 s, as they are about timing.
const SHORT_TTL: Duration = Duration::from_millis(400);
/// The proxy's delay each way: a round trip takes 2 × 550 ms = 2 × TTL + 300 ms, so
/// every reply comes 700 ms after the lease's validity ended (a stall only makes it
/// later).
const LATE: Duration = Duration::from_millis(550);
/// The wait of the calls made under [`LATE`]: the first attempt's reply comes back
/// within it (after 1.1 s, 0.9 s to spare), so a refused grant leaves the call
/// waiting, not returning.
const LATE_WAIT: Duration = Duration::from_secs(2);

/// A client through `proxy` with [`SHORT_TTL`], reading far longer than a delayed
/// round trip (so a late reply is read, not timed out). Its connections are opened,
/// and the scripts loaded, while the proxy is fast.
fn late_client(proxy: &Proxy) -> LockClient {
    late_client_with(proxy, |b| b)
}

/// [`late_client`], its builder first passed through `tune`.
fn late_client_with(
    proxy: &Proxy,
    tune: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    let patient = Duration::from_secs(4);
    let client = tune(LockClient::builder(proxy.url()))
        .key_prefix("lock:")
        .ttl(SHORT_TTL)
        .connect_timeout(patient)
        .read_timeout(patient)
        .write_timeout(patient)
        .build()
        .unwrap();
    assert_eq!(
        client.lock("warm").unwrap().unlock().unwrap(),
        Release::Released
    );
    client
}

/// Panics unless `out` is "not acquired": a guard returned under [`LATE`] would be
/// one whose validity had ended before the call returned.
fn assert_not_acquired<G: std::fmt::Debug>(call: &str, out: redlease::Result<Option<G>>) {
    match out {
        Ok(None) => {}
        Ok(Some(guard)) => {
            panic!("{call} handed over a lease granted after its validity: {guard:?}")
        }
        Err(e) => panic!("{call}: {e:?}"),
    }
}

/// One of the lock calls that wait.
type LockCall<'a> = dyn Fn() -> redlease::Result<Option<redlease::LockGuard>> + 'a;

#[test]
fn a_lock_granted_after_its_validity_is_given_back_not_handed_over() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = late_client(&proxy);
    proxy.delay(LATE);
    let opts = LockOptions::new().wait(LATE_WAIT);
    let calls: [(&str, &LockCall<'_>); 2] = [
        ("try_lock_for", &|| client.try_lock_for("k", LATE_WAIT)),
        ("lock_with", &|| client.lock_with("k", &opts)),
    ];
    for (call, f) in calls {
        let (out, took) = timed(f);
        println!(
            "{call} under replies {:?} late: {out:?} after {took:?}",
            LATE * 2
        );
        if let Ok(Some(guard)) = &out {
            println!(
                "valid until {:?} before it was returned; is_held: {}",
                Instant::now().saturating_duration_since(guard.valid_until()),
                guard.is_held()
            );
        }
        assert_not_acquired(call, out);
        // The late grant was refused and the wait went on to its end.
        assert!(took >= LATE_WAIT, "{call} gave up after {took:?}");
    }
    proxy.delay(Duration::ZERO);
    // Nothing of ours is left stored, and anyone can take the lock.
    assert!(
        eventually(Duration::from_secs(5), || !exists(&server, "lock:k")),
        "a late grant is still stored: {:?}",
        server.query::<Option<String>>(redis::cmd("GET").arg("lock:k"))
    );
    let other = builder(&server.url()).build().unwrap();
    let guard = other.try_lock("k").unwrap().expect("nobody holds it");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_wait_whose_replies_come_in_time_again_acquires_a_valid_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = late_client(&proxy);
    proxy.delay(LATE);
    let before = client.metrics().attempts;
    let (out, retried) = std::thread::scope(|s| {
        let waiter = s.spawn(|| client.try_lock_for("k", Duration::from_secs(15)));
        // The first grant came late and was given back: the wait tries again.
        let retried = eventually(Duration::from_secs(8), || {
            client.metrics().attempts >= before + 2
        });
        proxy.delay(Duration::ZERO);
        (waiter.join().unwrap(), retried)
    });
    acquired_in_time_after_a_retry(out, retried, "the wait ended on its first, late grant");
}

#[test]
fn a_permit_granted_after_its_validity_is_given_back_not_handed_over() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = late_client(&proxy);
    let semaphore = client.semaphore("imports").unwrap();
    semaphore.ensure_permits(1).unwrap();
    proxy.delay(LATE);
    let opts = LockOptions::new().wait(LATE_WAIT);
    let (out, took) = timed(|| semaphore.acquire_with(&opts));
    assert_not_acquired("acquire_with", out);
    assert!(took >= LATE_WAIT, "gave up after {took:?}");
    proxy.delay(Duration::ZERO);
    // Every permit taken late was given back (none left for a later acquire to
    // sweep), and the one permit is free.
    let permits = || -> Vec<String> {
        server.query(
            redis::cmd("ZRANGE")
                .arg("{lock:imports}:timeout")
                .arg(0)
                .arg(-1),
        )
    };
    assert!(
        eventually(Duration::from_secs(5), || permits().is_empty()),
        "late permits still stored: {:?}",
        permits()
    );
    let permit = semaphore
        .try_acquire()
        .unwrap()
        .expect("the permit is free");
    assert!(permit.is_held());
    assert_eq!(permit.unlock().unwrap(), Release::Released);
}

#[test]
fn a_lock_handed_over_after_its_validity_is_given_back_not_taken() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // Waiters poll seldom, so the waiter sleeps with its offer out when the holder
    // unlocks, and is handed the lock by script (it wants another TTL).
    let slow = |b: LockClientBuilder| b.backoff(Duration::from_secs(5), Duration::from_secs(10));
    let client = late_client_with(&proxy, slow);
    let long = LockOptions::new().ttl(Duration::from_secs(30));
    let holder = client.lock_with("k", &long).unwrap().unwrap();
    let before = client.metrics().attempts;
    let (out, retried, handoffs) = std::thread::scope(|s| {
        let waiter = s.spawn(|| client.try_lock_for("k", Duration::from_secs(20)));
        // Its first attempt, then the one after subscribing: it is asleep.
        let subscribed = eventually(Duration::from_secs(10), || {
            let subs: (String, i64) =
                server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg("{lock:k}:released"));
            subs.1 >= 1 && client.metrics().attempts >= before + 2
        });
        assert!(subscribed, "the waiter never slept");
        let asleep = client.metrics().attempts;
        // The hand-off's reply comes 1.1 s after the script ran: the 400 ms lease it
        // wrote for the waiter is over when the waiter wakes.
        proxy.delay(LATE);
        assert_eq!(holder.unlock().unwrap(), Release::Released);
        let handoffs = client.metrics().handoffs;
        // Given back: the waiter tries again.
        let retried = eventually(Duration::from_secs(8), || {
            client.metrics().attempts > asleep
        });
        proxy.delay(Duration::ZERO);
        (waiter.join().unwrap(), retried, handoffs)
    });
    println!("hand-offs: {handoffs}; the waiter got {out:?}");
    acquired_in_time_after_a_retry(out, retried, "the waiter took the late lock");
}

#[test]
fn a_legacy_lock_granted_after_its_validity_is_deleted_not_left_to_its_grace() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let legacy = |b: LockClientBuilder| b.scheme(Scheme::LegacyTimestamp(LegacyTimestamp::new()));
    let client = late_client_with(&proxy, legacy);
    proxy.delay(LATE);
    let (out, took) = timed(|| client.try_lock_for("k", LATE_WAIT));
    assert_not_acquired("try_lock_for", out);
    assert!(took >= LATE_WAIT, "gave up after {took:?}");
    proxy.delay(Duration::ZERO);
    // The timestamp it stored had passed before its reply came, but the key itself
    // would stay for the 30 s grace: the late grant is deleted instead.
    assert!(
        eventually(Duration::from_secs(5), || !exists(&server, "lock:k")),
        "a late grant is still stored: {:?}",
        server.query::<Option<String>>(redis::cmd("GET").arg("lock:k"))
    );
}

/// Checks a wait whose first grant came late: it was `retried`, then acquired a
/// lease still valid now; `late` says what went wrong when it was not retried.
fn acquired_in_time_after_a_retry(
    out: redlease::Result<Option<redlease::LockGuard>>,
    retried: bool,
    late: &str,
) {
    let guard = match out {
        Ok(Some(guard)) => guard,
        other => panic!("not acquired once replies came in time: {other:?}"),
    };
    let now = Instant::now();
    assert!(
        retried,
        "{late}: valid until {:?} before now",
        now.saturating_duration_since(guard.valid_until())
    );
    assert!(guard.valid_until() > now && guard.is_held(), "{guard:?}");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}
