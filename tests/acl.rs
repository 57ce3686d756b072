mod support;

// Redis ACL users: the documented minimal rule works end to end, a user
// who could take a lock but not release it is refused by `build()` before any lock is
// taken, and a user without channel permissions (Redis 7's default) releases without an
// error while its waiters poll. No password ever shows in an error or `Debug` output.

use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient, LockClientBuilder, LockOptions, Release};
use support::acl::{
    CLUSTER_RULE, FAIR_RULE, LOCK_RULE, RWLOCK_RULE, SEMAPHORE_RULE, VALKEY_RULE, lock_rule,
    refusals, set_user, without,
};
use support::{RedisServer, eventually};

const PASSWORD: &str = "acl-s3cret-pw";

fn builder(server: &RedisServer, user: &str) -> LockClientBuilder {
    let url = format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port());
    LockClient::builder(url.as_str()).key_prefix("lock:")
}

/// Panics if `shown` contains the password.
fn no_password(shown: &str) {
    assert!(!shown.contains(PASSWORD), "password printed: {shown}");
}

fn shown(err: &Error) -> String {
    let text = format!("{err} | {err:?} | {err:#?}");
    no_password(&text);
    text
}

fn dbsize(server: &RedisServer) -> i64 {
    server.query(&redis::cmd("DBSIZE"))
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

/// Channels of `key` someone subscribes to.
fn subscribers(server: &RedisServer, key: &str) -> i64 {
    let channel = format!("{{{key}}}:released");
    let reply: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
    reply.1
}

#[test]
fn a_user_with_exactly_the_documented_rule_locks_extends_renews_unlocks_and_wakes_waiters() {
    let server = RedisServer::start();
    set_user(&server, "locker", PASSWORD, &lock_rule(&server));
    let ttl = Duration::from_secs(1);
    let a = builder(&server, "locker")
        .ttl(ttl)
        .fencing(true)
        .build()
        .unwrap();
    // Polls only every 10 s: a quick wake-up below is the release message.
    let b = builder(&server, "locker")
        .fencing(true)
        .backoff(Duration::from_secs(10), Duration::from_secs(10))
        .build()
        .unwrap();
    no_password(&format!("{a:?}"));

    let guard = a.lock("k").unwrap();
    let first = guard.fence().expect("fencing is on");
    guard.extend(Duration::from_secs(2)).unwrap();
    // Background renewal (every third of the TTL) keeps it held.
    assert!(eventually(Duration::from_secs(10), || {
        a.metrics().renewals >= 3
    }));
    assert!(guard.is_held());
    assert!(exists(&server, "lock:k"));

    // A waiter of another client is woken by the release message, not by polling: it
    // waits for the holder's TTL otherwise, far longer than the bound below.
    let mut held = Some(guard);
    let mut last = first;
    support::assert_woken(|| {
        let guard = held.take().unwrap_or_else(|| a.lock("k").unwrap());
        guard.extend(Duration::from_secs(30)).unwrap();
        let (before, woken) = (b.metrics().attempts, b.metrics().wakeups);
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                let g = b.try_lock_for("k", Duration::from_secs(20)).unwrap();
                let m = b.metrics();
                let got = g.map(|g| (g.fence(), g.unlock().unwrap()));
                (got, Instant::now(), m)
            });
            // Subscribed, and the attempt its subscription's confirmation makes sent.
            let queued = support::wait_for(Duration::from_secs(10), || {
                let attempts = b.metrics().attempts;
                (subscribers(&server, "lock:k") >= 1 && attempts >= before + 2).then_some(attempts)
            });
            let queued = queued.expect("the waiter did not queue");
            let released = Instant::now();
            assert_eq!(guard.unlock().unwrap(), Release::Released);
            let (got, at, m) = waiter.join().unwrap();
            let (fence, outcome) = got.expect("the waiter got the lock");
            assert!(fence.unwrap() > last);
            last = fence.unwrap();
            assert_eq!(outcome, Release::Released);
            let took = at.duration_since(released);
            assert!(took < Duration::from_secs(5), "{took:?}");
            support::WakeRound {
                queued,
                acquired: m.attempts,
                wakeups: m.wakeups - woken,
            }
        })
    });
    // Shutting down (the waiter's connection leaves pub/sub) is covered too.
    drop((a, b));
    let log = refusals(&server);
    assert_eq!(log.len(), 0, "the rule lacks a permission: {log:?}");
    assert_eq!(dbsize(&server), 1, "only the fence counter is left");
}

