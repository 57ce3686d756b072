#![cfg(feature = "cli")]
//! `redlease acquire`, `extend --ticket` and `release --ticket`, run as
//! processes against real `redis-server`s: a lease held across the steps of a
//! job, its ticket passed through files, stdin and the library.

mod support;

use std::fs;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use redlease::{LockClient, LockFormat, Release, Ticket};
use serde_json::Value;
use support::cli::{LOST, NOT_ACQUIRED, Scratch, USAGE, finish, output, redlease, stderr, stdout};
use support::{RedisServer, eventually};

fn acquire(server: &RedisServer, opts: &[&str], name: &str) -> std::process::Output {
    let url = server.url();
    let mut args = vec!["acquire", "--url", &url];
    args.extend_from_slice(opts);
    args.push(name);
    output(redlease(&args))
}

/// `redlease SUB --url <server> --ticket TICKET OPTS`, with `stdin` on its stdin.
fn with_ticket(
    server: &RedisServer,
    sub: &str,
    ticket: &str,
    opts: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    let url = server.url();
    let mut args = vec![sub, "--url", &url, "--ticket", ticket];
    args.extend_from_slice(opts);
    let mut cmd = redlease(&args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    finish(child)
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("PTTL").arg(key))
}

#[test]
fn acquire_prints_a_ticket_that_release_reads_from_a_file_and_the_lease_stays_held_meanwhile() {
    let server = RedisServer::start();
    let out = acquire(&server, &["--ttl", "10m"], "job");
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let ticket: Ticket = printed.parse().unwrap();
    assert_eq!(ticket.key(), "job");
    // acquire has exited: the lease is still there, with what --ttl gave it.
    assert!(pttl(&server, "job") > 590_000);
    let busy = acquire(&server, &["--wait", "0"], "job");
    assert_eq!(busy.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&busy));
    let dir = Scratch::new("ticket");
    let file = dir.file("job.ticket");
    fs::write(&file, &printed).unwrap();
    let file = file.to_str().unwrap();
    let out = with_ticket(&server, "release", file, &[], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!server.exists("job"));
    // Once more: the lock is no longer the ticket's.
    let again = with_ticket(&server, "release", file, &[], None);
    assert_eq!(again.status.code(), Some(LOST), "{}", stderr(&again));
}

#[test]
fn acquire_json_carries_the_fence_and_extend_and_release_read_the_ticket_from_stdin() {
    let server = RedisServer::start();
    let out = acquire(&server, &["--json", "--fence", "--ttl", "5s"], "fenced");
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["key"], "fenced");
    assert_eq!(json["scheme"], "token");
    assert_eq!(json["ttl_ms"], 5000);
    let fence = json["fence"].as_u64().unwrap();
    let printed = json["ticket"].as_str().unwrap();
    let ticket: Ticket = printed.parse().unwrap();
    assert_eq!(ticket.fence(), Some(fence));
    let out = with_ticket(&server, "extend", "-", &["--ttl", "10m"], Some(printed));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(pttl(&server, "fenced") > 590_000);
    let out = with_ticket(&server, "release", "-", &[], Some(&format!("{printed}\n")));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!server.exists("fenced"));
}

#[test]
fn an_expired_ticket_is_neither_extended_nor_released_and_a_bad_one_is_bad_input() {
    let server = RedisServer::start();
    let out = acquire(&server, &["--ttl", "1s"], "brief");
    let ticket = stdout(&out);
    assert!(eventually(Duration::from_secs(5), || !server.exists("brief")));
    let out = with_ticket(&server, "extend", ticket.trim(), &["--ttl", "1m"], None);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert!(!server.exists("brief"));
    let out = with_ticket(&server, "release", ticket.trim(), &[], None);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    let bad = with_ticket(&server, "release", "rl-ticket:v9:token:-:k:v", &[], None);
    assert_eq!(bad.status.code(), Some(USAGE), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("version"), "{}", stderr(&bad));
    let missing = with_ticket(&server, "release", "/nonexistent/ticket", &[], None);
    assert_eq!(missing.status.code(), Some(USAGE), "{}", stderr(&missing));
}

#[test]
fn a_ticket_from_acquire_is_adopted_by_the_library() {
    let server = RedisServer::start();
    let out = acquire(&server, &["--ttl", "1m", "--prefix", "lock:"], "shared");
    let ticket: Ticket = stdout(&out).parse().unwrap();
    assert_eq!(ticket.key(), "lock:shared");
    let client = LockClient::builder(server.url()).build().unwrap();
    let guard = client.adopt(&ticket).unwrap();
    assert!(guard.is_held());
    // The CLI's ticket no longer releases it: the adopter's value is there.
    let out = with_ticket(&server, "release", &ticket.to_string(), &[], None);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
}

