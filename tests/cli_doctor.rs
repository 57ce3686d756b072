#![cfg(feature = "cli")]
//! `redlease doctor [--url …] [--json]`, run as a process against real servers:
//! one line a finding grouped by server, or one JSON object; exit 0 when nothing
//! is critical, 78 when something is, 69 when no server answers, 64 for bad
//! input; never a password. And `redlease run`, which says its server's critical
//! findings once on stderr unless `--no-doctor`.

mod support;

use std::io::Write as _;
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::RedisServer;
use support::cli::*;

/// `doctor`'s exit code when a finding is critical.
const UNSAFE: i32 = 78;
/// The exit code of an unreachable server.
const UNAVAILABLE: i32 = 69;

fn evicting() -> RedisServer {
    RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
}

#[test]
fn doctor_prints_a_line_per_finding_grouped_by_server_and_exits_78_on_a_critical_one() {
    let server = evicting();
    let out = output(redlease(["doctor", "--url", &server.url()]));
    assert_eq!(out.status.code(), Some(UNSAFE), "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let heading = lines.next().unwrap();
    assert!(
        heading.starts_with(&format!("redis://127.0.0.1:{}/0 (", server.port())),
        "{text}"
    );
    assert!(heading.ends_with(", master)"), "{text}");
    let eviction = text
        .lines()
        .find(|l| l.trim_start().starts_with("critical  eviction:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        eviction.contains("allkeys-lru") && eviction.contains("fix:"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("warning   persistence: appendonly no")),
        "{text}"
    );
    assert!(text.ends_with("on 1 server(s)\n"), "{text}");
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn doctor_exits_0_when_nothing_is_critical() {
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let out = output(redlease(["doctor", "--url", &server.url(), "--ttl", "1s"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(!stdout(&out).contains("critical "), "{}", stdout(&out));
}

#[test]
fn doctor_json_lists_servers_and_their_findings() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--replica-read-only",
        "no",
    ]);
    let listed = support::eventually(Duration::from_secs(10), || {
        let info: String = master.query(redis::cmd("INFO").arg("replication"));
        info.contains("state=online")
    });
    assert!(listed);
    let out = output(redlease(["doctor", "--url", &master.url(), "--json"]));
    assert_eq!(out.status.code(), Some(UNSAFE), "{}", stderr(&out));
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let servers = json["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{json}");
    assert_eq!(
        servers[0]["url"],
        format!("redis://127.0.0.1:{}/0", master.port())
    );
    assert_eq!(servers[0]["role"], "master");
    assert!(servers[0]["version"].is_string(), "{json}");
    assert_eq!(
        servers[1]["url"],
        format!("redis://127.0.0.1:{}/0", replica.port())
    );
    assert_eq!(servers[1]["role"], "replica");
    let first = &servers[1]["findings"][0];
    assert_eq!(first["check"], "writable-replica", "{json}");
    assert_eq!(first["severity"], "critical");
    for field in ["detail", "why", "fix"] {
        assert!(
            first[field].as_str().is_some_and(|s| !s.is_empty()),
            "{json}"
        );
    }
}

#[test]
fn doctor_never_prints_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2-secret"]);
    let url = format!("redis://:hunter2-secret@127.0.0.1:{}/", server.port());
    for json in [false, true] {
        let mut args = vec!["doctor", "--url", &url];
        if json {
            args.push("--json");
        }
        let out = output(redlease(&args));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(!stdout(&out).contains("hunter2"), "{}", stdout(&out));
        assert!(stdout(&out).contains(&format!("127.0.0.1:{}", server.port())));
    }
    // Wrong password: one line, no password either.
    let wrong = format!("redis://:wrong-hunter2@127.0.0.1:{}/", server.port());
    let out = output(redlease(["doctor", "--url", &wrong]));
    assert_eq!(out.status.code(), Some(UNAVAILABLE), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

#[test]
fn doctor_on_an_unreachable_server_or_a_non_redis_port_is_one_line_and_69() {
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let out = output(redlease(["doctor", "--url", &url]));
    assert_eq!(out.status.code(), Some(UNAVAILABLE), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("redlease: redis at 127.0.0.1:{port}: ")),
        "{err}"
    );

    // A port that answers, but not as Redis does.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let deadline = Instant::now() + HUNG;
    let http = thread::spawn(move || {
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let url = format!("redis://127.0.0.1:{port}/");
    let start = Instant::now();
    let out = output(redlease(["doctor", "--url", &url]));
    assert_eq!(out.status.code(), Some(UNAVAILABLE), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    drop(http); // it ends at its deadline
}

#[test]
fn doctor_rejects_a_bad_url_as_bad_input() {
    let out = output(redlease(["doctor", "--url", "nonsense://x"]));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
fn run_says_the_servers_critical_findings_once_unless_told_not_to() {
    let server = evicting();
    let out = output(run_sh(&server, &[], "job", "true"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("eviction")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].starts_with("redlease: warning: "), "{err}");
    assert!(said[0].contains("noeviction"), "{err}");

    let out = output(run_sh(&server, &["--no-doctor"], "job", "true"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));

    let fine = RedisServer::start();
    let out = output(run_sh(&fine, &[], "job", "true"));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[cfg(feature = "cluster")]
#[test]
fn doctor_with_cluster_checks_every_master_from_one_seed() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let bad = &cluster.nodes[2];
    bad.evict("volatile-ttl");
    let seed = cluster.urls()[0].clone();
    let out = output(redlease(["doctor", "--cluster", "--url", &seed, "--json"]));
    assert_eq!(out.status.code(), Some(UNSAFE), "{}", stderr(&out));
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let servers = json["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3, "{json}");
    let critical: Vec<&Value> = servers
        .iter()
        .filter(|s| {
            s["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["severity"] == "critical")
        })
        .collect();
    assert_eq!(critical.len(), 1, "{json}");
    assert_eq!(
        critical[0]["url"],
        format!("redis://127.0.0.1:{}/0", bad.port())
    );
}
