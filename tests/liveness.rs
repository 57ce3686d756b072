//! Liveness: a client's locks live only while the client does. A holder killed
//! without a word (SIGKILL of a separate process) has its locks taken by waiters
//! about one liveness after its last refresh, not after their TTL; a holder cut
//! off for longer knows it lost before any waiter holds; nothing breaks a value
//! whose writer declared no liveness.
//!
//! The holders that die are separate processes: this test binary run again as
//! `child_holds_locks` (ignored when run by itself), which takes its locks,
//! prints their fences and waits to be killed.

mod support;

use std::process::Child;
use std::time::{Duration, Instant};

use redlease::{
    ClientTag, Error, LegacyTimestamp, LockClient, LockOptions, LossReason, Owner, Release, Scheme,
};
use support::alone::spawn_until_ready;
use support::proxy::Proxy;
use support::{RedisServer, eventually};

/// The liveness the holders declare in these tests.
const LIVENESS: Duration = Duration::from_secs(1);
/// The lock keys' own TTL: far longer than any wait here.
const TTL: Duration = Duration::from_secs(30);
/// How long after a holder's death its locks may still be held: the liveness
/// (the record expires at most that long after the last refresh), then one look
/// and one acquire, with room for a 200 ms stall of a loaded machine and more.
const TAKEN_WITHIN: Duration = Duration::from_millis(1000 + 1200);

/// The environment variables that make this binary a holder.
const CHILD_URL: &str = "LIVENESS_CHILD_URL";
const CHILD_ARGS: &str = "LIVENESS_CHILD_ARGS";

/// A holder process: takes `count` locks `prefix0..` (the first one fenced),
/// with liveness unless `live` is false; prints `fence <n>` then `ready`.
fn holder(server: &RedisServer, prefix: &str, count: usize, live: bool) -> (Child, u64) {
    holder_of(server, prefix, count, live, "token")
}

/// [`holder`] in `scheme` (`token` or `reentrant`).
fn holder_of(
    server: &RedisServer,
    prefix: &str,
    count: usize,
    live: bool,
    scheme: &str,
) -> (Child, u64) {
    let env = [
        (CHILD_URL, server.url()),
        (CHILD_ARGS, format!("{prefix} {count} {live} {scheme}")),
    ];
    let (child, said) = spawn_until_ready("child_holds_locks", &env);
    let fence = said
        .iter()
        .find_map(|l| l.split_once("fence ").and_then(|(_, f)| f.parse().ok()))
        .unwrap_or(0);
    (child, fence)
}

/// Run as a separate process by [`holder`]: holds its locks until killed (or
/// for at most two minutes).
#[test]
#[ignore = "a holder process of the other tests"]
fn child_holds_locks() {
    let (Ok(url), Ok(args)) = (std::env::var(CHILD_URL), std::env::var(CHILD_ARGS)) else {
        return;
    };
    let mut args = args.split(' ');
    let prefix = args.next().unwrap();
    let count: usize = args.next().unwrap().parse().unwrap();
    let live = args.next() == Some("true");
    let scheme = match args.next() {
        Some("reentrant") => Scheme::Reentrant,
        _ => Scheme::Token,
    };
    let mut builder = LockClient::builder(url.as_str()).ttl(TTL);
    if live {
        builder = builder.liveness(LIVENESS);
    }
    let client = builder.build().unwrap();
    if prefix.ends_with("group") {
        return hold_partitions(&client, prefix, count);
    }
    let opts = LockOptions::new().scheme(scheme);
    let fenced = client
        .lock_with(&format!("{prefix}0"), &opts.clone().fencing(true))
        .unwrap()
        .unwrap();
    println!("fence {}", fenced.fence().unwrap());
    let guards: Vec<_> = (1..count)
        .map(|i| {
            let name = format!("{prefix}{i}");
            client.lock_with(&name, &opts).unwrap().unwrap()
        })
        .collect();
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
    drop((guards, fenced));
}

