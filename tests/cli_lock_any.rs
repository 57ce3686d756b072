#![cfg(feature = "cli")]
//! `redlease run --slots N`: one lock of NAME:0 … NAME:N-1, run as processes
//! against a real `redis-server`. Synchronisation is by files the commands write,
//! by the server's state and by process exit; every wait is bounded.

mod support;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use support::cli::{
    NOT_ACQUIRED, STARTUP, Scratch, USAGE, finish, has_line, output, run_sh, stderr,
};
use support::{RedisServer, eventually};

fn exists(server: &RedisServer, key: &str) -> bool {
    server.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
}

/// A command that writes its slot and fence to `env`, then waits for `go`.
fn holding(env: &Path, go: &Path) -> String {
    format!(
        "echo \"$REDLEASE_SLOT $REDLEASE_FENCE $REDLEASE_KEY\" > {}; while [ ! -e {} ]; do sleep 0.05; done",
        env.display(),
        go.display()
    )
}

fn read_env(env: &Path) -> (usize, u64, String) {
    let line = fs::read_to_string(env).unwrap();
    let mut words = line.split_whitespace();
    let slot = words.next().unwrap().parse().unwrap();
    let fence = words.next().unwrap().parse().unwrap();
    (slot, fence, words.next().unwrap().to_owned())
}

#[test]
fn each_process_takes_its_own_slot_and_a_third_waits_for_one_to_end() {
    let server = RedisServer::start();
    let dir = Scratch::new("cli-slots");
    let opts = ["--slots", "2", "--fence"];
    let files: Vec<_> = (0..3)
        .map(|i| (dir.file(&format!("env{i}")), dir.file(&format!("go{i}"))))
        .collect();
    let first: Vec<_> = files[..2]
        .iter()
        .map(|(env, go)| {
            run_sh(&server, &opts, "job", &holding(env, go))
                .spawn()
                .unwrap()
        })
        .collect();
    assert!(eventually(STARTUP, || files[..2]
        .iter()
        .all(|(env, _)| has_line(env))));
    let held: Vec<_> = files[..2].iter().map(|(env, _)| read_env(env)).collect();
    let slots: BTreeSet<usize> = held.iter().map(|h| h.0).collect();
    assert_eq!(slots, BTreeSet::from([0, 1]), "{held:?}");
    for (slot, fence, key) in &held {
        assert_eq!(key, &format!("job:{slot}"));
        assert!(*fence > 0);
        assert!(exists(&server, key));
    }
    // Both slots held: one try, and the busy code.
    let out = output(run_sh(
        &server,
        &["--slots", "2", "--wait", "0"],
        "job",
        "true",
    ));
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(stderr(&out).contains("all 2 slots"), "{}", stderr(&out));
    // A third waits, and takes the slot the first gives up.
    let (env2, go2) = &files[2];
    let third = run_sh(&server, &opts, "job", &holding(env2, go2))
        .spawn()
        .unwrap();
    let mut first = first.into_iter();
    let p0 = first.next().unwrap();
    fs::write(&files[0].1, "").unwrap();
    assert!(finish(p0).status.success());
    assert!(eventually(STARTUP, || has_line(env2)));
    let (slot, fence, _) = read_env(env2);
    assert_eq!(slot, held[0].0);
    assert!(fence > held[0].1, "the slot's fence rose");
    for (_, go) in &files[1..] {
        fs::write(go, "").unwrap();
    }
    for child in first.chain([third]) {
        let out = finish(child);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(!exists(&server, "job:0") && !exists(&server, "job:1"));
}

#[test]
fn slots_refuse_zero_and_other_kinds_of_lock() {
    let server = RedisServer::start();
    for opts in [
        &["--slots", "0"][..],
        &["--slots", "2", "--permits", "3"],
        &["--slots", "2", "--and", "b"],
    ] {
        let out = output(run_sh(&server, opts, "job", "true"));
        assert_eq!(out.status.code(), Some(USAGE), "{opts:?}: {}", stderr(&out));
    }
}
