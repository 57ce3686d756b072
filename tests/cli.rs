#![cfg(feature = "cli")]
//! The `redlease` command-line tool, run as a process against real `redis-server`s.
//!
//! Synchronisation is by files the commands write, by the server's own state and by
//! process exit; every wait is bounded. Timing bounds leave room for a 200 ms stall
//! on a loaded 2-core machine.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use support::cli::{
    HUNG, LOST, NOT_ACQUIRED, STARTUP, Scratch, USAGE, exit_within, finish, has_line, inspect_json,
    output, redlease, run_sh, stderr, stdout,
};
use support::redisson::rlock::{self as redisson, Redisson};
use support::{RedisServer, eventually, free_port};

/// Exit codes, as `redlease --help` lists them (the others are in `support::cli`).
const UNAVAILABLE: i32 = 69;
const NOT_FOUND: i32 = 127;

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

/// The `date +%s%N` stamps written to `path`, in nanoseconds.
fn stamps(path: &Path) -> Vec<u128> {
    let text = fs::read_to_string(path).unwrap();
    text.lines().map(|l| l.trim().parse().unwrap()).collect()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    keys.sort();
    keys
}

#[test]
fn run_propagates_the_commands_exit_status() {
    let server = RedisServer::start();
    for (script, code) in [("true", 0), ("exit 3", 3), ("kill -KILL $$", 128 + 9)] {
        let out = output(run_sh(&server, &[], "job", script));
        assert_eq!(out.status.code(), Some(code), "{script}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "",
            "{script}: the command's own status needs no message"
        );
        assert!(
            keys(&server).is_empty(),
            "{script}: released after the command"
        );
    }
    let out = output(redlease([
        "run",
        "--url",
        &server.url(),
        "job",
        "--",
        "/no/such/cmd",
    ]));
    assert_eq!(out.status.code(), Some(NOT_FOUND), "{}", stderr(&out));
    assert!(
        keys(&server).is_empty(),
        "released when the command cannot start"
    );
}

#[test]
fn run_holds_the_lock_and_gives_the_command_its_key_and_fence() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let (env, go) = (dir.file("env"), dir.file("go"));
    let script = format!(
        "echo \"$REDLEASE_KEY $REDLEASE_FENCE\" > {}; while [ ! -e {} ]; do sleep 0.05; done",
        env.display(),
        go.display()
    );
    let mut last = 0;
    for _ in 0..2 {
        let floor = server.clock_micros();
        let child = run_sh(&server, &["--prefix", "p:", "--fence"], "job", &script)
            .spawn()
            .unwrap();
        assert!(eventually(STARTUP, || has_line(&env)));
        let line = fs::read_to_string(&env).unwrap();
        let fence: u64 = line
            .strip_prefix("p:job ")
            .and_then(|f| f.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        // Rising, and at least the server's clock in microseconds.
        assert!(
            fence > last && fence >= floor,
            "{fence} after {last}, clock {floor}"
        );
        last = fence;
        // Held while the command runs: a token with a TTL, seen by `inspect` (given
        // the prefix, whose fence counter it reads).
        let url = server.url();
        let out = output(redlease([
            "inspect", "--json", "--url", &url, "--prefix", "p:", "job",
        ]));
        assert!(out.status.success(), "{}", stderr(&out));
        let held: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(held["key"], "p:job", "{held}");
        assert_eq!(held["format"], "token", "{held}");
        assert!(held["pttl_ms"].as_u64().unwrap() > 0, "{held}");
        assert_eq!(held["fence"].as_u64(), Some(fence), "{held}");
        fs::write(&go, "").unwrap();
        let out = finish(child);
        assert!(out.status.success(), "{}", stderr(&out));
        fs::remove_file(&go).unwrap();
        fs::remove_file(&env).unwrap();
        assert_eq!(
            keys(&server),
            ["p:redlease:fence"],
            "the lock is released, the prefix's counter kept"
        );
    }
}

