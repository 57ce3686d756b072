//! The legacy timestamp scheme against real `redis-server` processes, beside a deployed
//! `SETNX`/`GET`/`GETSET` client emulated command for command ([`Deployed`]).

mod support;

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease::{
    Clock, DEFAULT_BACKOFF_MAX, DEFAULT_LEGACY_GRACE, LegacyTimestamp, LockClient,
    LockClientBuilder, LockGuard, Release, Renewal, Scheme, TimestampUnit,
};
use support::{RedisServer, eventually, stress_factor};

/// The Redis key of lock `k` (the clients' prefix is `lock:`).
const KEY: &str = "lock:k";
/// The deployed clients' sleep between attempts.
const DEPLOYED_POLL: Duration = Duration::from_millis(100);
/// Slack on top of a wait's duration: scheduling on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);

/// A deployed timestamp-lock client, emulated faithfully (the common Jedis-style code):
///
/// ```text
/// expires = now + ttl + 1
/// if SETNX key expires == 1: locked
/// current = GET key
/// if current != null && parseLong(current) < now:
///     old = GETSET key expires
///     if old == current: locked
/// sleep 100 ms; retry
/// ```
///
/// Release is either a bare `DEL`, or a `DEL` only while its own expiry has not passed.
struct Deployed {
    con: redis::Connection,
    key: String,
    unit: TimestampUnit,
    ttl: Duration,
    /// The expiry it wrote, while it believes it holds the lock.
    held: Option<i64>,
    /// Attempts that found the lock held.
    misses: usize,
}

impl Deployed {
    fn new(server: &RedisServer, key: &str, unit: TimestampUnit, ttl: Duration) -> Self {
        Self {
            con: server.conn(),
            key: key.to_owned(),
            unit,
            ttl,
            held: None,
            misses: 0,
        }
    }

    fn now(&self) -> i64 {
        now_in(self.unit)
    }

    /// One pass of the loop body; whether it took the lock.
    fn try_once(&mut self) -> bool {
        let ttl = i64::try_from(match self.unit {
            TimestampUnit::Seconds => self.ttl.as_secs(),
            _ => u64::try_from(self.ttl.as_millis()).unwrap(),
        })
        .unwrap();
        let expires = self.now() + ttl + 1;
        let set: i64 = redis::cmd("SETNX")
            .arg(&self.key)
            .arg(expires)
            .query(&mut self.con)
            .unwrap();
        if set == 1 {
            self.held = Some(expires);
            return true;
        }
        let current: Option<String> = redis::cmd("GET")
            .arg(&self.key)
            .query(&mut self.con)
            .unwrap();
        if let Some(current) = current {
            // Long.parseLong throws on anything else: so does this client.
            let stored: i64 = current.parse().expect("deployed client: not a timestamp");
            if stored < self.now() {
                let old: Option<String> = redis::cmd("GETSET")
                    .arg(&self.key)
                    .arg(expires)
                    .query(&mut self.con)
                    .unwrap();
                if old.as_deref() == Some(current.as_str()) {
                    self.held = Some(expires);
                    return true;
                }
            }
        }
        false
    }

    /// Retries every 100 ms for at most `wait`; whether it took the lock.
    fn lock(&mut self, wait: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.try_once() {
                return true;
            }
            self.misses += 1;
            if start.elapsed() >= wait {
                return false;
            }
            thread::sleep(DEPLOYED_POLL);
        }
    }

    /// The careless release: `DEL`, whoever holds the key now.
    fn unlock_unconditionally(&mut self) {
        self.held = None;
        let _: i64 = redis::cmd("DEL")
            .arg(&self.key)
            .query(&mut self.con)
            .unwrap();
    }

    /// The careful release: `DEL` only while its own expiry has not passed.
    fn unlock_if_unexpired(&mut self) {
        if let Some(expires) = self.held.take()
            && self.now() < expires
        {
            let _: i64 = redis::cmd("DEL")
                .arg(&self.key)
                .query(&mut self.con)
                .unwrap();
        }
    }
}

