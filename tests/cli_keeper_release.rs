#![cfg(all(feature = "cli", target_os = "linux"))]
//! A supervisor (`run`, `elect`) killed without a word leaves no lock behind:
//! once its keeper has ended the command, the keeper releases the lease itself
//! (a compare-and-delete of exactly its value), so the next holder does not
//! wait for the TTL; what it needs comes through a pipe, never a command line
//! or an environment; and a lock that is no longer its own is left alone.
//!
//! Servers have a password (`requirepass`), so that the checks of what each
//! process shows look for it. Processes are found from the supervisor's pid
//! down, in `/proc`; every wait is bounded.

mod support;

use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::cli::{HUNG, STARTUP, Scratch, exit_within, has_line, redlease};
use support::{RedisServer, eventually};

/// The server's password.
const PASSWORD: &str = "keeper-s3cret-pw";

/// How soon after the supervisor's SIGKILL the next holder must hold the lock.
/// The release itself takes a few tens of ms (see the FIGURE lines); the bound
/// leaves room for a loaded 2-core machine, still far below the 30 s TTL.
const NEXT_HOLDS: Duration = Duration::from_secs(2);

fn server() -> RedisServer {
    RedisServer::start_with(&["--requirepass", PASSWORD])
}

/// `redlease SUBCOMMAND --url URL --ttl 30s NAME -- sh -c 'echo $$ > pid; exec
/// sleep 600'`, its stderr to the file `stderr` of `dir` (read once the keeper
/// is gone; a pipe would stay open as long as the keeper).
fn holder(server: &RedisServer, dir: &Scratch, subcommand: &str, name: &str) -> Child {
    holder_with(server, dir, &[subcommand], name)
}

/// [`holder`] with `args` (the subcommand and its options) before `--url`.
fn holder_with(server: &RedisServer, dir: &Scratch, args: &[&str], name: &str) -> Child {
    let url = server.url();
    let script = format!("echo $$ > {}; exec sleep 600", dir.file("pid").display());
    let mut cmd = redlease(args.iter().copied().chain([
        "--url", &url, "--ttl", "30s", name, "--", "sh", "-c", &script,
    ]));
    cmd.stdout(Stdio::null())
        .stderr(File::create(dir.file("stderr")).unwrap());
    let child = cmd.spawn().unwrap();
    assert!(
        eventually(STARTUP, || has_line(&dir.file("pid"))),
        "the command never started"
    );
    child
}

/// The parent of `pid`, from `/proc/PID/stat`; `None` once it is gone.
fn parent_of(pid: i32) -> Option<i32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The live children of `pid`.
fn children_of(pid: i32) -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

/// The one keeper the supervisor started.
fn keeper_of(supervisor: &Child) -> i32 {
    let pid = i32::try_from(supervisor.id()).unwrap();
    let children = children_of(pid);
    assert_eq!(children.len(), 1, "one keeper: {children:?}");
    children[0]
}

fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| Some(t[t.rfind(')')? + 1..].trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// SIGKILLs `supervisor` alone, then starts `next` at once and measures how long
/// after the kill its command runs (it writes the file `held`); returns that
/// time, the next run's exit status, what the first one's keeper said, and
/// whether the next one held at all.
fn kill_and_take_over(
    mut supervisor: Child,
    dir: &Scratch,
    next: impl FnOnce(&Path) -> Command,
) -> (Duration, i32, String, bool) {
    let keeper = keeper_of(&supervisor);
    let held = dir.file("held");
    let killed = Instant::now();
    kill(
        Pid::from_raw(i32::try_from(supervisor.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    let mut next = next(&held).spawn().unwrap();
    let holds = eventually(Duration::from_secs(10), || held.exists());
    let took = killed.elapsed();
    let status = exit_within(&mut next, HUNG);
    let _ = supervisor.wait();
    assert!(eventually(HUNG, || !alive(keeper)), "the keeper lived on");
    let said = fs::read_to_string(dir.file("stderr")).unwrap();
    (took, status.code().unwrap_or(-1), said, holds)
}

/// Runs `round` (a whole kill-and-take-over on a fresh server) up to twice: CI
/// saw the keeper end, once in some dozens of runs, without a word and without
/// releasing. The cause found since: a `SIGKILL`ed supervisor ends thread by
/// thread, and a keeper that had ended its command while the supervisor's last
/// threads were still ending saw the same parent pid, took it for alive and
/// left the release to it (`keeper::procs::ending` now reads the supervisor's
/// main thread as ended). A miss is still printed, so that CI's output would
/// keep the evidence of another cause; a second one fails.
fn twice(round: impl Fn() -> (Duration, i32, String, bool)) -> (Duration, i32, String) {
    let (took, code, said, holds) = round();
    if holds {
        return (took, code, said);
    }
    eprintln!("UNEXPLAINED: the keeper did not release (it said: {said:?}); the round again");
    let (took, code, said, holds) = round();
    assert!(holds, "the next holder never held: {said}");
    (took, code, said)
}

#[test]
fn a_killed_run_is_released_by_its_keeper_and_the_next_run_holds_at_once() {
    let (took, code, said) = twice(|| {
        let server = server();
        let dir = Scratch::new("keeper-release-run");
        let supervisor = holder(&server, &dir, "run", "job");
        let url = server.url();
        kill_and_take_over(supervisor, &dir, |held| {
            let script = format!("echo ok > {}", held.display());
            redlease([
                "run", "--url", &url, "--wait", "10s", "job", "--", "sh", "-c", &script,
            ])
        })
    });
    eprintln!("FIGURE run: the next holder ran {took:?} after the supervisor's SIGKILL");
    assert_eq!(code, 0, "{said}");
    assert!(took < NEXT_HOLDS, "the next run held only after {took:?}");
    assert!(said.contains("`job` released"), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");
}

#[test]
fn a_killed_runs_permits_are_released_by_its_keeper_and_the_next_run_holds_at_once() {
    for weight in ["1", "2"] {
        let (took, code, said) = twice(|| {
            let server = server();
            let dir = Scratch::new("keeper-release-permits");
            let opts = ["run", "--permits", "2", "--weight", weight];
            let supervisor = holder_with(&server, &dir, &opts, "pool");
            let url = server.url();
            kill_and_take_over(supervisor, &dir, |held| {
                let script = format!("echo ok > {}", held.display());
                redlease([
                    "run",
                    "--url",
                    &url,
                    "--permits",
                    "2",
                    "--weight",
                    "2",
                    "--wait",
                    "10s",
                    "pool",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ])
            })
        });
        eprintln!(
            "FIGURE run --permits 2 --weight {weight}: the next holder of both ran {took:?} \
             after the supervisor's SIGKILL"
        );
        assert_eq!(code, 0, "{said}");
        assert!(took < NEXT_HOLDS, "the next run held only after {took:?}");
        assert!(said.contains("`pool` released"), "{said}");
    }
}

#[test]
fn a_killed_elect_is_resigned_by_its_keeper_and_the_next_candidate_leads_at_once() {
    let (took, code, said) = twice(|| {
        let server = server();
        let dir = Scratch::new("keeper-release-elect");
        let supervisor = holder(&server, &dir, "elect", "leader");
        let url = server.url();
        kill_and_take_over(supervisor, &dir, |held| {
            let script = format!("echo ok > {}", held.display());
            redlease(["elect", "--url", &url, "leader", "--", "sh", "-c", &script])
        })
    });
    eprintln!("FIGURE elect: the next leader ran {took:?} after the supervisor's SIGKILL");
    assert_eq!(code, 0, "{said}");
    assert!(took < NEXT_HOLDS, "the next leader led only after {took:?}");
    assert!(said.contains("`leader` released"), "{said}");
}

/// What `/proc/PID/FILE` holds, NULs as spaces.
fn proc_text(pid: i32, file: &str) -> String {
    let bytes = fs::read(format!("/proc/{pid}/{file}")).unwrap();
    String::from_utf8_lossy(&bytes).replace('\0', " ")
}

/// Where each descriptor of `pid` above stderr points.
fn descriptors(pid: i32) -> Vec<(String, String)> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) > Some(2))
        .filter_map(|e| {
            let to = fs::read_link(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                to.display().to_string(),
            ))
        })
        .collect()
}

#[test]
fn neither_the_keeper_nor_the_command_shows_the_password_or_the_token() {
    for subcommand in ["run", "elect"] {
        let server = server();
        let dir = Scratch::new("keeper-secrets");
        let mut supervisor = holder(&server, &dir, subcommand, "job");
        let token: String = server.query(redis::cmd("GET").arg("job"));
        let keeper = keeper_of(&supervisor);
        let command: i32 = fs::read_to_string(dir.file("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            parent_of(command),
            Some(keeper),
            "the command is the keeper's"
        );
        for (who, pid) in [("keeper", keeper), ("command", command)] {
            for file in ["cmdline", "environ"] {
                let text = proc_text(pid, file);
                for secret in [PASSWORD, token.as_str()] {
                    assert!(
                        !text.contains(secret),
                        "{subcommand}: {who}'s {file}: {text}"
                    );
                }
            }
        }
        // The command inherits no descriptor but those redlease itself was
        // given (stdin, stdout, stderr, and what the test harness passes on):
        // not the pipe the lease came through. Files the command opens itself
        // while it starts (a shell reading its locale) are its own: only
        // pipes, sockets and anonymous inodes can have been inherited.
        let own = descriptors(i32::try_from(supervisor.id()).unwrap());
        let inheritable = |(_, target): &(String, String)| {
            ["pipe:", "socket:", "anon_inode:"]
                .iter()
                .any(|kind| target.starts_with(kind))
        };
        for fd in descriptors(command).into_iter().filter(inheritable) {
            assert!(
                own.contains(&fd),
                "{subcommand}: the command has {fd:?}, redlease {own:?}"
            );
        }
        let _ = kill(
            Pid::from_raw(i32::try_from(supervisor.id()).unwrap()),
            Signal::SIGTERM,
        );
        exit_within(&mut supervisor, HUNG);
    }
}

#[test]
fn a_keeper_leaves_a_lock_that_another_holder_took_over() {
    let server = server();
    let dir = Scratch::new("keeper-release-other");
    let mut supervisor = holder(&server, &dir, "run", "job");
    let keeper = keeper_of(&supervisor);
    // As if the lease had run out and another holder had taken the lock.
    let _: () = server.query(
        redis::cmd("SET")
            .arg("job")
            .arg("someone-else")
            .arg("PX")
            .arg(30_000),
    );
    kill(
        Pid::from_raw(i32::try_from(supervisor.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    let _ = supervisor.wait();
    assert!(eventually(HUNG, || !alive(keeper)), "the keeper lived on");
    let value: Option<String> = server.query(redis::cmd("GET").arg("job"));
    let said = fs::read_to_string(dir.file("stderr")).unwrap();
    assert_eq!(value.as_deref(), Some("someone-else"), "{said}");
    assert!(!said.contains("released"), "{said}");
}