#[test]
fn two_runs_on_one_key_do_not_overlap() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let script = |f: &Path| format!("date +%s%N >> {0}; sleep 1; date +%s%N >> {0}", f.display());
    let (fa, fb) = (dir.file("a"), dir.file("b"));
    let a = run_sh(&server, &[], "job", &script(&fa)).spawn().unwrap();
    assert!(eventually(STARTUP, || has_line(&fa)));
    let b_spawned = now_nanos();
    let b = run_sh(&server, &[], "job", &script(&fb)).spawn().unwrap();
    let (a, b) = (finish(a), finish(b));
    assert!(
        a.status.success() && b.status.success(),
        "{}{}",
        stderr(&a),
        stderr(&b)
    );
    assert_eq!(
        stderr(&b),
        "",
        "no status line when stderr is not a terminal"
    );
    let (a, b) = (stamps(&fa), stamps(&fb));
    assert!(
        b_spawned < a[1],
        "the second run started while the first held the lock"
    );
    assert!(b[0] >= a[1], "overlap: first ran {a:?}, second {b:?}");
    let gap = Duration::from_nanos(u64::try_from(b[0] - a[1]).unwrap());
    assert!(
        gap < Duration::from_secs(1),
        "second started {gap:?} after the first ended"
    );
}

/// Runs a command that writes `started`, sleeps 30 s, then writes `finished`
/// (after `trap`, a prefix of the script) under `run --ttl 1s --kill-grace
/// grace`, and deletes its key once it started: its output, how long after the
/// delete it ended, and what it wrote.
fn deleted_midway(trap: &str, grace: &str) -> (Output, Duration, String) {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let f = dir.file("out");
    let script = format!(
        "{trap}echo started > {0}; sleep 30; echo finished >> {0}",
        f.display()
    );
    let opts = ["--ttl", "1s", "--kill-grace", grace];
    let child = run_sh(&server, &opts, "job", &script).spawn().unwrap();
    assert!(eventually(STARTUP, || has_line(&f)));
    let deleted = Instant::now();
    let n: i64 = server.query(redis::cmd("DEL").arg("job"));
    assert_eq!(n, 1);
    let out = finish(child);
    let took = deleted.elapsed();
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert!(keys(&server).is_empty());
    (out, took, fs::read_to_string(&f).unwrap())
}

#[test]
fn a_deleted_key_stops_the_command_with_the_lost_code() {
    let (out, took, written) = deleted_midway("", "5s");
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    // One renewal period (333 ms) to notice, then SIGTERM ends `sh` at once:
    // well before the 5 s grace would send SIGKILL.
    assert!(
        took < Duration::from_millis(333 + 1500),
        "stopped after {took:?}"
    );
    assert_eq!(written, "started\n", "the command was stopped");
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    // `trap '' TERM` is inherited by `sleep`: only SIGKILL stops the group.
    let (_, took, written) = deleted_midway("trap '' TERM; ", "1s");
    assert!(
        took >= Duration::from_secs(1),
        "SIGKILL before the grace: {took:?}"
    );
    assert!(
        took < Duration::from_millis(1000 + 333 + 1500),
        "stopped after {took:?}"
    );
    assert_eq!(written, "started\n");
}

#[test]
fn wait_zero_on_a_held_key_exits_at_once_with_the_busy_code() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    server.set_for("job", "theirs", Duration::from_secs(60));
    let ran = dir.file("ran");
    let script = format!("touch {}", ran.display());
    let started = Instant::now();
    let out = output(run_sh(&server, &["--wait", "0"], "job", &script));
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    let started = Instant::now();
    let out = output(run_sh(&server, &["--wait", "500ms"], "job", &script));
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "gave up early"
    );

    assert!(!ran.exists(), "the command never ran");
    let value: String = server.query(redis::cmd("GET").arg("job"));
    assert_eq!(value, "theirs");
    assert_eq!(keys(&server), ["job"]);
}