/// The wall clock in `unit`, as deployed clients read it.
fn now_in(unit: TimestampUnit) -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    match unit {
        TimestampUnit::Seconds => i64::try_from(since.as_secs()).unwrap(),
        _ => i64::try_from(since.as_millis()).unwrap(),
    }
}

fn legacy_builder(server: &RedisServer, legacy: LegacyTimestamp) -> LockClientBuilder {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .scheme(Scheme::LegacyTimestamp(legacy))
}

/// A legacy-scheme client (milliseconds, local clock) with fixed leases of `ttl`.
fn fixed_legacy(server: &RedisServer, ttl: Duration) -> LockClient {
    legacy_builder(server, LegacyTimestamp::new())
        .ttl(ttl)
        .renewal(Renewal::None)
        .build()
        .unwrap()
}

/// Redis `TIME` in unix milliseconds.
fn redis_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = server.query(&redis::cmd("TIME"));
    secs * 1000 + micros / 1000
}

/// The read-modify-write the lock must protect: `GET`, a millisecond of work, `SET`.
/// `inside` counts holders at once and must never pass one.
fn increment(con: &mut redis::Connection, inside: &AtomicUsize) {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders at once"
    );
    let n: Option<u64> = redis::cmd("GET").arg("counter").query(con).unwrap();
    thread::sleep(Duration::from_millis(1));
    let () = redis::cmd("SET")
        .arg("counter")
        .arg(n.unwrap_or(0) + 1)
        .query(con)
        .unwrap();
    inside.fetch_sub(1, Ordering::SeqCst);
}

fn counter(server: &RedisServer) -> u64 {
    server.value("counter").map_or(0, |s| s.parse().unwrap())
}

