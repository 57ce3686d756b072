#![cfg(all(feature = "cli", target_os = "linux"))]
//! What `redlease run` and `redlease elect` start ends with them: a supervisor
//! killed without a word (SIGKILL) takes its command, the command's children and
//! the orphans they left (`setsid`, double forks) with it, while its lease still
//! runs; what a finished command left running is stopped before the release.
//!
//! Processes are found by the pid files the commands write, and checked in
//! `/proc` (a pid is alive while it exists with the same start time and is not a
//! zombie). Every wait is bounded.

mod support;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, Signal, kill, signal};
use nix::unistd::Pid;
use support::cli::{STARTUP, Scratch, exit_within, has_line, redlease, run_sh, stderr};
use support::{RedisServer, eventually};

/// How long after the supervisor's SIGKILL everything it started may live.
const GONE: Duration = Duration::from_secs(1);

/// The files each process of [`family`] writes its pid to.
const PIDS: [&str; 5] = ["sh", "bg1", "bg2", "escaped", "daemon"];

/// A shell that starts two background children, one child in a session of its
/// own (`setsid`), and a double-forked daemon (orphaned at once, in a session of
/// its own); each writes its pid to a file of `dir`; then `ready`; then it waits.
fn family(dir: &Scratch) -> String {
    let f = |name: &str| dir.file(name).display().to_string();
    format!(
        "echo $$ > {sh}; sleep 300 & echo $! > {bg1}; sleep 300 & echo $! > {bg2}; \
         setsid sh -c 'echo $$ > {escaped}; exec sleep 300' & \
         ( setsid sh -c 'echo $$ > {daemon}; exec sleep 300' & ); \
         while [ ! -s {escaped} ] || [ ! -s {daemon} ]; do sleep 0.01; done; \
         echo ok > {ready}; wait",
        sh = f("sh"),
        bg1 = f("bg1"),
        bg2 = f("bg2"),
        escaped = f("escaped"),
        daemon = f("daemon"),
        ready = f("ready"),
    )
}

/// A process seen once: its pid and its start time (so a reused pid is not it).
#[derive(Debug, Clone, Copy)]
struct Seen {
    pid: i32,
    start: u64,
}

/// State and start time of `pid`, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    // After the name: state is field 3, start time field 22.
    Some((fields[0].chars().next()?, fields[19].parse().ok()?))
}

impl Seen {
    fn read(path: &Path) -> Seen {
        let pid: i32 = fs::read_to_string(path).unwrap().trim().parse().unwrap();
        let (_, start) =
            stat(pid).unwrap_or_else(|| panic!("{}: {pid} not running", path.display()));
        Seen { pid, start }
    }

    fn alive(self) -> bool {
        stat(self.pid).is_some_and(|(state, start)| start == self.start && state != 'Z')
    }
}

/// Every process of [`family`], once it is ready.
fn seen(dir: &Scratch) -> Vec<Seen> {
    assert!(
        eventually(STARTUP, || has_line(&dir.file("ready"))),
        "the command never got ready"
    );
    let seen: Vec<Seen> = PIDS.iter().map(|n| Seen::read(&dir.file(n))).collect();
    assert!(seen.iter().all(|s| s.alive()), "{seen:?}");
    seen
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).unwrap())
}

/// Starts a server and, from `supervisor(server, script)`, a supervisor of a
/// [`family`] under `key` (scratch files in a folder named after `scratch`);
/// once the family is ready, SIGKILLs the supervisor, then checks that every
/// process of the family is gone within [`GONE`], while `key`'s lease still had
/// time left.
fn killed_takes_everything(
    scratch: &str,
    key: &str,
    supervisor: impl FnOnce(&RedisServer, &str) -> Command,
) {
    let server = RedisServer::start();
    let dir = Scratch::new(scratch);
    let mut supervisor = supervisor(&server, &family(&dir)).spawn().unwrap();
    let seen = seen(&dir);
    let before = server.pttl(key);
    assert!(before > 0, "the lease is held: {before}");
    let killed = Instant::now();
    kill(pid(&supervisor), Signal::SIGKILL).unwrap();
    let gone = eventually(GONE, || seen.iter().all(|s| !s.alive()));
    let took = killed.elapsed();
    let left: Vec<&Seen> = seen.iter().filter(|s| s.alive()).collect();
    // Never past the lease: its key had not expired when they were gone.
    let pttl = server.pttl(key);
    let _ = supervisor.wait();
    for s in &left {
        let _ = kill(Pid::from_raw(s.pid), Signal::SIGKILL);
    }
    eprintln!(
        "FIGURE everything gone {took:?} after the supervisor's SIGKILL; PTTL then {pttl} ms"
    );
    assert!(gone, "still running {took:?} after the SIGKILL: {left:?}");
    assert!(pttl > 0, "the lease ran out first (PTTL {pttl})");
}