/// [`child_holds_locks`] as a partition group's member: joins `group`'s
/// `count` partitions alone, prints `ready` once it holds them all.
fn hold_partitions(client: &LockClient, group: &str, count: usize) {
    let member = client
        .partitions(group, u32::try_from(count).unwrap())
        .unwrap()
        .join()
        .unwrap();
    let all = eventually(Duration::from_secs(30), || member.held().len() == count);
    assert!(all, "the member took {:?} of {count}", member.held());
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
}

/// A partition group's member with liveness, killed with every partition: a
/// member joining after it holds them all about one liveness later (its
/// record ends with its session, and its locks are broken), not after the
/// TTL; without liveness, the dead member's partitions stay where they are.
#[test]
fn a_killed_members_partitions_move_within_its_liveness_and_only_then() {
    let server = RedisServer::start();
    let partitions = 4;
    for live in [true, false] {
        let group = format!("{live}group");
        let (mut child, _) = holder_of(&server, &group, partitions, live, "");
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        let client = LockClient::builder(server.url())
            .ttl(TTL)
            .liveness(LIVENESS)
            .build()
            .unwrap();
        let member = client
            .partitions(&group, u32::try_from(partitions).unwrap())
            .unwrap()
            .join()
            .unwrap();
        // The member's window is its liveness; its rounds a third of it.
        let bound = TAKEN_WITHIN + LIVENESS;
        let all = eventually(bound, || member.held().len() == partitions);
        let took = killed.elapsed();
        if live {
            assert!(all, "after {took:?}, held {:?}", member.held());
            let broken = client.metrics().dead_holders_broken;
            assert_eq!(broken, 4, "each lock broken once");
        } else {
            assert!(
                !all,
                "a member without liveness lost its partitions after {took:?}"
            );
            assert_eq!(client.metrics().dead_holders_broken, 0);
        }
        member.leave().unwrap();
    }
}

fn waiter(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url()).ttl(TTL).build().unwrap()
}

#[test]
fn a_killed_holders_locks_are_taken_within_its_liveness_fenced_or_not() {
    let server = RedisServer::start();
    let client = waiter(&server);
    for (run, count) in [(0, 2), (1, 1000)] {
        let prefix = format!("crash{run}:");
        let (mut child, fence) = holder(&server, &prefix, count, true);
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        let wait = Duration::from_secs(10);
        let opts = LockOptions::new().fencing(true).wait(wait);
        let first = client
            .lock_with(&format!("{prefix}0"), &opts)
            .unwrap()
            .unwrap();
        let took = killed.elapsed();
        assert!(
            took <= TAKEN_WITHIN,
            "{count} leases: the fenced lock was taken {took:?} after the kill"
        );
        assert!(first.fence().unwrap() > fence, "fences keep rising");
        let last = format!("{prefix}{}", count - 1);
        let other = client.try_lock_for(&last, wait).unwrap().unwrap();
        let took = killed.elapsed();
        assert!(
            took <= TAKEN_WITHIN,
            "{count} leases: the last lock was taken {took:?} after the kill"
        );
        assert!(first.is_held() && other.is_held());
    }
    assert!(client.metrics().dead_holders_broken >= 2);
}

#[test]
fn a_killed_holders_redisson_format_locks_are_taken_within_its_liveness() {
    let server = RedisServer::start();
    let client = waiter(&server);
    let (mut child, fence) = holder_of(&server, "re:", 2, true, "reentrant");
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let opts = LockOptions::new()
        .scheme(Scheme::Reentrant)
        .fencing(true)
        .wait(Duration::from_secs(10));
    let first = client.lock_with("re:0", &opts).unwrap().unwrap();
    let other = client.lock_with("re:1", &opts).unwrap().unwrap();
    let took = killed.elapsed();
    assert!(took <= TAKEN_WITHIN, "taken {took:?} after the kill");
    assert!(first.fence().unwrap() > fence, "fences keep rising");
    assert!(first.is_held() && other.is_held());
    assert_eq!(client.metrics().dead_holders_broken, 2);
}