#[test]
fn run_never_starts_the_command_on_a_lease_granted_after_its_validity() {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let dir = Scratch::new("cli");
    server.set_for("job", "theirs", Duration::from_secs(60));
    let ran = dir.file("ran");
    let script = format!("touch {}", ran.display());
    let url = proxy.url();
    let args = [
        "run", "--url", &url, "--ttl", "400ms", "--wait", "6s", "job",
    ];
    let mut child = redlease(args.iter().chain(&["--", "sh", "-c", &script]))
        .spawn()
        .unwrap();
    // Waiting, through the proxy while it is fast: subscribed to the release channel.
    let waiting = eventually(STARTUP, || server.subscribers("{job}:released") >= 1);
    assert!(waiting, "redlease never started waiting");
    // Every reply now comes 1.1 s after its command, 700 ms after a 400 ms lease
    // taken by it ended; the holder goes, and the next attempt is granted, late.
    proxy.delay(Duration::from_millis(550));
    let _: i64 = server.query(redis::cmd("DEL").arg("job"));
    let status = exit_within(&mut child, HUNG);
    let out = child.wait_with_output().unwrap();
    println!("{status:?}: {}", stderr(&out));
    // Not acquired within the wait; or, when an attempt was in flight at its end,
    // no reply within what was left of it (the reply takes 1.1 s). Never started:
    // the command was not run, then stopped as lost.
    assert!(
        matches!(status.code(), Some(NOT_ACQUIRED | UNAVAILABLE)),
        "{status:?}: {}",
        stderr(&out)
    );
    assert!(!ran.exists(), "the command ran");
    proxy.delay(Duration::ZERO);
    let gone = eventually(Duration::from_secs(5), || {
        server.query::<i64>(redis::cmd("EXISTS").arg("job")) == 0
    });
    assert!(gone, "a late grant is still stored");
}

#[test]
fn sigint_while_waiting_exits_promptly_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    server.set_for("job", "theirs", Duration::from_secs(60));
    let ran = dir.file("ran");
    let mut child = run_sh(&server, &[], "job", &format!("touch {}", ran.display()))
        .spawn()
        .unwrap();
    // Waiting: subscribed to the key's release channel.
    let waiting = eventually(STARTUP, || server.subscribers("{job}:released") >= 1);
    assert!(waiting, "redlease never started waiting");
    let sent = Instant::now();
    signal(&child, Signal::SIGINT);
    let status = exit_within(&mut child, HUNG);
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + 2));
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after SIGINT"
    );
    assert!(!ran.exists(), "the command never ran");
    let value: String = server.query(redis::cmd("GET").arg("job"));
    assert_eq!(value, "theirs", "the holder's key is untouched");
    let pttl: i64 = server.query(redis::cmd("PTTL").arg("job"));
    assert!(pttl > 30_000, "the holder's TTL is untouched: {pttl}");
    assert_eq!(keys(&server), ["job"], "no key of ours is left");
    let no_channels = eventually(Duration::from_secs(5), || {
        let channels: Vec<String> = server.query(redis::cmd("PUBSUB").arg("CHANNELS"));
        channels.is_empty()
    });
    assert!(no_channels, "a subscription outlived redlease");
}

#[test]
fn sigterm_while_running_is_forwarded_and_the_lock_released_after() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let f = dir.file("out");
    // On SIGTERM the command records whether the lock still exists, then exits 7.
    let script = format!(
        "trap 'redis-cli -p {port} exists job >> {f}; exit 7' TERM; echo started > {f}; \
         while :; do sleep 0.1; done",
        port = server.port(),
        f = f.display()
    );
    let child = run_sh(&server, &[], "job", &script).spawn().unwrap();
    assert!(eventually(STARTUP, || has_line(&f)));
    signal(&child, Signal::SIGTERM);
    let out = finish(child);
    assert_eq!(
        out.status.code(),
        Some(7),
        "the command's status: {}",
        stderr(&out)
    );
    assert_eq!(
        fs::read_to_string(&f).unwrap(),
        "started\n1\n",
        "held while it handled TERM"
    );
    assert!(keys(&server).is_empty(), "released once it exited");
}