#[test]
fn a_killed_run_takes_its_command_its_children_and_their_orphans_with_it() {
    killed_takes_everything("keeper-run", "job", |server, script| {
        run_sh(server, &["--ttl", "5s"], "job", script)
    });
}

#[test]
fn a_killed_elect_takes_its_command_its_children_and_their_orphans_with_it() {
    killed_takes_everything("keeper-elect", "leader", |server, script| {
        let url = server.url();
        redlease([
            "elect", "--url", &url, "--ttl", "5s", "leader", "--", "sh", "-c", script,
        ])
    });
}

#[test]
fn what_a_finished_command_left_running_is_stopped_before_the_release() {
    let server = RedisServer::start();
    let dir = Scratch::new("keeper-left");
    // One leftover that ends on SIGTERM, one that ignores it (SIGKILL after the
    // grace), one in a session of its own; the command itself exits 3.
    let f = |name: &str| dir.file(name).display().to_string();
    let script = format!(
        "sleep 300 & echo $! > {a}; (trap '' TERM; exec sleep 300) & echo $! > {b}; \
         setsid sh -c 'echo $$ > {c}; exec sleep 300' & \
         while [ ! -s {c} ]; do sleep 0.01; done; echo ok > {ready}; \
         while [ ! -e {go} ]; do sleep 0.01; done; exit 3",
        a = f("a"),
        b = f("b"),
        c = f("c"),
        ready = f("ready"),
        go = f("go"),
    );
    let mut child = run_sh(&server, &["--kill-grace", "1s"], "job", &script)
        .spawn()
        .unwrap();
    assert!(eventually(STARTUP, || has_line(&dir.file("ready"))));
    // Read while the command still runs: once it exits, the keeper stops them.
    let seen: Vec<Seen> = ["a", "b", "c"]
        .iter()
        .map(|n| Seen::read(&dir.file(n)))
        .collect();
    fs::write(dir.file("go"), "go").unwrap();
    let status = exit_within(&mut child, Duration::from_secs(20));
    let left: Vec<&Seen> = seen.iter().filter(|s| s.alive()).collect();
    for s in &left {
        let _ = kill(Pid::from_raw(s.pid), Signal::SIGKILL);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the command's own code: {}",
        stderr(&out)
    );
    assert!(left.is_empty(), "outlived redlease: {left:?}");
    assert!(!server.exists("job"), "released");
}

/// A command exec'd directly (no shell between, which would reset what it
/// inherited): it writes its blocked and ignored signal masks and whether it
/// has a signalfd open to `ready`, then waits; a SIGTERM, SIGINT, SIGHUP or
/// SIGQUIT runs its handler, which notes the signal: the waiting loop then names
/// the first in `got` and exits 0. (A handler that exited itself could run
/// inside the finaliser of `ready`'s file object, where Python ignores the
/// exit: the command then ran on.)
fn signal_reporter(dir: &Scratch) -> Vec<String> {
    let script = format!(
        "import os, signal, sys, time\n\
         st = dict(l.split(':', 1) for l in open('/proc/self/status'))\n\
         got = []\n\
         def on(n, _):\n    got.append(n)\n\
         for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):\n    signal.signal(s, on)\n\
         def link(f):\n    try:\n        return os.readlink('/proc/self/fd/' + f)\n    except OSError:\n        return ''\n\
         fds = [link(f) for f in os.listdir('/proc/self/fd')]\n\
         fds = 'signalfd' if any('signalfd' in f for f in fds) else 'no-signalfd'\n\
         open({ready:?}, 'w').write('%s %s %s\\n' % (st['SigBlk'].strip(), st['SigIgn'].strip(), fds))\n\
         deadline = time.monotonic() + 60\n\
         while not got and time.monotonic() < deadline:\n    time.sleep(0.01)\n\
         if got:\n    open({got:?}, 'w').write(str(got[0]) + '\\n'); sys.exit(0)\n\
         sys.exit(3)\n",
        got = dir.file("got").display().to_string(),
        ready = dir.file("ready").display().to_string(),
    );
    vec!["python3".into(), "-c".into(), script]
}