#[test]
fn a_holder_without_liveness_foreign_values_and_older_tokens_stay_bound_by_their_ttl() {
    let server = RedisServer::start();
    let (mut child, _) = holder(&server, "plain:", 1, false);
    child.kill().unwrap();
    child.wait().unwrap();
    let (mut child, _) = holder_of(&server, "plain-re:", 1, false, "reentrant");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut conn = server.conn();
    let set = |conn: &mut redis::Connection, key: &str, value: &str| {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(30_000)
            .exec(conn)
            .unwrap();
    };
    // redis-py's token, an older redlease version's (a version 4 tag), with its
    // waiter's mark, and a value kept for a minimum hold by a liveness client.
    set(&mut conn, "redispy", "0123456789abcdef0123456789abcdef");
    set(&mut conn, "older", "rl2:0123456789ab4def:1");
    set(
        &mut conn,
        "older-marked",
        "rl1:0123456789ab4def0123456789abcdef+",
    );
    set(&mut conn, "kept", "rl2:0123456789ab8def:1~");
    // A Redisson lock (its owner field names a version 4 UUID) and a legacy
    // timestamp far in the future.
    redis::cmd("HSET")
        .arg("redisson")
        .arg("6f1c4a2e-9b7d-4c3e-8a5f-0d2b1e7c9a4b:1")
        .arg(1)
        .exec(&mut conn)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg("redisson")
        .arg(30_000)
        .exec(&mut conn)
        .unwrap();
    let far = (std::time::SystemTime::now() + Duration::from_secs(600))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    set(&mut conn, "legacy", &far);
    let before: Vec<(String, String)> = ["plain:0", "redispy", "older", "older-marked", "kept"]
        .iter()
        .map(|k| {
            let v: String = redis::cmd("GET").arg(*k).query(&mut conn).unwrap();
            ((*k).to_owned(), v)
        })
        .collect();
    let waiters = [
        LockClient::builder(server.url()).build().unwrap(),
        LockClient::builder(server.url())
            .liveness(LIVENESS)
            .build()
            .unwrap(),
    ];
    // Twice the liveness: a session that had declared one would be over.
    let wait = 2 * LIVENESS + Duration::from_millis(500);
    for client in &waiters {
        let keys = [
            "plain:0",
            "redispy",
            "older",
            "older-marked",
            "kept",
            "redisson",
        ];
        std::thread::scope(|s| {
            for key in keys {
                s.spawn(move || {
                    let got = client.try_lock_for(key, wait).unwrap();
                    assert!(got.is_none(), "{key} was taken");
                });
            }
        });
        // A Redisson-format waiter on the Redisson lock and on a reentrant lock
        // of a holder without liveness.
        let reentrant = LockOptions::new().scheme(Scheme::Reentrant).wait(wait);
        for key in ["redisson", "plain-re:0"] {
            let got = client.lock_with(key, &reentrant).unwrap();
            assert!(got.is_none(), "{key} was taken");
        }
        let legacy = LockClient::builder(server.url())
            .scheme(Scheme::LegacyTimestamp(LegacyTimestamp::new()))
            .build()
            .unwrap();
        assert!(legacy.try_lock_for("legacy", wait).unwrap().is_none());
        assert_eq!(client.metrics().dead_holders_broken, 0);
    }
    for (key, value) in before {
        let now: String = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
        let unmarked = now.strip_suffix('+').unwrap_or(&now);
        assert_eq!(unmarked, value.strip_suffix('+').unwrap_or(&value), "{key}");
    }
}