#[test]
fn a_user_without_the_bulk_renewal_commands_renews_one_command_per_lease() {
    let server = RedisServer::start();
    let bulk = ["+mget", "+time", "+pexpireat", "+exists"];
    let mut rule = without(LOCK_RULE, &bulk);
    if server.has_conditional_commands() {
        rule.push(VALKEY_RULE);
    }
    set_user(&server, "locker", PASSWORD, &rule);
    let lc = builder(&server, "locker")
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let guards: Vec<_> = (0..20)
        .map(|i| lc.try_lock(&format!("k{i}")).unwrap().unwrap())
        .collect();
    lc.flush();
    // The first tick's chunk is refused and re-sent lease by lease; later ticks
    // send one command per lease from the start.
    assert!(eventually(Duration::from_secs(10), || {
        lc.metrics().renewals >= 20 * 5
    }));
    assert!(guards.iter().all(redlease::LockGuard::is_held));
    assert_eq!(lc.metrics().leases_lost, 0);
    let log = refusals(&server);
    assert_eq!(log.len(), 1, "the bulk script is tried once: {log:?}");
    for g in &guards {
        assert!(exists(&server, g.key()), "{}", g.key());
    }
}

/// What `build()` refused for a new user with exactly `rules`.
struct Refused {
    server: RedisServer,
    command: String,
    on_keys: bool,
    message: String,
}

/// Builds a client as a new user with `rules` who lacks a permission of the
/// scripts; panics unless `build()` refuses it with `Error::Permission` or, on a
/// server with conditional commands (no script in an unfenced token lock), unless
/// the client locks and releases (then `None`).
fn refused_scripts(rules: &[&str]) -> Option<Refused> {
    let server = RedisServer::start();
    if !server.has_conditional_commands() {
        drop(server);
        return Some(refused(rules));
    }
    set_user(&server, "user", PASSWORD, rules);
    let client = builder(&server, "user").build().unwrap();
    let guard = client.lock("k").unwrap();
    assert!(guard.unlock().unwrap().was_held());
    None
}

/// Builds a client as a new user with `rules`; panics unless `build()` refuses it with
/// `Error::Permission` (its cause attached, no password shown).
fn refused(rules: &[&str]) -> Refused {
    let server = RedisServer::start();
    set_user(&server, "user", PASSWORD, rules);
    let err = builder(&server, "user").build().unwrap_err();
    let text = shown(&err);
    assert!(std::error::Error::source(&err).is_some(), "{text}");
    let message = err.to_string();
    let Error::Permission {
        command, on_keys, ..
    } = err
    else {
        panic!("{text}");
    };
    Refused {
        server,
        command,
        on_keys,
        message,
    }
}

#[test]
fn a_user_without_evalsha_is_refused_at_build_before_any_lock_is_taken() {
    let Some(r) = refused_scripts(&["~lock:*", "&*", "+@all", "-evalsha", "-eval"]) else {
        return;
    };
    assert_eq!((r.command.as_str(), r.on_keys), ("evalsha", false));
    assert_eq!(r.message, "redis user may not run evalsha");
    assert_eq!(dbsize(&r.server), 0, "nothing was written");
}

#[test]
fn a_user_who_may_not_load_scripts_is_refused_at_build() {
    let Some(r) = refused_scripts(&["~lock:*", "&*", "+@all", "-script|load"]) else {
        return;
    };
    assert_eq!(r.command, "script|load");
    assert_eq!(dbsize(&r.server), 0);
}

#[test]
fn a_user_whose_release_script_may_not_delete_is_refused_and_leaves_nothing_for_long() {
    let Some(r) = refused_scripts(&["~lock:*", "&*", "+@all", "-del"]) else {
        return;
    };
    assert_eq!(
        r.message,
        "redis user may not run a command of the release script (get, del)"
    );
    // Only the probe's own short-lived key, never a lock anyone asked for.
    assert!(eventually(Duration::from_secs(5), || dbsize(&r.server) == 0));
}

#[test]
fn a_user_whose_keys_do_not_cover_the_prefix_is_refused_at_build() {
    let r = refused(&["~other:*", "&*", "+@all"]);
    assert!(r.on_keys);
    assert!(
        r.message.ends_with("on keys under the key prefix"),
        "{}",
        r.message
    );
    assert_eq!(dbsize(&r.server), 0);
}

#[test]
fn a_redis_7_user_without_channels_releases_without_error_and_its_waiters_poll() {
    let server = RedisServer::start();
    // `ACL SETUSER` on Redis 7 gives no channel permissions unless asked for
    // (`acl-pubsub-default resetchannels`); `reset` makes that explicit.
    set_user(&server, "nochan", PASSWORD, &["~lock:*", "+@all"]);
    let a = builder(&server, "nochan").build().unwrap();
    let b = builder(&server, "nochan").build().unwrap();

    let guard = a.lock("k").unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let g = b.try_lock_for("k", Duration::from_secs(20)).unwrap();
            (g.map(|g| g.unlock().unwrap()), Instant::now())
        });
        assert!(eventually(Duration::from_secs(10), || b.metrics().attempts >= 2));
        let released = Instant::now();
        // The release happened: it is reported as such, not as an error.
        assert_eq!(guard.unlock().unwrap(), Release::Released);
        let (got, at) = waiter.join().unwrap();
        assert_eq!(got, Some(Release::Released), "the waiter got the lock");
        let took = at.duration_since(released);
        assert!(took < Duration::from_secs(5), "{took:?}");
    });
    assert_eq!(b.metrics().wakeups, 0, "no pub/sub: the waiter polled");
    assert_eq!(subscribers(&server, "lock:k"), 0);
    assert_eq!(a.metrics().release_errors, 0);
    // Nothing but the two clients' session records.
    assert_eq!(dbsize(&server), 2);
    drop((a, b));
    assert_eq!(dbsize(&server), 0, "the records go with their clients");
}