/// The signals redlease forwards to its command.
const FORWARDED: [Signal; 4] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

/// The test process's ignored signals (`SigIgn` in /proc/self/status).
fn ignored_here() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("SigIgn:"));
    u64::from_str_radix(line.unwrap().trim(), 16).unwrap()
}

/// Starts `redlease SUBCOMMAND` over [`signal_reporter`], sends it `signal` once
/// the command is ready, and checks that the command's handler ran and that
/// redlease ended well within the kill grace (60 s here).
fn a_signal_reaches_the_command(subcommand: &str, signal: Signal) {
    // Of the standard signals, the command ignores only what Python ignores
    // itself (SIGPIPE, SIGXFSZ).
    signal_reaches(None, subcommand, &[signal], 0x0100_1000);
}

/// Starts `redlease SUBCOMMAND` over [`signal_reporter`] (through `wrapper`, a
/// program that execs it, if given), checks that the command started with no
/// signal blocked and with `ignored` as its ignored standard signals, sends
/// redlease each of `signals` in turn, the last once the command is ready; checks
/// that the command's handler ran for the last one, and that redlease ended well
/// within the kill grace (60 s here).
fn signal_reaches(wrapper: Option<&str>, subcommand: &str, signals: &[Signal], ignored: u64) {
    let server = RedisServer::start();
    let dir = Scratch::new(&format!("keeper-signal-{subcommand}"));
    let url = server.url();
    let mut args: Vec<String> = vec![subcommand.into(), "--url".into(), url];
    args.extend(["--kill-grace".into(), "60s".into(), "k".into(), "--".into()]);
    args.extend(signal_reporter(&dir));
    let mut cmd = redlease(&args);
    if let Some(wrapper) = wrapper {
        let mut execs = Command::new(wrapper);
        execs.arg(cmd.get_program()).args(cmd.get_args());
        execs.env_remove("REDIS_URL").stdin(Stdio::null());
        execs.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd = execs;
    }
    // Started as from a terminal's shell: the signals under test at their default,
    // whatever the test process inherited (a CI job under `nohup`, or started in
    // the background of a script, ignores some of them, and so would redlease).
    // SAFETY: `sigaction` is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            for s in FORWARDED {
                signal(s, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    assert!(
        eventually(STARTUP, || has_line(&dir.file("ready"))),
        "the command never started"
    );
    // What else the test process ignores, redlease inherits (std's `spawn` resets
    // SIGPIPE alone), and the command with it.
    let reset =
        (FORWARDED.iter().chain([&Signal::SIGPIPE])).fold(0u64, |m, s| m | 1 << (*s as i32 - 1));
    let ignored = ignored | (ignored_here() & 0x7fff_ffff & !reset);
    let report = fs::read_to_string(dir.file("ready")).unwrap();
    let fields: Vec<&str> = report.split_whitespace().collect();
    // As a shell starts it: nothing blocked; the keeper's signalfd not open.
    // (Signals 32 and up, the C library's own among them, keep what the test
    // process had: cargo starts it through `posix_spawn`, which leaves 32 and 33
    // ignored.)
    assert_eq!(fields[0], "0000000000000000", "blocked at start: {report}");
    let found = u64::from_str_radix(fields[1], 16).unwrap();
    assert_eq!(found & 0x7fff_ffff, ignored, "ignored at start: {report}");
    assert_eq!(fields[2], "no-signalfd", "open fds: {report}");
    let sent = Instant::now();
    for signal in signals {
        kill(pid(&child), *signal).unwrap();
    }
    let last = signals[signals.len() - 1];
    // Its handler runs and it exits 0; redlease releases and exits with it, long
    // before the 60 s grace would have forced a SIGKILL.
    let status = exit_within(&mut child, Duration::from_secs(20));
    let took = sent.elapsed();
    let got = fs::read_to_string(dir.file("got")).unwrap_or_default();
    assert_eq!(
        got.trim(),
        (last as i32).to_string(),
        "the handler did not run for {last} (or ran for another signal first)"
    );
    assert_eq!(status.code(), Some(0), "{status:?} after {took:?}");
    assert!(took < Duration::from_secs(10), "{last} took {took:?}");
}

#[test]
fn a_signal_ignored_when_redlease_started_stays_ignored_in_the_command() {
    // `nohup` execs redlease with SIGHUP ignored: the command inherits it ignored
    // (as under `nohup` directly), and a SIGHUP to redlease is not forwarded, so
    // the SIGTERM after it is the signal the command's handler sees.
    signal_reaches(
        Some("nohup"),
        "run",
        &[Signal::SIGHUP, Signal::SIGTERM],
        0x0100_1001,
    );
}

#[test]
fn sigterm_to_run_reaches_a_command_started_without_a_shell() {
    a_signal_reaches_the_command("run", Signal::SIGTERM);
}

#[test]
fn sigint_to_run_reaches_a_command_started_without_a_shell() {
    a_signal_reaches_the_command("run", Signal::SIGINT);
}

#[test]
fn sighup_and_sigquit_to_run_reach_the_command() {
    a_signal_reaches_the_command("run", Signal::SIGHUP);
    a_signal_reaches_the_command("run", Signal::SIGQUIT);
}

#[test]
fn sigterm_to_elect_reaches_a_command_started_without_a_shell() {
    a_signal_reaches_the_command("elect", Signal::SIGTERM);
}

/// A pseudo-terminal session (Python's `pty.fork`: the child leads a session
/// whose controlling terminal is the pty, in its foreground group) whose child
/// runs `redlease run` as a program of a shell's job would be run (no shell
/// between), then says whether its group has the terminal back. The parent
/// plays the user: it types a line when the command asks, Ctrl-Z once the command
/// waits, then Ctrl-C. Prints everything the terminal showed; every wait is
/// bounded.
const AT_A_TERMINAL: &str = r#"
import os, pty, select, signal, subprocess, sys, time
redlease, url = sys.argv[1], sys.argv[2]
command = (
    "import signal, sys, time\n"
    "print('ready', flush=True)\n"
    "print('read:' + input(), flush=True)\n"
    "got = []\n"
    "signal.signal(signal.SIGINT, lambda n, f: got.append(n))\n"
    "print('waiting', flush=True)\n"
    "end = time.monotonic() + 30\n"
    "while not got and time.monotonic() < end: time.sleep(0.01)\n"
    "print('got INT' if got else 'no INT', flush=True)\n"
    "sys.exit(0 if got else 3)\n")
pid, fd = pty.fork()
if pid == 0:
    r = subprocess.run([redlease, 'run', '--url', url, '--kill-grace', '60s', 'k', '--',
                        'python3', '-c', command])
    print('exit', r.returncode, 'foreground-back', os.tcgetpgrp(0) == os.getpgrp(), flush=True)
    print('end of session', flush=True)
    os._exit(0)
out = b''
def until(text, secs=20):
    global out
    end = time.monotonic() + secs
    while text.encode() not in out and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            out += data
    return text.encode() in out
if until('ready'):
    os.write(fd, b'hello\n')
if until('waiting'):
    os.write(fd, b'\x1a')
if until('cannot be suspended'):
    os.write(fd, b'\x03')
until('end of session')
end = time.monotonic() + 20
while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < end:
    time.sleep(0.01)
if time.monotonic() >= end:
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors='replace'))
"#;

#[test]
fn under_a_terminal_the_command_has_it_reads_it_gets_its_keys_and_cannot_be_suspended() {
    let server = RedisServer::start();
    let binary = env!("CARGO_BIN_EXE_redlease");
    let out = Command::new("python3")
        .args(["-c", AT_A_TERMINAL, binary, &server.url()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    eprintln!("the terminal showed:\n{shown}\n{}", stderr(&out));
    // The command read the line typed at the terminal (in the foreground group;
    // in a background one it reads end-of-file or is stopped).
    assert!(shown.contains("read:hello"), "no line read");
    // Ctrl-Z stopped it (SIGTSTP to the foreground group); the keeper resumed it.
    assert!(
        shown.contains("a command holding a lease cannot be suspended"),
        "no word on Ctrl-Z"
    );
    // Ctrl-C reached its handler; it exited 0, and redlease with it; then the
    // terminal was back with redlease's caller's group.
    assert!(
        shown.contains("got INT"),
        "Ctrl-C did not reach the command"
    );
    assert!(
        shown.contains("exit 0 foreground-back True"),
        "redlease's end or the terminal's hand-back"
    );
    assert!(!server.exists("k"), "released");
}