#[test]
fn inspect_identifies_each_format() {
    let server = RedisServer::start();
    let set = |key: &str, value: String| {
        let _: () = server.query(redis::cmd("SET").arg(key).arg(value).arg("PX").arg(60_000));
    };
    let now_ms = now_nanos() / 1_000_000;
    set("tok", "9b2f6a1e-2c7d-4e0b-8d6f-3a1c5e7b9d20".to_owned());
    set("ms", (now_ms + 60_000).to_string());
    set("s", (now_ms / 1000 + 60).to_string());
    let owner = "0f8e4c2a-6b1d-4f3e-9a7c-5d2b8e1f0a36:1";
    let _: () = server.query(redis::cmd("HSET").arg("rl").arg(owner).arg(2));
    let _: () = server.query(redis::cmd("PEXPIRE").arg("rl").arg(60_000));
    let _: () = server.query(redis::cmd("RPUSH").arg("list").arg("x"));
    // One fence counter per key prefix (here none).
    let _: () = server.query(redis::cmd("SET").arg("redlease:fence").arg(5));

    let tok = inspect_json(&server, "tok");
    assert_eq!(tok["format"], "token", "{tok}");
    assert_eq!(tok["value"], "9b2f6a1e-2c7d-4e0b-8d6f-3a1c5e7b9d20");
    let pttl = tok["pttl_ms"].as_u64().unwrap();
    assert!((1..=60_000).contains(&pttl), "{tok}");
    assert_eq!(
        (tok["fence_key"].as_str(), tok["fence"].as_u64()),
        (Some("redlease:fence"), Some(5))
    );

    for (key, format) in [("ms", "legacy-ms"), ("s", "legacy-s")] {
        let legacy = inspect_json(&server, key);
        assert_eq!(legacy["format"], format, "{legacy}");
        let left = legacy["expires_in_ms"].as_i64().unwrap();
        assert!((1..=61_000).contains(&left), "{legacy}");
        assert_eq!(legacy["fence"].as_u64(), Some(5), "{legacy}");
    }

    let rl = inspect_json(&server, "rl");
    assert_eq!(rl["format"], "reentrant", "{rl}");
    assert_eq!(
        rl["owners"],
        serde_json::json!([{ "owner": owner, "count": 2 }])
    );
    assert!(rl["pttl_ms"].as_u64().unwrap() > 0, "{rl}");

    let absent = inspect_json(&server, "nothing");
    assert_eq!(
        (&absent["format"], &absent["pttl_ms"]),
        (&"absent".into(), &Value::Null)
    );
    let list = inspect_json(&server, "list");
    assert_eq!(
        (&list["format"], &list["type"]),
        (&"other".into(), &"list".into())
    );
    let tagged = inspect_json(&server, "job:{a}");
    assert_eq!(
        (tagged["fence_key"].as_str(), tagged["fence"].as_u64()),
        (Some("redlease:fence"), Some(5))
    );

    let text = output(redlease(["inspect", "--url", &server.url(), "tok"]));
    let text = stdout(&text);
    assert!(
        text.contains("token lock") && text.contains("fence:   5"),
        "{text}"
    );
    let text = stdout(&output(redlease(["inspect", "--url", &server.url(), "rl"])));
    assert!(
        text.contains(owner) && text.contains("held 2 time(s)"),
        "{text}"
    );
}

