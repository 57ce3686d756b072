#![cfg(feature = "cli")]
//! `redlease elect` and `redlease leader`, run as processes against real
//! `redis-server`s. Synchronisation is by files the commands write, by the
//! server's state and by process exit; every wait is bounded.

mod support;

use std::fs;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use redlease::LockClient;
use serde_json::Value;
use support::cli::{
    LOST, NOT_ACQUIRED, STARTUP, Scratch, USAGE, exit_within, finish, has_line, output, redlease,
    stderr, stdout,
};
use support::{Masters, RedisServer, eventually, wait_for};

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

/// `redlease elect --url <server> OPTS NAME -- sh -c SCRIPT`.
fn elect_sh(server: &RedisServer, opts: &[&str], name: &str, script: &str) -> Child {
    let url = server.url();
    let mut args = vec!["elect", "--url", &url];
    args.extend_from_slice(opts);
    args.extend_from_slice(&[name, "--", "sh", "-c", script]);
    redlease(&args).spawn().unwrap()
}

fn leader_json(server: &RedisServer, name: &str) -> (Option<i32>, Value) {
    let out = output(redlease(["leader", "--json", "--url", &server.url(), name]));
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

fn first_line(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn elect_runs_the_command_with_its_term_then_resigns_with_its_status() {
    let server = RedisServer::start();
    let dir = Scratch::new("elect");
    let f = dir.file("term");
    let script = format!("echo $REDLEASE_TERM > {}; exit 3", f.display());
    let out = finish(elect_sh(&server, &[], "sched", &script));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let term: u64 = first_line(&f).parse().unwrap();
    assert!(term > 0);
    // Resigned: nobody leads, and the next leader's term is higher.
    let (code, json) = leader_json(&server, "sched");
    assert_eq!(code, Some(NOT_ACQUIRED));
    assert_eq!(json["leader"], Value::Null);
    let out = finish(elect_sh(
        &server,
        &[],
        "sched",
        &format!("echo $REDLEASE_TERM > {}", f.display()),
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(first_line(&f).parse::<u64>().unwrap() > term);
}

#[test]
fn elect_processes_lead_one_at_a_time_with_rising_terms() {
    let server = RedisServer::start();
    let dir = Scratch::new("elect");
    let log = dir.file("log");
    let script = format!(
        "echo \"in $REDLEASE_TERM\" >> {0}; sleep 0.2; echo \"out $REDLEASE_TERM\" >> {0}",
        log.display()
    );
    let children: Vec<Child> = (0..4)
        .map(|_| elect_sh(&server, &[], "fleet", &script))
        .collect();
    for child in children {
        let out = finish(child);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (what, term) = l.split_once(' ').unwrap();
            (what, term.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 8, "{text}");
    let mut last = 0;
    for pair in lines.chunks(2) {
        // Each leader's "in" is followed by its own "out": no overlap.
        assert_eq!(pair[0].0, "in", "{text}");
        assert_eq!(pair[1], ("out", pair[0].1), "{text}");
        assert!(pair[0].1 > last, "{text}");
        last = pair[0].1;
    }
}

#[test]
fn a_killed_leader_is_replaced_within_its_ttl() {
    let server = RedisServer::start();
    let dir = Scratch::new("elect");
    let (first, second) = (dir.file("first"), dir.file("second"));
    // The command keeps running after its redlease dies (its own process
    // group): it writes the group's id to be stopped by the test.
    let script = |f: &Path| {
        format!(
            "echo \"$REDLEASE_TERM $$\" > {}; while :; do sleep 0.1; done",
            f.display()
        )
    };
    let ttl = Duration::from_secs(1);
    let mut leader = elect_sh(&server, &["--ttl", "1s"], "dies", &script(&first));
    assert!(eventually(STARTUP, || has_line(&first)));
    let mut candidate = elect_sh(&server, &["--ttl", "1s"], "dies", &script(&second));
    // The candidate campaigns: its waiter listens for the release.
    assert!(eventually(STARTUP, || {
        let (_, n): (String, i64) =
            server.query(redis::cmd("PUBSUB").arg("NUMSUB").arg("{dies}:released"));
        n >= 1
    }));
    signal(&leader, Signal::SIGKILL);
    let killed = Instant::now();
    let _ = leader.wait();
    assert!(eventually(ttl + Duration::from_secs(5), || has_line(
        &second
    )));
    let took = killed.elapsed();
    let read = |f: &Path| -> (u64, i32) {
        let line = first_line(f);
        let (term, pid) = line.split_once(' ').unwrap();
        (term.parse().unwrap(), pid.parse().unwrap())
    };
    let ((old, orphan), (new, _)) = (read(&first), read(&second));
    let _ = killpg(Pid::from_raw(orphan), Signal::SIGKILL);
    assert!(new > old);
    println!("replaced {took:?} after the kill (ttl {ttl:?})");
    // Its lease, plus a polling step and a stall.
    assert!(took < ttl + Duration::from_millis(1500), "{took:?}");
    signal(&candidate, Signal::SIGTERM);
    exit_within(&mut candidate, Duration::from_secs(20));
}

#[test]
fn lost_leadership_stops_the_command_and_exits_79() {
    let server = RedisServer::start();
    let dir = Scratch::new("elect");
    let f = dir.file("out");
    let script = format!(
        "echo started > {0}; sleep 30; echo finished >> {0}",
        f.display()
    );
    let child = elect_sh(
        &server,
        &["--ttl", "1s", "--kill-grace", "5s"],
        "lost",
        &script,
    );
    assert!(eventually(STARTUP, || has_line(&f)));
    let n: i64 = server.query(redis::cmd("DEL").arg("lost"));
    assert_eq!(n, 1);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert!(stderr(&out).contains("leadership"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&f).unwrap(), "started\n");
}

#[test]
fn sigterm_is_forwarded_then_leadership_resigned() {
    let server = RedisServer::start();
    let dir = Scratch::new("elect");
    let f = dir.file("out");
    // On SIGTERM the command records whether the leader's key exists, then exits 7.
    let script = format!(
        "trap 'redis-cli -p {port} exists term >> {f}; exit 7' TERM; echo started > {f}; \
         while :; do sleep 0.1; done",
        port = server.port(),
        f = f.display()
    );
    let child = elect_sh(&server, &[], "term", &script);
    assert!(eventually(STARTUP, || has_line(&f)));
    signal(&child, Signal::SIGTERM);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&f).unwrap(),
        "started\n1\n",
        "led while it handled TERM"
    );
    let exists: i64 = server.query(redis::cmd("EXISTS").arg("term"));
    assert_eq!(exists, 0, "resigned once it exited");
}

#[test]
fn leader_json_has_the_exact_shape_and_exit_codes() {
    let server = RedisServer::start();
    let (code, json) = leader_json(&server, "shape");
    assert_eq!(code, Some(NOT_ACQUIRED));
    assert_eq!(
        json,
        serde_json::json!({"name": "shape", "term": null, "ttl_ms": null, "leader": null})
    );

    let client = LockClient::builder(server.url())
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let leadership = client.election("shape").unwrap().campaign().unwrap();
    // The session record is written in the background as the client starts.
    let json = wait_for(STARTUP, || {
        let (code, json) = leader_json(&server, "shape");
        assert_eq!(code, Some(0));
        (json["leader"]["alive"] == true).then_some(json)
    })
    .expect("a live owner");
    let object = json.as_object().unwrap();
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["leader", "name", "term", "ttl_ms"]);
    assert_eq!(json["name"], "shape");
    assert_eq!(json["term"].as_u64(), Some(leadership.term()));
    let ttl = json["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 5000 && ttl <= 10_000, "{ttl}");
    let owner = json["leader"].as_object().unwrap();
    let mut keys: Vec<&str> = owner.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["alive", "client_id", "host", "pid", "program"]);
    assert_eq!(owner["pid"].as_u64(), Some(u64::from(std::process::id())));
    assert!(owner["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(owner["program"].is_string());
    assert!(owner["client_id"].as_str().is_some_and(|c| c.len() == 36));

    let out = output(redlease(["leader", "--url", &server.url(), "shape"]));
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("term {}", leadership.term())),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    let _ = leadership.resign().unwrap();
    let out = output(redlease(["leader", "--url", &server.url(), "shape"]));
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED));
}

#[test]
fn elect_on_a_redlock_quorum_or_a_hash_is_bad_input() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let out = output(redlease([
        "elect", "--url", &urls[0], "--url", &urls[1], "--url", &urls[2], "q", "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("redlock"), "{}", stderr(&out));

    let server = RedisServer::start();
    server.query::<()>(redis::cmd("HSET").arg("h").arg("f").arg("1"));
    let out = output(redlease([
        "elect",
        "--url",
        &server.url(),
        "h",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    let out = output(redlease(["leader", "--url", &server.url(), "h"]));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

#[test]
fn help_lists_the_election_exit_codes() {
    let out = output(redlease(["elect", "--help"]));
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("REDLEASE_TERM"), "{text}");
    // Each subcommand's --help lists its own exit statuses.
    assert!(text.contains("\n  79     leadership was lost"), "{text}");
    let out = output(redlease(["leader", "--help"]));
    let text = stdout(&out);
    assert!(text.contains("\n  75     nobody leads"), "{text}");
}