#[test]
fn a_fenced_lock_the_user_may_not_count_is_an_error_and_leaves_no_lock() {
    let server = RedisServer::start();
    set_user(
        &server,
        "noincr",
        PASSWORD,
        &["~lock:*", "&*", "+@all", "-incr"],
    );
    let client = builder(&server, "noincr").build().unwrap();
    let opts = LockOptions::new().fencing(true);
    let err = client.lock_with("k", &opts).unwrap_err();
    let text = shown(&err);
    assert!(matches!(err, Error::Redis(_)), "{text}");
    assert!(text.contains(r#"acquiring lock "lock:k""#), "{text}");
    // The script took its `SET` back: no lock that nobody holds.
    assert!(!exists(&server, "lock:k"));
    // Unfenced locks work as before.
    let guard = client.lock("k").unwrap();
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

#[test]
fn a_server_started_with_requirepass_serves_clients_that_never_print_the_password() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    assert!(server.url().contains(PASSWORD));
    let client = LockClient::builder(server.url().as_str())
        .key_prefix("lock:")
        .build()
        .unwrap();
    let guard = client.lock("k").unwrap();
    no_password(&format!("{client:?} {guard:?}"));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let wrong = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/", server.port());
    let err = LockClient::builder(wrong.as_str()).build().unwrap_err();
    no_password(&shown(&err));
}

#[test]
fn a_user_without_hset_locks_as_before_and_its_locks_owner_reads_gone() {
    let server = RedisServer::start();
    set_user(&server, "nohset", PASSWORD, &without(LOCK_RULE, &["+hset"]));
    let client = builder(&server, "nohset").build().unwrap();
    let guard = client.lock("k").unwrap();
    assert!(guard.is_held());
    // No record was written: the owner cannot be named, and is never guessed.
    let reader = LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap();
    let info = reader.inspect("k").unwrap();
    assert!(
        matches!(info.holders()[0].owner(), redlease::Owner::Gone(_)),
        "{info:?}"
    );
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

/// The rules quoted in `text` (between backticks or in a code block): every word
/// that starts with `~`, `&` or `+`, as a sorted set.
fn quoted_rules(text: &str) -> std::collections::BTreeSet<&str> {
    text.split(['`', ' ', '\n'])
        .filter(|w| w.starts_with(['~', '&', '+']))
        .collect()
}

/// The guide's text from `start` to the first `end` after it.
fn guide_between<'a>(guide: &'a str, start: &str, end: &str) -> &'a str {
    let from = guide
        .find(start)
        .unwrap_or_else(|| panic!("guide: no {start:?}"));
    let rest = &guide[from + start.len()..];
    &rest[..rest
        .find(end)
        .unwrap_or_else(|| panic!("guide: no {end:?}"))]
}

#[test]
fn the_guide_quotes_exactly_the_acl_rules_the_tests_run() {
    // The lock rule and the cluster's additions are in the deployments chapter,
    // each primitive's additions in the Redisson chapter.
    let guide = ["deployments", "redisson"]
        .map(|chapter| {
            let dir = env!("CARGO_MANIFEST_DIR");
            std::fs::read_to_string(format!("{dir}/guide/{chapter}.md")).unwrap()
        })
        .concat();
    let sections = [
        (
            "the lock rule",
            guide_between(&guide, "ACL SETUSER locker on >password", "```"),
            LOCK_RULE,
        ),
        (
            "the Valkey 9 addition",
            guide_between(&guide, "On Valkey 9 add", ":"),
            VALKEY_RULE,
        ),
        (
            "the cluster additions",
            guide_between(&guide, "On a Redis\nCluster add", "; the\nper-slot"),
            CLUSTER_RULE,
        ),
        (
            "the fair lock additions",
            guide_between(&guide, "a fair lock user needs", "(`tests/fair.rs`"),
            FAIR_RULE,
        ),
        (
            "the read-write lock additions",
            guide_between(&guide, "a read-write lock user needs", "(`tests/rwlock.rs`"),
            RWLOCK_RULE,
        ),
        (
            "the semaphore additions",
            guide_between(&guide, "ACL SETUSER worker ...", "```"),
            SEMAPHORE_RULE,
        ),
    ];
    for (what, quoted, rule) in sections {
        let tested: std::collections::BTreeSet<&str> = rule.split_whitespace().collect();
        assert_eq!(quoted_rules(quoted), tested, "{what}: guide {quoted:?}");
    }
}