#[test]
fn release_refuses_without_force_and_with_force_wakes_a_waiter() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    server.set_for("job", "stuck", Duration::from_secs(600));
    let mut sub = server.conn();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sub = sub.as_pubsub();
    sub.subscribe("{job}:released").unwrap();
    // Redisson's waiters (and the reentrant scheme's) listen here.
    sub.subscribe(redisson::channel("job")).unwrap();
    let f = dir.file("start");
    let waiter = run_sh(
        &server,
        &[],
        "job",
        &format!("date +%s%N >> {}", f.display()),
    )
    .spawn()
    .unwrap();
    let waiting = eventually(STARTUP, || {
        let subs: (String, i64) =
            server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg("{job}:released"));
        subs.1 >= 2 // ours and redlease's
    });
    assert!(waiting, "redlease never started waiting");

    let refused = output(redlease(["release", "--url", &server.url(), "job"]));
    assert_eq!(refused.status.code(), Some(USAGE));
    assert_eq!(stderr(&refused).lines().count(), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    let value: String = server.query(redis::cmd("GET").arg("job"));
    assert_eq!(value, "stuck", "nothing deleted without --force");

    let forced = output(redlease([
        "release",
        "--force",
        "--url",
        &server.url(),
        "job",
    ]));
    let released = now_nanos();
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(stdout(&forced).contains("deleted"), "{}", stdout(&forced));
    let msg = sub.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "released");
    let msg = sub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), redisson::channel("job"));
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");

    let out = finish(waiter);
    assert!(out.status.success(), "{}", stderr(&out));
    let start = stamps(&f)[0];
    let late = Duration::from_nanos(u64::try_from(start.saturating_sub(released)).unwrap());
    assert!(
        late < Duration::from_secs(1),
        "the waiter started {late:?} after the release"
    );
}

#[test]
fn run_with_the_reentrant_scheme_waits_for_redisson_and_is_woken_by_its_unlock() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let (ran, go) = (dir.file("ran"), dir.file("go"));
    let mut java = Redisson::new(&server);
    let channel = redisson::channel("job");
    assert_eq!(java.try_lock("job"), None, "Redisson locks first");
    let script = format!(
        "echo ran > {}; while [ ! -e {} ]; do sleep 0.05; done",
        ran.display(),
        go.display()
    );
    let child = run_sh(&server, &["--scheme", "reentrant"], "job", &script)
        .spawn()
        .unwrap();
    let subscribed = eventually(STARTUP, || {
        let subs: (String, i64) = server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel));
        subs.1 >= 1
    });
    assert!(
        subscribed && !ran.exists(),
        "redlease did not wait for Redisson"
    );
    let released = Instant::now();
    assert_eq!(java.unlock("job"), Some(1));
    assert!(eventually(STARTUP, || has_line(&ran)));
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "started {:?} after Redisson's unlock",
        released.elapsed()
    );
    let held = inspect_json(&server, "job");
    assert_eq!(held["format"], "reentrant", "{held}");
    assert_eq!(java.try_lock("job").map(|ms| ms > 0), Some(true));
    fs::write(&go, "").unwrap();
    let out = finish(child);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));
}

