//! The keeper (Linux): a small process between the supervisor (`run`, `elect`)
//! and the command, so that a supervisor killed without a word (SIGKILL, the OOM
//! killer) takes the command, its children and theirs with it, before its lease
//! can expire.
//!
//! The supervisor re-executes its own binary (`/proc/self/exe`, which works even
//! if the file was replaced since) as `redlease __keep PARENT GRACE_MS TTY
//! COMMAND…` (`TTY` is `tty` when the supervisor runs in its terminal's
//! foreground group, `-` otherwise), in a process group of its own. The keeper:
//!
//! - blocks every signal a group signal may carry and reads them from a
//!   `signalfd` (close-on-exec; it also names the sender), so that what is sent
//!   to the command's group (the supervisor's forwarded SIGINT / SIGTERM /
//!   SIGHUP / SIGQUIT, a user's `kill -HUP -PGID`) never ends it. The command
//!   starts with no signal blocked (its mask is emptied between fork and exec:
//!   std lets a child inherit its parent's mask), SIGPIPE at its default action
//!   (std resets it) and every other disposition as redlease inherited it, so a
//!   signal forwarded to it arrives at once;
//! - asks the kernel for SIGUSR1 when its parent dies (`PR_SET_PDEATHSIG`), then
//!   checks that its parent is still PARENT (it may have died before the call);
//! - becomes a child subreaper, so that what the command starts and orphans
//!   (double forks, `setsid` daemons) is reparented to it, not to init;
//! - under `tty`, makes its group the terminal's foreground group (see
//!   `terminal.rs`), then starts the command in it, and reaps everything;
//! - resumes a command stopped from the terminal (Ctrl-Z, SIGTSTP): a command
//!   holding a lease cannot be suspended, as its lease would run on; a command
//!   stopped otherwise (SIGSTOP, or SIGTTIN when redlease runs in the
//!   background) is resumed when a signal is forwarded to it, so that the
//!   signal reaches it, as a shell's `kill` resumes a stopped job;
//! - on SIGUSR1 from its parent (the supervisor's "kill now") or on its parent's
//!   death: SIGKILL to every process of the group and every descendant, again
//!   until none is left;
//! - when the command exits: SIGTERM to whatever it left running, SIGKILL after
//!   `GRACE_MS`; once nothing is left, exits as the command did (its code, or the
//!   signal that ended it, raised again on itself), so the supervisor reads the
//!   command's own status. The supervisor releases only then.
//!
//! Layout: this file is the keeper's process and its watch; `procs.rs` reads
//! `/proc` for what is left to end.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, at, never, select, tick};
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, getpid, getppid};
use signal_hook::low_level::emulate_default_handler;

use crate::exit::{CANNOT_EXECUTE, NOT_FOUND, OS_ERROR, SIGNAL_BASE};

mod procs;

/// The hidden subcommand that starts a keeper.
pub(crate) const KEEP: &str = "__keep";

/// The keeper's `TTY` argument when it is to give its group the terminal.
pub(crate) const TTY: &str = "tty";

/// Signals whose default action would end or stop the keeper and that a signal
/// to the group may carry; it blocks them all. SIGUSR1 is also its "kill
/// everything now" (from its parent) and its parent-death signal.
const BLOCKED: [Signal; 17] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGPIPE,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
    Signal::SIGIO,
    Signal::SIGPWR,
];

/// How often SIGKILL is sent again to what is left while everything is being
/// killed: a process that forked between a scan and its kill leaves an orphan
/// that the next round finds.
const AGAIN: Duration = Duration::from_millis(10);

/// How often the parent is looked for if signals can no longer be read.
const LOOK: Duration = Duration::from_millis(100);

/// The keeper's `main`: runs it when the arguments start with [`KEEP`].
pub(crate) fn dispatch() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != KEEP {
        return None;
    }
    let number = |a: Option<OsString>| a.and_then(|a| a.to_str()?.parse::<u64>().ok());
    let parent = number(args.next()).and_then(|p| i32::try_from(p).ok());
    let grace = number(args.next()).map(Duration::from_millis);
    let tty = args.next().and_then(|a| match a.to_str()? {
        TTY => Some(true),
        "-" => Some(false),
        _ => None,
    });
    let command: Vec<OsString> = args.collect();
    let (Some(parent), Some(grace), Some(tty), false) = (parent, grace, tty, command.is_empty())
    else {
        eprintln!("redlease: {KEEP} is redlease's own: `{KEEP} PARENT GRACE_MS TTY COMMAND...`");
        return Some(ExitCode::from(crate::exit::USAGE));
    };
    Some(keep(Pid::from_raw(parent), grace, tty, &command))
}