#[test]
fn a_legacy_lease_stores_now_plus_ttl_plus_one_in_millis_with_a_grace_ttl() {
    let server = RedisServer::start();
    let client = fixed_legacy(&server, Duration::from_secs(10));
    let before = now_in(TimestampUnit::Millis);
    let guard = client.try_lock("k").unwrap().unwrap();
    let after = now_in(TimestampUnit::Millis);
    let value: i64 = server.value(KEY).unwrap().parse().unwrap();
    assert!(
        (before + 10_001..=after + 10_001).contains(&value),
        "{before} {value} {after}"
    );
    // The safety net: a server TTL the grace past the expiry.
    let grace = i64::try_from(DEFAULT_LEGACY_GRACE.as_millis()).unwrap();
    let left = server.pttl(KEY);
    assert!((grace + 9_000..=grace + 10_002).contains(&left), "{left}");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert_eq!(server.value(KEY), None);

    // Without a grace, no server TTL at all, like the deployed clients.
    let bare = legacy_builder(&server, LegacyTimestamp::new().grace(None))
        .build()
        .unwrap();
    let guard = bare.try_lock("k").unwrap().unwrap();
    assert_eq!(server.pttl(KEY), -1);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn deployed_clients_and_legacy_mode_clients_incrementing_one_counter_lose_no_update() {
    let server = RedisServer::start();
    let rounds = 8 * stress_factor();
    let ttl = Duration::from_secs(10);
    let inside = AtomicUsize::new(0);
    let go = Barrier::new(6);
    // Attempts that found the lock busy, per kind: proof that they contended.
    let (deployed_busy, legacy_busy) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    thread::scope(|s| {
        for i in 0..3 {
            let (server, inside, go, busy) = (&server, &inside, &go, &deployed_busy);
            s.spawn(move || {
                let mut deployed = Deployed::new(server, KEY, TimestampUnit::Millis, ttl);
                let mut con = server.conn();
                go.wait();
                for round in 0..rounds {
                    assert!(
                        deployed.lock(Duration::from_secs(30)),
                        "deployed {i} starved"
                    );
                    increment(&mut con, inside);
                    if round % 2 == 0 {
                        deployed.unlock_unconditionally();
                    } else {
                        deployed.unlock_if_unexpired();
                    }
                }
                busy.fetch_add(deployed.misses, Ordering::SeqCst);
            });
        }
        for _ in 0..3 {
            let (server, inside, go, busy) = (&server, &inside, &go, &legacy_busy);
            s.spawn(move || {
                let client = legacy_builder(server, LegacyTimestamp::new())
                    .ttl(ttl)
                    .build()
                    .unwrap();
                let mut con = server.conn();
                go.wait();
                for _ in 0..rounds {
                    let guard = client.try_lock_for("k", Duration::from_secs(30)).unwrap();
                    let guard = guard.expect("legacy client starved");
                    increment(&mut con, inside);
                    assert_eq!(guard.unlock().unwrap(), Release::Released);
                }
                let m = client.metrics();
                let misses = m.attempts - m.acquired;
                busy.fetch_add(usize::try_from(misses).unwrap(), Ordering::SeqCst);
            });
        }
    });
    assert_eq!(counter(&server), 6 * rounds as u64);
    let (deployed_busy, legacy_busy) = (deployed_busy.into_inner(), legacy_busy.into_inner());
    eprintln!(
        "{} increments in {:?}; busy attempts: deployed {deployed_busy}, legacy {legacy_busy}",
        6 * rounds,
        start.elapsed()
    );
    assert!(deployed_busy > 0 && legacy_busy > 0, "no contention");
}

#[test]
fn an_expired_value_is_taken_over_exactly_once_by_legacy_and_deployed_contenders() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(10);
    // Uncontended: the value a crashed deployed client left is taken over at once.
    let stale = (now_in(TimestampUnit::Millis) - 5_000).to_string();
    server.set(KEY, &stale);
    let client = fixed_legacy(&server, ttl);
    let guard = client
        .try_lock("k")
        .unwrap()
        .expect("expired value not taken over");
    assert_ne!(server.value(KEY).unwrap(), stale);
    assert_eq!(guard.unlock().unwrap(), Release::Released);

    // Contended: three legacy-mode and three deployed clients, one attempt each.
    let rounds = 15 * stress_factor();
    let contenders = 6;
    let start = Barrier::new(contenders + 1);
    let done = Barrier::new(contenders + 1);
    let wins = AtomicUsize::new(0);
    let legacy_wins = AtomicUsize::new(0);
    let per_round = thread::scope(|s| {
        for _ in 0..3 {
            let (start, done, wins, legacy_wins) = (&start, &done, &wins, &legacy_wins);
            let client = fixed_legacy(&server, ttl);
            s.spawn(move || {
                for _ in 0..rounds {
                    start.wait();
                    let guard = client.try_lock("k").unwrap();
                    if guard.is_some() {
                        wins.fetch_add(1, Ordering::SeqCst);
                        legacy_wins.fetch_add(1, Ordering::SeqCst);
                    }
                    done.wait();
                    // Leaked like a crash: the next round starts from a stale value.
                    std::mem::forget(guard);
                }
            });
        }
        for _ in 0..3 {
            let (start, done, wins, server) = (&start, &done, &wins, &server);
            s.spawn(move || {
                let mut deployed = Deployed::new(server, KEY, TimestampUnit::Millis, ttl);
                for _ in 0..rounds {
                    start.wait();
                    if deployed.try_once() {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                    done.wait();
                }
            });
        }
        // Asserted after the scope: a panic here would leave the contenders waiting.
        (0..rounds)
            .map(|_| {
                server.set(KEY, &(now_in(TimestampUnit::Millis) - 5_000).to_string());
                start.wait();
                done.wait();
                wins.swap(0, Ordering::SeqCst)
            })
            .collect::<Vec<_>>()
    });
    assert!(
        per_round.iter().all(|&n| n == 1),
        "winners per round: {per_round:?}"
    );
    let legacy_wins = legacy_wins.load(Ordering::SeqCst);
    eprintln!("legacy-mode clients won {legacy_wins} of {rounds} takeovers");
    assert!(legacy_wins > 0, "no takeover by the legacy scheme");
}

#[test]
fn a_crashed_legacy_holder_is_taken_over_by_one_deployed_client_after_its_expiry() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let crashed = fixed_legacy(&server, ttl);
    let taken = Instant::now();
    let guard = crashed.try_lock("k").unwrap().unwrap();
    // A crash: nothing releases or renews the lease any more.
    std::mem::forget(guard);
    drop(crashed);

    let go = Barrier::new(3);
    let winners: Vec<Duration> = thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (server, go) = (&server, &go);
                s.spawn(move || {
                    let mut d =
                        Deployed::new(server, KEY, TimestampUnit::Millis, Duration::from_secs(30));
                    go.wait();
                    d.lock(Duration::from_secs(3)).then(|| taken.elapsed())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert!(winners[0] >= ttl, "taken over before expiry: {winners:?}");
    assert!(winners[0] < ttl + DEPLOYED_POLL + SLACK, "{winners:?}");
    // Their GETSET dropped our safety-net TTL, as deployed clients always do.
    assert_eq!(server.pttl(KEY), -1);
}

#[test]
fn a_late_release_never_deletes_a_deployed_clients_takeover_and_reports_taken() {
    let server = RedisServer::start();
    let client = fixed_legacy(&server, Duration::from_secs(1));
    let guard = client.try_lock("k").unwrap().unwrap();
    let ours = server.value(KEY).unwrap();

    let mut deployed = Deployed::new(&server, KEY, TimestampUnit::Millis, Duration::from_secs(30));
    assert!(!deployed.try_once(), "taken over before expiry");
    assert!(deployed.lock(Duration::from_secs(3)));
    let theirs = server.value(KEY).unwrap();
    assert_ne!(theirs, ours);
    assert!(!guard.is_held());

    // Neither a late extend nor a late release touches their value.
    assert!(
        guard
            .extend(Duration::from_secs(5))
            .unwrap_err()
            .is_lock_lost()
    );
    assert_eq!(server.value(KEY).as_ref(), Some(&theirs));
    assert_eq!(guard.unlock().unwrap(), Release::Taken);
    assert_eq!(server.value(KEY).as_ref(), Some(&theirs));
    // And their careful release still finds their own lock to delete.
    deployed.unlock_if_unexpired();
    assert_eq!(server.value(KEY), None);
}

#[test]
fn the_seconds_unit_interoperates_with_a_seconds_deployed_client() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let seconds = LegacyTimestamp::new().unit(TimestampUnit::Seconds);
    let client = legacy_builder(&server, seconds.clone())
        .ttl(ttl)
        .renewal(Renewal::None)
        .build()
        .unwrap();
    let mut deployed = Deployed::new(&server, KEY, TimestampUnit::Seconds, ttl);

    // Our value is in seconds: now + ttl + 1.
    let before = now_in(TimestampUnit::Seconds);
    let guard = client.try_lock("k").unwrap().unwrap();
    let value: i64 = server.value(KEY).unwrap().parse().unwrap();
    assert!((before + 2..=now_in(TimestampUnit::Seconds) + 2).contains(&value));
    assert!(!deployed.try_once());
    assert_eq!(guard.unlock().unwrap(), Release::Released);

    // Theirs is respected while unexpired, and taken over once expired.
    assert!(deployed.try_once());
    assert!(client.try_lock("k").unwrap().is_none());
    deployed.unlock_if_unexpired();
    server.set(KEY, &(now_in(TimestampUnit::Seconds) - 2).to_string());
    let guard = client
        .try_lock("k")
        .unwrap()
        .expect("expired seconds value");
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    // A milliseconds value is far in the future for a seconds client: held.
    server.set(KEY, &now_in(TimestampUnit::Millis).to_string());
    assert!(client.try_lock("k").unwrap().is_none());
    server.del(KEY);

    // A crashed seconds holder is taken over by the seconds client after its expiry.
    let taken = Instant::now();
    std::mem::forget(client.try_lock("k").unwrap().unwrap());
    assert!(deployed.lock(Duration::from_secs(5)));
    let waited = taken.elapsed();
    assert!(waited >= ttl, "{waited:?}");
    assert!(waited < 3 * ttl + DEPLOYED_POLL + SLACK, "{waited:?}");
}

#[test]
fn values_that_are_not_timestamps_are_waited_for_and_never_overwritten() {
    let server = RedisServer::start();
    let client = legacy_builder(&server, LegacyTimestamp::new())
        .build()
        .unwrap();
    let token = uuid::Uuid::new_v4().to_string();
    let wait = Duration::from_millis(200);
    for value in [token.as_str(), "not a number", "", "1.7e12", "12 "] {
        server.set(KEY, value);
        let start = Instant::now();
        assert!(
            client.try_lock_for("k", wait).unwrap().is_none(),
            "{value:?}"
        );
        let waited = start.elapsed();
        assert!(
            waited >= wait && waited < wait + SLACK,
            "{value:?}: {waited:?}"
        );
        assert_eq!(server.value(KEY).as_deref(), Some(value));
        assert_eq!(server.pttl(KEY), -1);
    }

    // A hash (the reentrant scheme's layout): WRONGTYPE is "held", not an error.
    server.del(KEY);
    let () = server.query(redis::cmd("HSET").arg(KEY).arg("owner:1").arg(1));
    let start = Instant::now();
    assert!(client.try_lock_for("k", wait).unwrap().is_none());
    assert!(start.elapsed() >= wait);
    let kind: String = server.query(redis::cmd("TYPE").arg(KEY));
    assert_eq!(kind, "hash");
    let count: Option<i64> = server.query(redis::cmd("HGET").arg(KEY).arg("owner:1"));
    assert_eq!(count, Some(1));

    // A token with a TTL is waited out: acquired once it disappears.
    server.del(KEY);
    let () = server.query(redis::cmd("SET").arg(KEY).arg(&token).arg("PX").arg(400));
    let start = Instant::now();
    let guard = client.try_lock_for("k", Duration::from_secs(3)).unwrap();
    assert!(guard.is_some());
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(350), "{waited:?}");
    assert!(waited < Duration::from_millis(400) + SLACK, "{waited:?}");
}

