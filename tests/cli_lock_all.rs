#![cfg(feature = "cli")]
//! `redlease run --and`: several names, all or none, run as processes against a
//! real `redis-server`. Synchronisation is by files the commands write, by the
//! server's state and by process exit; every wait is bounded.

mod support;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use support::cli::{
    NOT_ACQUIRED, STARTUP, Scratch, USAGE, finish, has_line, output, redlease, run_sh, stderr,
    stdout,
};
use support::{RedisServer, eventually};

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

#[test]
fn run_and_holds_every_name_and_exports_one_fence_per_name_in_the_order_given() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli-and");
    let (env, go) = (dir.file("env"), dir.file("go"));
    let script = format!(
        "echo \"$REDLEASE_KEY $REDLEASE_FENCE\" > {}; while [ ! -e {} ]; do sleep 0.05; done",
        env.display(),
        go.display()
    );
    // Given in another order than the keys sort in: the fences follow the order given.
    let opts = ["--fence", "--and", "alpha", "--and", "mid"];
    let child = run_sh(&server, &opts, "zeta", &script).spawn().unwrap();
    assert!(eventually(STARTUP, || has_line(&env)));
    let line = fs::read_to_string(&env).unwrap();
    let (key, fences) = line.trim_end().split_once(' ').unwrap();
    assert_eq!(key, "zeta");
    let fences: Vec<u64> = fences.split(',').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fences.len(), 3, "{line:?}");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{line:?}");
    for key in ["zeta", "alpha", "mid"] {
        assert!(
            exists(&server, key),
            "{key} not held while the command runs"
        );
    }
    fs::write(&go, "").unwrap();
    let out = finish(child);
    assert!(out.status.success(), "{}", stderr(&out));
    for key in ["zeta", "alpha", "mid"] {
        assert!(!exists(&server, key), "{key} left held");
    }
}

#[test]
fn wait_zero_with_any_name_busy_exits_with_the_busy_code_and_holds_none() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli-and");
    server.set_for("b", "theirs", Duration::from_secs(60));
    let ran = dir.file("ran");
    let script = format!("touch {}", ran.display());
    let started = Instant::now();
    let out = output(run_sh(
        &server,
        &["--wait", "0", "--and", "b", "--and", "c"],
        "a",
        &script,
    ));
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(!ran.exists(), "the command never ran");
    assert!(!exists(&server, "a") && !exists(&server, "c"));
    let value: String = server.query(redis::cmd("GET").arg("b"));
    assert_eq!(value, "theirs");
}

#[test]
fn two_processes_naming_the_same_keys_in_opposite_orders_both_complete() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli-and");
    let counter = dir.file("counter");
    fs::write(&counter, "0\n").unwrap();
    // A read, a pause, a write: two holders at once lose an increment.
    let script = format!(
        "n=$(cat {0}); sleep 0.01; echo $((n + 1)) > {0}",
        counter.display()
    );
    let rounds = 5;
    let began = Instant::now();
    thread::scope(|s| {
        for (key, and) in [
            ("x", ["--and", "y", "--and", "z"]),
            ("z", ["--and", "y", "--and", "x"]),
        ] {
            let (server, script) = (&server, &script);
            s.spawn(move || {
                for _ in 0..rounds {
                    let out = output(run_sh(server, &and, key, script));
                    assert!(out.status.success(), "{}", stderr(&out));
                }
            });
        }
    });
    let total: u32 = fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, 2 * rounds);
    assert!(began.elapsed() < Duration::from_secs(90));
}

#[test]
fn a_name_given_twice_is_bad_input_and_help_explains_and() {
    let server = RedisServer::start();
    let out = output(run_sh(&server, &["--and", "a"], "a", "true"));
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("twice"), "{}", stderr(&out));
    let help = stdout(&output(redlease(["run", "--help"])));
    assert!(help.contains("--and <KEY2>"), "{help}");
    assert!(help.contains("REDLEASE_FENCE"), "{help}");
}