/// Runs `command` under the keeper's watch (see the module's documentation).
fn keep(parent: Pid, grace: Duration, tty: bool, command: &[OsString]) -> ExitCode {
    let os_error = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("redlease: keeper: {what}: {e}");
        ExitCode::from(OS_ERROR)
    };
    // Blocked first, on this thread before any other starts (threads inherit
    // the mask): the parent-death signal must not end the keeper before it has
    // ended the command. The command gets an empty mask back (see `command_of`).
    let mut mask = SigSet::empty();
    for signal in BLOCKED {
        mask.add(signal);
    }
    let signals = match mask
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC))
    {
        Ok(fd) => fd,
        Err(e) => return os_error("cannot catch signals", &e),
    };
    if let Err(e) = prctl::set_child_subreaper(true) {
        return os_error("cannot become a subreaper", &e);
    }
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGUSR1) {
        return os_error("cannot ask for the parent-death signal", &e);
    }
    // The parent may have died before the request: then nothing may start.
    if getppid() != parent {
        return ExitCode::from(OS_ERROR);
    }
    // SIGTTOU is blocked (above), so this goes through from the background.
    if tty && !crate::terminal::give_to_own_group() {
        eprintln!(
            "redlease: keeper: cannot give the terminal to the command; it runs in the background"
        );
    }
    let (program, args) = (&command[0], &command[1..]);
    let child = match command_of(program, args).spawn() {
        Ok(child) => child,
        Err(e) => {
            let name = program.to_string_lossy();
            let (code, says) = match e.kind() {
                std::io::ErrorKind::NotFound => (NOT_FOUND, "command not found".to_owned()),
                _ => (CANNOT_EXECUTE, format!("cannot run: {e}")),
            };
            eprintln!("redlease: {name}: {says}");
            return ExitCode::from(code);
        }
    };
    let command_pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (sig_tx, sig_rx) = crossbeam_channel::unbounded();
    let watching = thread::Builder::new()
        .name("redlease-keep".into())
        .spawn(move || {
            for info in signals {
                let (signal, from) = (info.ssi_signo, info.ssi_pid);
                let signal = i32::try_from(signal).unwrap_or(0);
                let from = i32::try_from(from).unwrap_or(0);
                if sig_tx.send((signal, from)).is_err() {
                    break;
                }
            }
        });
    let reaped = reap();
    let status = match (watching, reaped) {
        (Ok(_), Ok(reaped)) => watch(parent, grace, command_pid, &sig_rx, &reaped),
        (Err(e), _) | (_, Err(e)) => {
            kill_all(Signal::SIGKILL);
            let _ = child_wait_all();
            return os_error("cannot watch the command", &e);
        }
    };
    exit_as(status)
}

/// The command as it is started: with the empty signal mask a shell gives it, not
/// the keeper's (std's `Command` lets a child inherit its parent's mask).
fn command_of(program: &OsString, args: &[OsString]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    as_a_shell_starts_it(&mut cmd);
    cmd
}