#[test]
fn bad_input_is_one_line_on_stderr_and_never_shows_the_password() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli");
    let ran = dir.file("ran");
    let touch = ran.display().to_string();
    let url = server.url();
    let secret_url = format!("redis://u:hunter2@127.0.0.1:{}/", free_port());
    let argv = |parts: &[&str]| -> Vec<String> { parts.iter().map(|&p| p.to_owned()).collect() };
    let run = |opts: &[&str]| -> Vec<String> { argv(&[&["run", "--url", &url], opts].concat()) };
    let cases: Vec<(Vec<String>, i32)> = vec![
        (run(&["job"]), USAGE),
        (run(&["job", "--"]), USAGE),
        (
            run(&["--scheme", "bogus", "job", "--", "touch", &touch]),
            USAGE,
        ),
        (
            run(&["--ttl", "5 parsecs", "job", "--", "touch", &touch]),
            USAGE,
        ),
        (
            run(&["--wait", "soon", "job", "--", "touch", &touch]),
            USAGE,
        ),
        // Two URLs are a Redlock quorum of two: one unreachable node is no majority.
        (
            run(&["--url", &secret_url, "job", "--", "touch", &touch]),
            UNAVAILABLE,
        ),
        (
            argv(&["run", "--url", &secret_url, "job", "--", "touch", &touch]),
            UNAVAILABLE,
        ),
        (argv(&["inspect", "--url", &secret_url, "job"]), UNAVAILABLE),
        (
            argv(&["release", "--force", "--url", &secret_url, "job"]),
            UNAVAILABLE,
        ),
    ];
    for (args, code) in &cases {
        let out = output(redlease(args));
        let (err, out_text) = (stderr(&out), stdout(&out));
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("redlease: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            !(err + &out_text).contains("hunter2"),
            "{args:?} showed the password"
        );
    }

    // The password in REDIS_URL stays hidden too, in errors and in --help.
    for args in [vec!["run", "job", "--", "true"], vec!["run", "--help"]] {
        let mut cmd = redlease(&args);
        cmd.env("REDIS_URL", &secret_url);
        let out = output(cmd);
        assert!(
            !(stderr(&out) + &stdout(&out)).contains("hunter2"),
            "{args:?}"
        );
    }
    assert!(!ran.exists(), "no command ran");
    assert!(keys(&server).is_empty(), "nothing was written");
}

#[test]
fn several_urls_lock_a_redlock_quorum() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut args = vec!["run".to_owned()];
    for u in &urls {
        args.extend(["--url".to_owned(), u.clone()]);
    }
    // While the command runs, the key is held on every node.
    let probe = servers
        .iter()
        .map(|s| format!("redis-cli -p {} exists job", s.port()))
        .collect::<Vec<_>>()
        .join(" && ");
    let script = format!("test \"$( ({probe}) | tr -d '\\n')\" = 111");
    let mut ok = args.clone();
    ok.extend(["job", "--", "sh", "-c", &script].map(str::to_owned));
    let out = output(redlease(&ok));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for s in &servers {
        assert!(keys(s).is_empty(), "the lock was released on every node");
    }
    // Redlock offers no fence: a clear usage error.
    let mut fenced = args;
    fenced.extend(["--fence", "job", "--", "true"].map(str::to_owned));
    let out = output(redlease(&fenced));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

#[test]
fn help_lists_the_exit_codes() {
    let out = output(redlease(["run", "--help"]));
    assert!(out.status.success());
    let help = stdout(&out);
    for code in ["128+N", "64", "69", "75", "79", "126", "127"] {
        assert!(
            help.contains(&format!("\n  {code} ")),
            "{code} missing from:\n{help}"
        );
    }
}

#[test]
fn cluster_runs_a_fenced_command_on_the_keys_master() {
    use support::cluster::Cluster;
    let cluster = Cluster::start(3, 0);
    let mut args = vec!["run".to_owned(), "--cluster".to_owned()];
    for u in &cluster.urls()[..2] {
        args.extend(["--url".to_owned(), u.clone()]);
    }
    let owner = &cluster.nodes[cluster.owner(cluster.slot("job:7"))];
    // While the command runs, the key is held on the master of its slot, with a fence.
    let script = format!(
        "test \"$(redis-cli -p {} exists job:7)\" = 1 && test \"$REDLEASE_FENCE\" -gt 1000000000000000",
        owner.port()
    );
    let mut run = args.clone();
    run.extend(["--fence", "job:7", "--", "sh", "-c", &script].map(str::to_owned));
    let out = output(redlease(&run));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let left: i64 = owner.query(redis::cmd("EXISTS").arg("job:7"));
    assert_eq!(left, 0, "the lock was released");
    // Commands that read one server's keys refuse a cluster plainly.
    let url = cluster.urls()[0].clone();
    let out = output(redlease(["inspect", "--cluster", "--url", &url, "job:7"]));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}