/// Legacy-mode and token-mode redlease clients exclude each other on one key, because
/// each sees the other's value as held: token mode's `SET NX PX` fails on any existing
/// key (a timestamp too), and legacy mode takes over only a value that parses as an
/// expired timestamp, never a token. The legacy release publishes on the key's channel,
/// so token-mode waiters wake at once instead of waiting out the legacy value's TTL.
#[test]
fn legacy_mode_and_token_mode_clients_exclude_each_other_on_one_key() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(10);
    // Fixed leases: a renewal would rewrite the legacy value the test compares.
    let legacy = legacy_builder(&server, LegacyTimestamp::new())
        .ttl(ttl)
        .renewal(Renewal::None)
        .build()
        .unwrap();
    let token = LockClient::builder(server.url())
        .key_prefix("lock:")
        .ttl(ttl)
        .build()
        .unwrap();

    let held = legacy.try_lock("k").unwrap().unwrap();
    let value = server.value(KEY);
    assert!(token.try_lock("k").unwrap().is_none());
    assert!(
        token
            .try_lock_for("k", Duration::from_millis(200))
            .unwrap()
            .is_none()
    );
    assert_eq!(server.value(KEY), value);
    assert_eq!(held.unlock().unwrap(), Release::Released);

    let held = token.try_lock("k").unwrap().unwrap();
    let value = server.value(KEY);
    assert!(legacy.try_lock("k").unwrap().is_none());
    assert!(
        legacy
            .try_lock_for("k", Duration::from_millis(200))
            .unwrap()
            .is_none()
    );
    assert_eq!(server.value(KEY), value);
    assert_eq!(held.unlock().unwrap(), Release::Released);

    // A token-mode waiter held off by a legacy lease (server TTL: 10 s + grace) wakes
    // on the legacy release's message, not at that TTL.
    let held = legacy.try_lock("k").unwrap().unwrap();
    let attempts = token.metrics().attempts;
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = token.try_lock_for("k", Duration::from_secs(5)).unwrap();
            (guard.map(LockGuard::unlock), Instant::now())
        });
        assert!(eventually(Duration::from_secs(2), || {
            token.metrics().attempts > attempts
        }));
        let released = Instant::now();
        assert_eq!(held.unlock().unwrap(), Release::Released);
        let (outcome, acquired) = waiter.join().unwrap();
        assert_eq!(outcome.unwrap().unwrap(), Release::Released);
        let woke = acquired - released;
        assert!(woke < Duration::from_secs(1), "token waiter slept {woke:?}");
    });

    // Both kinds at once during a rollout: the counter stays exact.
    let rounds = 10 * stress_factor();
    let inside = AtomicUsize::new(0);
    let go = Barrier::new(4);
    let start = Instant::now();
    thread::scope(|s| {
        for client in [&legacy, &legacy, &token, &token] {
            let (server, inside, go) = (&server, &inside, &go);
            s.spawn(move || {
                let mut con = server.conn();
                go.wait();
                for _ in 0..rounds {
                    let guard = client.try_lock_for("k", Duration::from_secs(20)).unwrap();
                    let guard: LockGuard = guard.expect("starved");
                    increment(&mut con, inside);
                    assert_eq!(guard.unlock().unwrap(), Release::Released);
                }
            });
        }
    });
    assert_eq!(counter(&server), 4 * rounds as u64);
    let (l, t) = (legacy.metrics(), token.metrics());
    // Acquisitions are won attempts plus locks handed over by a releasing guard of
    // the same client; every other attempt found the lock busy.
    let busy = |m: &redlease::Metrics| m.attempts - (m.acquired - m.handoffs);
    eprintln!(
        "{} mixed increments in {:?}; busy attempts: legacy {}, token {}",
        4 * rounds,
        start.elapsed(),
        busy(&l),
        busy(&t)
    );
    assert!(busy(&l) > 0 && busy(&t) > 0, "no contention");
}