/// Starts `cmd` through fork and exec with an empty signal mask. Fork and exec,
/// not `posix_spawn` (which std would use otherwise): the C library's
/// `posix_spawn` leaves its own signals (32, 33) ignored in the new program.
/// Used for the keeper too, so that what the command inherits through it is
/// what the supervisor had.
pub(crate) fn as_a_shell_starts_it(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // system call (`pthread_sigmask`), which is async-signal-safe; it allocates
    // nothing and takes no lock.
    #[expect(unsafe_code, reason = "the only way to reset the mask before exec")]
    unsafe {
        cmd.pre_exec(|| {
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
    }
}

/// Reaps every child (the command, and the orphans reparented to the keeper):
/// each `(pid, status)` is sent, stops and resumptions too; the channel
/// disconnects when none is left.
fn reap() -> std::io::Result<Receiver<(Pid, WaitStatus)>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let flags = WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
    thread::Builder::new()
        .name("redlease-reap".into())
        .spawn(move || {
            loop {
                match waitpid(None, Some(flags)) {
                    Ok(status) => {
                        let Some(pid) = status.pid() else { continue };
                        if tx.send((pid, status)).is_err() {
                            break;
                        }
                    }
                    Err(Errno::EINTR) => {}
                    // ECHILD: no child left, and so no descendant (orphans come here).
                    Err(_) => break,
                }
            }
        })?;
    Ok(rx)
}

/// Reaps every child left, blocking (used when the watch could not start).
fn child_wait_all() -> Result<(), Errno> {
    loop {
        match waitpid(None, None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the command and everything it started are gone; returns the
/// command's status (`None` if the keeper never saw it: its parent died).
fn watch(
    parent: Pid,
    grace: Duration,
    command: Pid,
    signals: &Receiver<(i32, i32)>,
    reaped: &Receiver<(Pid, WaitStatus)>,
) -> Option<WaitStatus> {
    let mut status = None;
    // Children seen stopped and not seen resumed since.
    let mut stopped: HashSet<Pid> = HashSet::new();
    let mut signals = signals.clone();
    // Only if the signal thread ever stops: the parent is then looked for.
    let mut look = never();
    let mut kill_at = never();
    let mut again = never();
    let kill_now = |again: &mut Receiver<Instant>| {
        kill_all(Signal::SIGKILL);
        *again = tick(AGAIN);
    };
    loop {
        select! {
            recv(reaped) -> r => match r {
                Ok((pid, WaitStatus::Stopped(_, signal))) => {
                    stopped.insert(pid);
                    if signal == Signal::SIGTSTP {
                        if pid == command {
                            eprintln!(
                                "redlease: a command holding a lease cannot be suspended; it goes on"
                            );
                        }
                        resume(&mut stopped);
                    }
                }
                Ok((pid, WaitStatus::Continued(_))) => {
                    stopped.remove(&pid);
                }
                Ok((pid, st)) if pid == command => {
                    stopped.remove(&pid);
                    status = Some(st);
                    // What the command left behind must not outlive its lease:
                    // SIGTERM now, SIGKILL after the grace. Usually nothing is
                    // left (no child: orphans are reparented here), and the next
                    // message is the disconnection; `/proc` is not read then.
                    if !childless() {
                        kill_all(Signal::SIGTERM);
                        kill_at = Instant::now().checked_add(grace).map_or_else(never, at);
                    }
                }
                Ok((pid, _)) => {
                    stopped.remove(&pid);
                }
                Err(_) => return status,
            },
            recv(signals) -> s => {
                let Ok((signal, from)) = s else {
                    signals = never();
                    look = tick(LOOK);
                    continue;
                };
                let orphaned = getppid() != parent;
                let usr1 = signal == Signal::SIGUSR1 as i32;
                if usr1 && (from == parent.as_raw() || orphaned) {
                    kill_now(&mut again);
                } else if !usr1 && !stopped.is_empty() {
                    // A signal to the group (forwarded, or from the terminal)
                    // reaches a stopped process only once it runs again.
                    resume(&mut stopped);
                }
            },
            recv(look) -> _ => if getppid() != parent {
                look = never();
                kill_now(&mut again);
            },
            recv(kill_at) -> _ => {
                kill_at = never();
                kill_now(&mut again);
            },
            recv(again) -> _ => kill_all(Signal::SIGKILL),
        }
    }
}

/// Resumes the keeper's group and every child seen stopped.
fn resume(stopped: &mut HashSet<Pid>) {
    let _ = killpg(getpid(), Signal::SIGCONT);
    for pid in stopped.drain() {
        let _ = kill(pid, Signal::SIGCONT);
    }
}

/// Whether the keeper has no child left, not even an unreaped one.
fn childless() -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    waitid(Id::All, flags) == Err(Errno::ECHILD)
}

/// Sends `signal` to every live process of the keeper's group and every
/// descendant of the keeper, the keeper excepted.
fn kill_all(signal: Signal) {
    let me = getpid();
    for pid in procs::doomed(me) {
        let _ = kill(pid, signal);
    }
    if signal != Signal::SIGKILL {
        // Also reaches what forks meanwhile; the keeper has it blocked (read
        // from its signalfd and ignored).
        let _ = killpg(me, signal);
        // A stopped process would see the signal only once resumed.
        for pid in procs::doomed(me) {
            let _ = kill(pid, Signal::SIGCONT);
        }
        let _ = killpg(me, Signal::SIGCONT);
    }
}

/// Exits as the command did: its exit code, or its signal raised on the keeper
/// with the default action (128 + N if that returns).
fn exit_as(status: Option<WaitStatus>) -> ExitCode {
    match status {
        Some(WaitStatus::Exited(_, code)) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
        Some(WaitStatus::Signaled(_, signal, _)) => {
            let n = signal as i32;
            let _ = emulate_default_handler(n);
            ExitCode::from(SIGNAL_BASE.saturating_add(u8::try_from(n).unwrap_or(0)))
        }
        // Its parent died: nobody reads the status.
        _ => ExitCode::from(SIGNAL_BASE.saturating_add(9)),
    }
}