/// A client over `proxy` with the test's liveness (or `liveness`).
fn proxied(proxy: &Proxy, liveness: Duration) -> LockClient {
    LockClient::builder(proxy.url())
        .ttl(TTL)
        .liveness(liveness)
        .read_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn a_holder_cut_off_for_twice_its_liveness_knows_it_lost_before_a_waiter_holds() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = proxied(&proxy, LIVENESS);
    let client = waiter(&server);
    for round in 0..2 {
        let fenced = LockOptions::new().fencing(true);
        let held: Vec<_> = (0..5)
            .map(|i| {
                holder
                    .lock_with(&format!("cut{round}:{i}"), &fenced)
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let losses: Vec<_> = held.iter().map(redlease::LockGuard::lost).collect();
        proxy.blackhole(true);
        let cut = Instant::now();
        let wait = LockOptions::new()
            .fencing(true)
            .wait(Duration::from_secs(10));
        let taken = client
            .lock_with(&format!("cut{round}:0"), &wait)
            .unwrap()
            .unwrap();
        let taken_at = Instant::now();
        let taken_after = taken_at - cut;
        // Every lease's validity (what `is_held` reads) had ended before the
        // waiter held, and the loss is told: the renewal thread tells it at that
        // end, which a loaded machine may delay by a stall.
        for (guard, lost) in held.iter().zip(&losses) {
            assert!(
                guard.valid_until() < taken_at,
                "held until {:?} after the waiter took it",
                guard.valid_until() - taken_at
            );
            assert!(!guard.is_held());
            let msg = lost
                .recv_timeout(Duration::from_secs(2))
                .expect("the loss is told");
            assert_eq!(msg.reason, LossReason::SessionEnded);
        }
        assert!(
            taken_after >= LIVENESS / 2 && taken_after <= TAKEN_WITHIN + LIVENESS,
            "taken {taken_after:?} after the cut"
        );
        assert!(taken.fence().unwrap() > held[0].fence().unwrap());
        // Twice the liveness, then the holder is back: its leases stay lost, and
        // it can lock again under a new session.
        let until = cut + 2 * LIVENESS;
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        proxy.blackhole(false);
        assert!(held.iter().all(|g| !g.is_held()));
        // The holder gives back what it lost and nobody took: nothing renews
        // those values now, and they would keep their locks until their TTL.
        let mut conn = server.conn();
        let left = |conn: &mut redis::Connection| -> usize {
            (1..5)
                .filter(|i| {
                    let key = format!("cut{round}:{i}");
                    redis::cmd("EXISTS").arg(key).query::<bool>(conn).unwrap()
                })
                .count()
        };
        assert!(
            eventually(Duration::from_secs(5), || left(&mut conn) == 0),
            "{} lost locks still stored",
            left(&mut conn)
        );
        for guard in held {
            assert_ne!(guard.unlock().ok(), Some(Release::Released));
        }
        let again = holder
            .try_lock_for(&format!("again{round}"), Duration::from_secs(5))
            .unwrap()
            .expect("locks after the session's end");
        assert!(eventually(Duration::from_secs(5), || again.is_held()));
        drop((taken, again));
    }
}

#[test]
fn a_holder_stalled_for_half_its_liveness_loses_nothing() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let liveness = Duration::from_secs(3);
    let holder = proxied(&proxy, liveness);
    let client = waiter(&server);
    let held: Vec<_> = (0..5)
        .map(|i| holder.lock(&format!("stall:{i}")).unwrap())
        .collect();
    for _ in 0..2 {
        proxy.blackhole(true);
        let busy = client.try_lock_for("stall:0", liveness / 2).unwrap();
        proxy.blackhole(false);
        assert!(
            busy.is_none(),
            "taken from a holder stalled for half its liveness"
        );
        assert!(
            held.iter().all(redlease::LockGuard::is_held),
            "a lease was lost"
        );
        // The next refreshes are answered before the next stall.
        std::thread::sleep(liveness / 2);
    }
    for guard in held {
        assert!(guard.lost().try_recv().is_err());
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    }
}

#[test]
fn a_session_record_deleted_by_hand_ends_every_lease_and_the_next_lock_starts_a_new_one() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .ttl(TTL)
        .liveness(LIVENESS)
        .build()
        .unwrap();
    let guard = holder.lock("record").unwrap();
    let mut conn = server.conn();
    let token: String = redis::cmd("GET").arg("record").query(&mut conn).unwrap();
    let tag = ClientTag::of_token(&token).unwrap();
    assert!(tag.declares_liveness());
    let owner = Owner::lookup(&mut conn, "", tag).unwrap();
    assert_eq!(owner.session().unwrap().liveness(), Some(LIVENESS));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(tag.session_key(""))
        .query(&mut conn)
        .unwrap();
    assert!(
        pttl > 0 && pttl <= 1000,
        "the record's TTL is the liveness: {pttl}"
    );
    redis::cmd("DEL")
        .arg(tag.session_key(""))
        .exec(&mut conn)
        .unwrap();
    let lost = guard
        .lost()
        .recv_timeout(LIVENESS + Duration::from_secs(1))
        .expect("the holder learns at its next refresh");
    assert_eq!(lost.reason, LossReason::SessionEnded);
    assert!(!guard.is_held());
    let next = holder.lock("record-2").unwrap();
    assert!(eventually(Duration::from_secs(3), || next.is_held()));
    let owner = Owner::lookup(&mut conn, "", tag).unwrap();
    assert!(owner.is_alive(), "a new record for the next locks");
    assert!(next.lost().try_recv().is_err());
}

