//! The keeper (Linux): a small process between the supervisor (`run`, `elect`)
//! and the command, so that a supervisor killed without a word (SIGKILL, the OOM
//! killer) takes the command, its children and theirs with it, before its lease
//! can expire.
//!
//! The supervisor re-executes its own binary (`/proc/self/exe`, which works even
//! if the file was replaced since) as `redlease __keep PARENT GRACE_MS TTY LEASE
//! COMMAND…` (`TTY` is `tty` when the supervisor runs in its terminal's
//! foreground group, `-` otherwise; `LEASE` the number of an inherited pipe that
//! holds the lease to release, see `lease.rs`, or `-`), in a process group of
//! its own. The keeper:
//!
//! - reads the lease from `LEASE` and closes it, before anything starts;
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
//!   until none is left; once none is, if its parent is gone (it died without
//!   releasing), releases the lease: a compare-and-delete of exactly its value,
//!   so a lease that ended and went to someone else is left alone;
//! - when the command exits: SIGTERM to whatever it left running, SIGKILL after
//!   `GRACE_MS`; once nothing is left, exits as the command did (its code, or the
//!   signal that ended it, raised again on itself), so the supervisor reads the
//!   command's own status. The supervisor releases only then.
//!
//! Layout: this file is the keeper's process; `watch.rs` its watch over what it
//! started (reaping, resuming, killing); `procs.rs` reads `/proc` for what is
//! left to end; `lease.rs` the lease handed over, and its release.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::thread;
use std::time::Duration;

use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::WaitStatus;
use nix::unistd::{Pid, getppid};
use signal_hook::low_level::emulate_default_handler;

use crate::exit::{CANNOT_EXECUTE, NOT_FOUND, OS_ERROR, SIGNAL_BASE};

mod lease;
mod procs;
mod watch;

pub(crate) use lease::{Handover, number as lease_number};

use watch::{child_wait_all, kill_all, reap, watch};

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
    let lease = args.next().and_then(|a| match a.to_str()? {
        "-" => Some(None),
        n => n.parse::<i32>().ok().map(Some),
    });
    let command: Vec<OsString> = args.collect();
    let (Some(parent), Some(grace), Some(tty), Some(lease), false) =
        (parent, grace, tty, lease, command.is_empty())
    else {
        eprintln!(
            "redlease: {KEEP} is redlease's own: `{KEEP} PARENT GRACE_MS TTY LEASE COMMAND...`"
        );
        return Some(ExitCode::from(crate::exit::USAGE));
    };
    // Read and closed first: the command must not inherit it.
    let lease = lease.and_then(Handover::read);
    Some(keep(
        Pid::from_raw(parent),
        grace,
        tty,
        lease.as_ref(),
        &command,
    ))
}

/// Runs `command` under the keeper's watch (see the module's documentation).
fn keep(
    parent: Pid,
    grace: Duration,
    tty: bool,
    lease: Option<&Handover>,
    command: &[OsString],
) -> ExitCode {
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
            release_orphaned(parent, lease);
            return os_error("cannot watch the command", &e);
        }
    };
    // Nothing of the command is left (the watch returns only then).
    release_orphaned(parent, lease);
    exit_as(status)
}

/// Releases `lease` if the supervisor `parent` is gone: it died without a word
/// and will not release. A supervisor alive releases after it has reaped the
/// keeper, so the lease is never released twice by this pair; and the release
/// compares the exact value, so it never deletes a later holder's lock.
///
/// The supervisor is gone once this keeper was handed to another parent, or
/// while its main thread has ended and its other threads are still ending (a
/// `SIGKILL`ed process ends thread by thread, and its children stay with its
/// last threads until then: their parent's pid has not changed yet).
fn release_orphaned(parent: Pid, lease: Option<&Handover>) {
    if let Some(lease) = lease
        && (getppid() != parent || procs::ending(parent))
    {
        lease.release();
    }
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
