#![cfg(feature = "cli")]
//! `redlease run --partitions M --group G` and `redlease group`, run as processes
//! against a real `redis-server`. Each partition's command leaves a marker file
//! (`<partition>.<member pid>`, holding its fence) while it runs; synchronisation
//! is by those files, the server's state and process exit; every wait is bounded.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use support::cli::{Scratch, exit_within, output, redlease, stderr, stdout};
use support::{RedisServer, eventually};

const ROOMY: Duration = Duration::from_secs(30);

/// A member of `jobs` (4 partitions) whose commands keep a marker in `dir`
/// while they run, named for the partition and the member's pid (the parent of
/// the command's keeper), written whole under another name and renamed, so a
/// marker is never read empty, after the SIGTERM trap is set, so a command
/// stopped as it starts leaves none; `ignore_term` makes them ignore SIGTERM.
fn member(server: &RedisServer, dir: &Path, ignore_term: bool) -> Command {
    let trap = if ignore_term {
        "trap '' TERM".to_owned()
    } else {
        "trap 'rm -f \"$m\"; exit 0' TERM".to_owned()
    };
    let script = format!(
        "m={}/$REDLEASE_PARTITION.$(cut -d' ' -f4 /proc/$PPID/stat); {trap}; echo \"$REDLEASE_FENCE $REDLEASE_GROUP\" > \"$m.new\"; mv \"$m.new\" \"$m\"; \
         while [ -e \"$m\" ]; do sleep 0.05; done",
        dir.display()
    );
    let url = server.url();
    redlease([
        "run",
        "--url",
        &url,
        "--partitions",
        "4",
        "--group",
        "jobs",
        "--ttl",
        "2s",
        "--kill-grace",
        "500ms",
        "--",
        "sh",
        "-c",
        &script,
    ])
}

/// The running commands: partition → (member pid, fence).
fn markers(dir: &Path) -> BTreeMap<u32, Vec<(u32, u64)>> {
    let mut out: BTreeMap<u32, Vec<(u32, u64)>> = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((p, pid)) = name.split_once('.') else {
            continue;
        };
        let (Ok(p), Ok(pid)) = (p.parse(), pid.parse()) else {
            continue;
        };
        let fence = fs::read_to_string(entry.path())
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse().ok()))
            .unwrap_or(0);
        out.entry(p).or_default().push((pid, fence));
    }
    out
}

/// Whether each partition runs one command, `per` of them under each of `pids`.
fn spread(dir: &Path, pids: &[u32], per: usize) -> bool {
    let m = markers(dir);
    m.len() == 4
        && m.values().all(|v| v.len() == 1)
        && pids
            .iter()
            .all(|pid| m.values().filter(|v| v[0].0 == *pid).count() == per)
}

fn terminate(child: &mut Child) -> Option<i32> {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    exit_within(child, ROOMY).code()
}

/// A scratch folder (removed when dropped) and the empty markers folder in it.
fn markers_dir() -> (Scratch, PathBuf) {
    let scratch = Scratch::new("cli-partitions");
    let dir = scratch.file("markers");
    fs::create_dir(&dir).unwrap();
    (scratch, dir)
}

fn group_json(server: &RedisServer) -> Value {
    let out = output(redlease([
        "group",
        "--url",
        &server.url(),
        "--partitions",
        "4",
        "--json",
        "jobs",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn members_share_the_partitions_hand_them_over_and_the_group_shows_it() {
    let server = RedisServer::start();
    let (_scratch, dir) = markers_dir();
    let mut a = member(&server, &dir, false).spawn().unwrap();
    assert!(
        eventually(ROOMY, || spread(&dir, &[a.id()], 4)),
        "{:?}",
        markers(&dir)
    );
    let before = markers(&dir);
    // A second member: two partitions' commands stop and start again under it,
    // each under a higher fence; never two commands on a partition.
    let mut b = member(&server, &dir, false).spawn().unwrap();
    let mut twice = false;
    assert!(eventually(ROOMY, || {
        twice |= markers(&dir).values().any(|v| v.len() > 1);
        spread(&dir, &[a.id(), b.id()], 2)
    }));
    assert!(!twice, "two commands ran on one partition at once");
    for (p, v) in markers(&dir) {
        if v[0].0 == b.id() {
            assert!(
                v[0].1 > before[&p][0].1,
                "partition {p}'s fence did not rise"
            );
        }
    }
    // Read at once, as the handover settles: each partition names the member
    // whose command runs it, with that command's fence, and the group is
    // balanced, though the members' records may still be a round behind.
    let running = markers(&dir);
    let status = group_json(&server);
    assert_eq!(status["balanced"], true, "{status:#}");
    for p in status["partitions"].as_array().unwrap() {
        let owner = status["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == p["owner"])
            .unwrap_or_else(|| panic!("no owner: {status:#}"));
        let (pid, fence) = running[&u32::try_from(p["partition"].as_u64().unwrap()).unwrap()][0];
        assert_eq!(owner["pid"], u64::from(pid), "{status:#}");
        assert_eq!(p["fence"], fence, "{status:#}");
        assert!(p["client"].is_string(), "{status:#}");
    }
    let pids: Vec<u64> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.contains(&u64::from(a.id())) && pids.contains(&u64::from(b.id())));
    assert!(
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["fence"].as_u64().is_some())
    );
    let text = output(redlease([
        "group",
        "--url",
        &server.url(),
        "--partitions",
        "4",
        "jobs",
    ]));
    assert!(stdout(&text).contains("balanced"), "{}", stdout(&text));
    // SIGTERM: its commands stop, it leaves, the other takes everything.
    assert_eq!(terminate(&mut a), Some(128 + 15));
    assert!(eventually(ROOMY, || spread(&dir, &[b.id()], 4)));
    assert_eq!(terminate(&mut b), Some(128 + 15));
    assert!(
        markers(&dir).is_empty(),
        "{:?} {:?}",
        markers(&dir),
        fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect::<Vec<_>>()
    );
    // No member left: the size is unknown without --partitions.
    let out = output(redlease(["group", "--url", &server.url(), "jobs"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let status = group_json(&server);
    assert_eq!(status["members"].as_array().unwrap().len(), 0);
    assert!(
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["owner"].is_null())
    );
}

#[test]
fn a_revoked_command_that_ignores_sigterm_is_killed_after_the_grace_before_the_handover() {
    let server = RedisServer::start();
    let (_scratch, dir) = markers_dir();
    let mut a = member(&server, &dir, true).spawn().unwrap();
    assert!(eventually(ROOMY, || spread(&dir, &[a.id()], 4)));
    let mut b = member(&server, &dir, true).spawn().unwrap();
    // A's two revoked commands ignore SIGTERM; killed, they leave their
    // markers behind, so each moved partition shows A's old marker beside B's.
    let mut twice_live = false;
    assert!(eventually(ROOMY, || {
        let m = markers(&dir);
        twice_live |= m
            .values()
            .any(|v| v.iter().filter(|(pid, _)| *pid == b.id()).count() > 1);
        m.values()
            .filter(|v| v.iter().any(|(pid, _)| *pid == b.id()))
            .count()
            == 2
    }));
    assert!(!twice_live);
    // Both stop: ignoring SIGTERM, their commands are killed after the grace.
    for child in [&mut a, &mut b] {
        assert_eq!(terminate(child), Some(128 + 15));
    }
}