#[test]
fn liveness_is_checked_and_refused_with_a_redlock_quorum() {
    let server = RedisServer::start();
    let short = LockClient::builder(server.url())
        .liveness(Duration::from_millis(50))
        .build();
    assert!(matches!(short, Err(Error::Config { .. })), "{short:?}");
    let urls = [server.url(), server.url()];
    let quorum = LockClient::redlock(urls.iter().map(String::as_str))
        .liveness(LIVENESS)
        .build();
    assert!(matches!(quorum, Err(Error::Config { .. })), "{quorum:?}");
}

/// A client with liveness, as a service runs one for hours: each round a wait
/// that times out on a key without TTL, 8 threads handing one lock to each
/// other, an election won and resigned, a partition group joined and left, and
/// a lease deleted by hand whose `on_lost` callback is slow. Nothing of it may
/// lose another lease, break a lock or report a loss late.
#[test]
fn a_liveness_client_keeps_the_old_promises_in_one_long_process() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.url())
        .ttl(Duration::from_secs(5))
        .liveness(Duration::from_secs(2))
        .build()
        .unwrap();
    let kept = client.lock("kept").unwrap();
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("nottl")
        .arg("someone")
        .exec(&mut conn)
        .unwrap();
    for round in 0..3 {
        // A timed-out wait on a key another client holds without a TTL.
        let waited = client
            .try_lock_for("nottl", Duration::from_millis(300))
            .unwrap();
        assert!(waited.is_none());
        // 8 threads on one key: hand-offs, an exact count.
        let counter = format!("count{round}");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let mut conn = server.conn();
                    for _ in 0..25 {
                        let guard = client.lock("counted").unwrap();
                        let n: i64 = redis::cmd("GET")
                            .arg(&counter)
                            .query::<Option<i64>>(&mut conn)
                            .unwrap()
                            .unwrap_or(0);
                        redis::cmd("SET")
                            .arg(&counter)
                            .arg(n + 1)
                            .exec(&mut conn)
                            .unwrap();
                        assert!(guard.is_held());
                    }
                });
            }
        });
        let total: i64 = redis::cmd("GET").arg(&counter).query(&mut conn).unwrap();
        assert_eq!(total, 200, "round {round}");
        // An election won and resigned.
        let leadership = client.election("lead").unwrap().campaign().unwrap();
        assert!(leadership.is_held());
        assert_eq!(leadership.resign().unwrap(), Release::Released);
        // A partition group joined and left.
        let group = client.partitions(&format!("group{round}"), 4).unwrap();
        let member = group.join().unwrap();
        assert!(eventually(Duration::from_secs(10), || member.held().len() == 4));
        member.leave().unwrap();
        // A lease deleted by hand, its callback slow: told as expired (not as
        // the session's end), and no other lease with it.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let slow = LockOptions::new().on_lost(move |lost| {
            std::thread::sleep(Duration::from_millis(500));
            let _ = tx.send(lost.reason);
        });
        let doomed = client.lock_with("doomed", &slow).unwrap().unwrap();
        redis::cmd("DEL").arg("doomed").exec(&mut conn).unwrap();
        let reason = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(reason, LossReason::Expired);
        assert!(!doomed.is_held());
        assert!(kept.is_held(), "round {round}: an unrelated lease was lost");
    }
    let m = client.metrics();
    assert_eq!(m.leases_lost, 3, "{m:?}");
    assert_eq!(m.dead_holders_broken, 0);
    assert!(kept.lost().try_recv().is_err());
    assert_eq!(kept.unlock().unwrap(), Release::Released);
}