/// A job of three steps (acquire; work; release --ticket) and `redlease run`
/// of the same name, side by side: each marks its hold with a directory that
/// only one can create, so an overlap leaves a file behind.
#[test]
fn a_script_holding_a_lock_across_steps_and_redlease_run_never_hold_it_together() {
    let server = RedisServer::start();
    let dir = Scratch::new("steps");
    let work = format!(
        "if mkdir {held} 2>/dev/null; then :; else touch {overlap}; fi; echo $0 >> {log}; \
         sleep 0.2; rmdir {held}",
        held = dir.file("held").display(),
        overlap = dir.file("overlap").display(),
        log = dir.file("log").display(),
    );
    let script = format!(
        "set -e\n\
         T=$(\"$REDLEASE\" acquire --url \"$URL\" --ttl 30s --wait 20s steps)\n\
         sh -c '{work}' step\n\
         printf '%s\\n' \"$T\" | \"$REDLEASE\" release --url \"$URL\" --ticket - >/dev/null\n"
    );
    let rounds = 4;
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                let out = Command::new("sh")
                    .args(["-c", &script])
                    .env("REDLEASE", env!("CARGO_BIN_EXE_redlease"))
                    .env("URL", server.url())
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", stderr(&out));
            }
        });
        s.spawn(|| {
            for _ in 0..rounds {
                let url = server.url();
                let args = [
                    "run", "--url", &url, "--wait", "20s", "steps", "--", "sh", "-c", &work, "run",
                ];
                let out = output(redlease(args));
                assert!(out.status.success(), "{}", stderr(&out));
            }
        });
    });
    assert!(!dir.file("overlap").exists(), "both held `steps` at once");
    let log = fs::read_to_string(dir.file("log")).unwrap();
    assert_eq!(log.matches("step").count(), rounds, "{log}");
    assert_eq!(log.matches("run").count(), rounds, "{log}");
    assert!(!server.exists("steps"));
}

fn hash_len(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("HLEN").arg(key))
}

fn free(server: &RedisServer, key: &str) -> i64 {
    server.query(redis::cmd("GET").arg(key))
}

#[test]
fn acquire_takes_a_reentrant_lock_that_a_later_process_extends_and_releases_by_ticket() {
    let server = RedisServer::start();
    let out = acquire(&server, &["--scheme", "reentrant", "--ttl", "10s"], "job");
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let ticket: Ticket = printed.parse().unwrap();
    assert_eq!(ticket.format(), LockFormat::Reentrant);
    assert!(
        printed.starts_with("rl-ticket:v1:reentrant:-:job:"),
        "{printed}"
    );
    // acquire has exited: its one hold is still there, Redisson's hash.
    assert_eq!(hash_len(&server, "job"), 1);
    let field: i64 = server.query(redis::cmd("HGET").arg("job").arg(ticket.value()));
    assert_eq!(field, 1);
    for scheme in ["token", "reentrant"] {
        let busy = acquire(&server, &["--scheme", scheme, "--wait", "0"], "job");
        assert_eq!(busy.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&busy));
    }
    let out = with_ticket(&server, "extend", "-", &["--ttl", "10m"], Some(&printed));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(pttl(&server, "job") > 590_000);
    let dir = Scratch::new("ticket-reentrant");
    let file = dir.file("job.ticket");
    fs::write(&file, &printed).unwrap();
    let file = file.to_str().unwrap();
    let out = with_ticket(&server, "release", file, &[], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!server.exists("job"));
    let again = with_ticket(&server, "release", file, &[], None);
    assert_eq!(again.status.code(), Some(LOST), "{}", stderr(&again));
}

#[test]
fn acquire_takes_permits_that_a_later_process_gives_back_by_ticket() {
    let server = RedisServer::start();
    let out = acquire(
        &server,
        &["--permits", "3", "--json", "--ttl", "10m"],
        "jobs",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["scheme"], "permit");
    assert_eq!(json["key"], "jobs");
    assert!(json["fence"].is_null());
    let one = json["ticket"].as_str().unwrap().to_owned();
    let ticket: Ticket = one.parse().unwrap();
    assert_eq!(ticket.format(), LockFormat::Semaphore);
    assert_eq!(free(&server, "jobs"), 2);
    let out = acquire(&server, &["--permits", "3", "--weight", "2"], "jobs");
    assert!(out.status.success(), "{}", stderr(&out));
    let two: Ticket = stdout(&out).parse().unwrap();
    assert_eq!(two.permits(), 2);
    assert_eq!(free(&server, "jobs"), 0);
    let busy = acquire(&server, &["--permits", "3", "--wait", "0"], "jobs");
    assert_eq!(busy.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&busy));
    assert!(stderr(&busy).contains("no permit"), "{}", stderr(&busy));
    let other = acquire(&server, &["--permits", "2", "--wait", "0"], "jobs");
    assert_eq!(other.status.code(), Some(USAGE), "{}", stderr(&other));
    let out = with_ticket(&server, "extend", &one, &["--ttl", "20m"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = with_ticket(&server, "release", "-", &[], Some(&one));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(free(&server, "jobs"), 1);
    let out = with_ticket(&server, "release", &two.to_string(), &[], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(free(&server, "jobs"), 3);
    let again = with_ticket(&server, "release", &one, &[], None);
    assert_eq!(again.status.code(), Some(LOST), "{}", stderr(&again));
    let again = with_ticket(&server, "extend", &one, &["--ttl", "1m"], None);
    assert_eq!(again.status.code(), Some(LOST), "{}", stderr(&again));
}

#[test]
fn reentrant_and_permit_tickets_from_acquire_are_adopted_by_the_library() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.url()).build().unwrap();
    let out = acquire(&server, &["--scheme", "reentrant", "--ttl", "1m"], "lock");
    let ticket: Ticket = stdout(&out).parse().unwrap();
    let guard = client.adopt(&ticket).unwrap();
    let out = with_ticket(&server, "release", &ticket.to_string(), &[], None);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert_eq!(guard.unlock().unwrap(), Release::Released);
    let out = acquire(&server, &["--permits", "1", "--ttl", "1m"], "sem");
    let ticket: Ticket = stdout(&out).parse().unwrap();
    let permit = client.adopt_permit(&ticket).unwrap();
    let out = with_ticket(&server, "release", &ticket.to_string(), &[], None);
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    assert_eq!(free(&server, "sem"), 0);
    assert_eq!(permit.unlock().unwrap(), Release::Released);
    assert_eq!(free(&server, "sem"), 1);
}