/// Holds a renewed legacy lease (TTL 1 s) through 2.5 s of work while two deployed
/// clients keep trying; returns the holder's client for further checks.
fn renewal_keeps_deployed_clients_out(server: &RedisServer, clock: Clock) -> LockClient {
    let ttl = Duration::from_secs(1);
    let client = legacy_builder(server, LegacyTimestamp::new().clock(clock))
        .ttl(ttl)
        .renewal(Renewal::Auto)
        .build()
        .unwrap();
    server.reset_stats(); // `build` probes the user's permissions
    let guard = client.try_lock("k").unwrap().unwrap();
    let first: i64 = server.value(KEY).unwrap().parse().unwrap();
    let stop = AtomicBool::new(false);
    let (wins, looks) = (AtomicUsize::new(0), AtomicUsize::new(0));
    thread::scope(|s| {
        for _ in 0..2 {
            let (stop, wins, looks) = (&stop, &wins, &looks);
            s.spawn(move || {
                let mut d = Deployed::new(server, KEY, TimestampUnit::Millis, ttl);
                let mut con = server.conn();
                let end = Instant::now() + Duration::from_secs(10);
                while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                    let seen: i64 = redis::cmd("GET")
                        .arg(KEY)
                        .query::<String>(&mut con)
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert!(
                        seen >= now_in(TimestampUnit::Millis),
                        "saw an expired lease"
                    );
                    looks.fetch_add(1, Ordering::SeqCst);
                    if d.try_once() {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(DEPLOYED_POLL);
                }
            });
        }
        // The work: let 2.5 TTLs pass under the lock.
        thread::sleep(Duration::from_millis(2_500));
        stop.store(true, Ordering::SeqCst);
    });
    assert_eq!(wins.load(Ordering::SeqCst), 0);
    assert!(
        looks.load(Ordering::SeqCst) >= 20,
        "deployed clients barely tried"
    );
    assert!(guard.is_held());
    let last: i64 = server.value(KEY).unwrap().parse().unwrap();
    assert!(last >= first + 1_500, "not renewed: {first} → {last}");
    assert!(client.metrics().renewals >= 5);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let mut d = Deployed::new(server, KEY, TimestampUnit::Millis, ttl);
    assert!(d.try_once(), "released lock not free");
    client
}