/// A live client's locks survive a restart of a server that persists them: the
/// session record comes back from the append-only file with its expiry, so a
/// waiter finds the holder alive, and the holder loses nothing.
#[test]
fn a_restart_with_persistence_breaks_no_live_clients_lock() {
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let holder = LockClient::builder(server.url())
        .ttl(TTL)
        .liveness(Duration::from_secs(3))
        .build()
        .unwrap();
    let client = waiter(&server);
    for round in 0..2 {
        let name = format!("persisted{round}");
        let guard = holder.lock(&name).unwrap();
        server.restart();
        let taken = client.try_lock_for(&name, Duration::from_secs(2)).unwrap();
        assert!(
            taken.is_none(),
            "round {round}: a live client's lock was broken"
        );
        assert!(guard.is_held(), "round {round}");
        assert!(guard.lost().try_recv().is_err());
        assert_eq!(guard.unlock().unwrap(), Release::Released);
    }
    assert_eq!(client.metrics().dead_holders_broken, 0);
}

/// A waiter whose key prefix is not its holder's: the holder's session record
/// lives under the holder's prefix, which the waiter cannot know from the
/// value. A live holder is never taken for a dead one (every prefix the lock
/// key allows is looked at before a break); a dead one is still broken.
#[test]
fn a_waiter_with_another_prefix_never_breaks_a_live_holder_and_still_breaks_a_dead_one() {
    let server = RedisServer::start();
    let holder = LockClient::builder(server.url())
        .key_prefix("app:")
        .ttl(TTL)
        .liveness(LIVENESS)
        .build()
        .unwrap();
    let waiter = waiter(&server);
    let wait = 2 * LIVENESS + Duration::from_millis(500);
    let schemes = [
        LockOptions::new(),
        LockOptions::new().fencing(true),
        LockOptions::new().scheme(Scheme::Reentrant),
    ];
    let mut held = Vec::new();
    for (i, opts) in schemes.iter().enumerate() {
        held.push(holder.lock_with(&format!("job{i}"), opts).unwrap().unwrap());
    }
    let pool = holder.semaphore("pool").unwrap();
    pool.ensure_permits(1).unwrap();
    let permit = pool.try_acquire().unwrap().unwrap();
    // Every waiter at once, each for two liveness periods and more.
    std::thread::scope(|s| {
        for (i, opts) in schemes.iter().enumerate() {
            let waiter = &waiter;
            s.spawn(move || {
                let got = waiter.lock_with(&format!("app:job{i}"), &opts.clone().wait(wait));
                assert!(matches!(got, Ok(None)), "job{i}: {got:?}");
            });
        }
        let theirs = waiter.semaphore("app:pool").unwrap();
        assert!(
            theirs.try_acquire_for(wait).unwrap().is_none(),
            "a live permit was taken"
        );
    });
    assert_eq!(waiter.metrics().dead_holders_broken, 0);
    assert!(held.iter().all(redlease::LockGuard::is_held) && permit.is_held());
    drop((held, permit));
    // A dead holder without a prefix, its lock `app:dead0`: broken by a
    // waiter whose prefix is `app:` (the record is found under neither).
    let (mut child, _) = holder_of(&server, "app:dead", 1, true, "token");
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let prefixed = LockClient::builder(server.url())
        .key_prefix("app:")
        .build()
        .unwrap();
    let got = prefixed
        .lock_with("dead0", &LockOptions::new().wait(Duration::from_secs(10)))
        .unwrap();
    let took = killed.elapsed();
    assert!(
        got.is_some() && took <= TAKEN_WITHIN,
        "taken {took:?} after the kill"
    );
}