#[test]
fn renewal_keeps_deployed_clients_out_on_the_local_clock() {
    let server = RedisServer::start();
    let client = renewal_keeps_deployed_clients_out(&server, Clock::Local);
    assert_eq!(server.command_calls("time"), 0);
    drop(client);
}

#[test]
fn renewal_keeps_deployed_clients_out_on_the_redis_clock() {
    let server = RedisServer::start();
    let client = renewal_keeps_deployed_clients_out(&server, Clock::Redis);
    // One TIME per acquire attempt: the value came from the server's clock.
    assert_eq!(server.command_calls("time"), 1);
    server.del(KEY);
    let guard = client.try_lock("k").unwrap().unwrap();
    let value: i64 = server.value(KEY).unwrap().parse().unwrap();
    let expected = redis_ms(&server) + 1_001;
    assert!(
        (expected - 200..=expected).contains(&value),
        "{value} vs {expected}"
    );
    assert_eq!(server.command_calls("time"), 3);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_waiting_legacy_client_takes_a_crashed_deployed_lock_over_soon_after_its_expiry() {
    let server = RedisServer::start();
    let client = fixed_legacy(&server, Duration::from_secs(10));
    // A deployed client took the lock for 2 s and crashed: no release will come.
    let left = Duration::from_secs(2);
    let expires = now_in(TimestampUnit::Millis) + 2_000;
    server.set(KEY, &expires.to_string());
    let start = Instant::now();
    let guard = client.try_lock_for("k", Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(guard.is_some());
    assert!(waited >= Duration::from_millis(1_980), "{waited:?}");
    // Polling is bounded by the stored expiry, plus one backoff step at most.
    assert!(waited < left + DEFAULT_BACKOFF_MAX + SLACK, "{waited:?}");
    assert!(server.value(KEY).unwrap().parse::<i64>().unwrap() > expires);
}

#[test]
fn a_legacy_waiter_notices_a_deployed_clients_bare_del_within_one_backoff_step() {
    let server = RedisServer::start();
    let client = fixed_legacy(&server, Duration::from_secs(10));
    let mut deployed = Deployed::new(&server, KEY, TimestampUnit::Millis, Duration::from_secs(10));
    assert!(deployed.try_once());
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = client.try_lock_for("k", Duration::from_secs(5)).unwrap();
            (guard.is_some(), Instant::now())
        });
        assert!(eventually(Duration::from_secs(2), || {
            client.metrics().attempts >= 2
        }));
        // Deployed clients never publish: the waiter must be polling to see this.
        let released = Instant::now();
        deployed.unlock_unconditionally();
        let (acquired, at) = waiter.join().unwrap();
        assert!(acquired);
        let noticed = at - released;
        assert!(noticed < DEFAULT_BACKOFF_MAX + SLACK, "{noticed:?}");
    });
}

#[test]
fn an_extend_whose_reply_is_lost_is_no_false_loss() {
    let server = RedisServer::start();
    let client = legacy_builder(&server, LegacyTimestamp::new())
        .ttl(Duration::from_secs(5))
        .renewal(Renewal::None)
        .read_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let guard = client.lock("k").unwrap();
    // A first extend loads the script, so the one below runs when it arrives.
    guard.extend(Duration::from_secs(5)).unwrap();
    let first = server.value("lock:k").unwrap();
    // The extend reaches a paused server: no reply in time, so its outcome is
    // unknown; it runs when the server resumes and rewrites the expiry.
    server.pause();
    let err = guard.extend(Duration::from_secs(6)).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    server.resume();
    assert!(eventually(Duration::from_secs(2), || {
        server.value("lock:k").is_some_and(|v| v != first)
    }));
    // The value it wrote counts as ours: the next extend and the release find it.
    guard.extend(Duration::from_secs(5)).unwrap();
    assert!(guard.is_held());
    assert_eq!(client.metrics().leases_lost, 0);
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    assert!(server.value("lock:k").is_none());
}
