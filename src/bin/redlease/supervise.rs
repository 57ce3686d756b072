//! Running a command under a lease (a lock, locks, a permit, a leadership):
//! signals watched from the start, the command supervised while it runs (signals
//! forwarded, stopped when the lease is lost, killed after the grace), the lease
//! released when it exits, and the exit code picked. Shared by `run` and `elect`.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, at, never, select};
use nix::sys::signal::Signal;
use redlease::{CancelToken, LeaseLost, LossReason};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::child::Running;
use crate::exit::{self, Failure, LOST, OS_ERROR, SIGNAL_BASE};
use crate::held::Held;
use crate::server::Servers;
use crate::terminal::Terminal;

/// Runs `command` while `held` (a lock, locks, a permit or a leadership) is held:
/// supervised (see [`supervise`]), then released; the exit code is picked by
/// [`finish`]. A signal that raced the acquire stops it before the command starts.
/// The keeper (Linux) gets the lease's ticket and `servers`, to release it if
/// redlease is killed. Shared by `run` and `elect`.
pub(crate) fn run_command(
    held: Held,
    servers: &Servers,
    command: &[OsString],
    signals: &Receiver<i32>,
    grace: Duration,
    key: &str,
) -> Result<u8, Failure> {
    if !signals.is_empty() {
        let _ = held.unlock();
        return Ok(cancelled(signals, key));
    }
    let env = held.env();
    // Only the keeper hands the terminal over (Linux).
    let terminal = if cfg!(target_os = "linux") {
        Terminal::foreground()
    } else {
        None
    };
    let lease = held.ticket().map(|ticket| (servers, ticket));
    let child = match Running::spawn(command, &env, grace, terminal.is_some(), lease) {
        Ok(child) => child,
        Err(failure) => {
            let _ = held.unlock();
            return Err(failure);
        }
    };
    let ended = supervise(&child, held.lost(), signals, grace);
    let status = child.wait();
    // The terminal back to redlease's group before anything else is said.
    drop(terminal);
    finish(held, &ended, status?)
}

/// The signals redlease forwards to the command: what a service manager, a
/// terminal or a user sends to stop it.
const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// Installs the SIGINT / SIGTERM / SIGHUP / SIGQUIT handlers: each signal cancels a wait in progress
/// (through `cancel`) and is queued on the returned channel, to be forwarded to
/// the command once it runs. A signal redlease was started with ignored (`nohup`,
/// a shell's background job without job control) is left ignored, so that the
/// command inherits it ignored, as it would without redlease.
pub(crate) fn watch_signals(cancel: CancelToken) -> Result<Receiver<i32>, Failure> {
    let os_error = |e: std::io::Error| Failure::new(OS_ERROR, format!("cannot watch signals: {e}"));
    let ignored = ignored_at_start();
    let watched = FORWARDED
        .into_iter()
        .filter(|&n| ignored & (1 << (n - 1)) == 0);
    let mut signals = Signals::new(watched).map_err(os_error)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    thread::Builder::new()
        .name("redlease-signal".into())
        .spawn(move || {
            for signal in signals.forever() {
                cancel.cancel();
                if tx.send(signal).is_err() {
                    break;
                }
            }
        })
        .map_err(os_error)?;
    Ok(rx)
}

/// The signals this process has ignored, as the kernel's mask (bit N-1 for
/// signal N) from `/proc/self/status`; none where it cannot be read.
fn ignored_at_start() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(line.trim(), 16).ok()
        })
        .unwrap_or(0)
}

/// The exit code after a signal cancelled the wait: 128 + its number, as a shell
/// reports a process that signal ended.
pub(crate) fn cancelled(signals: &Receiver<i32>, key: &str) -> u8 {
    let signal = signals.try_recv().unwrap_or(SIGINT);
    let name = Signal::try_from(signal).map_or("a signal", Signal::as_str);
    eprintln!("redlease: stopped by {name} before `{key}` was acquired; nothing left held");
    SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(0))
}

/// How a supervised command ended, as [`supervise`] saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ended {
    /// Why the lease was lost while the command ran, if it was.
    pub(crate) lost: Option<&'static str>,
    /// The first forwarded signal redlease received while the command ran.
    pub(crate) signal: Option<i32>,
    /// Whether the command had to be stopped with SIGKILL after the grace.
    pub(crate) killed: bool,
}

impl Ended {
    /// The exit code for a command that ended with `status`: its own, unless a
    /// signal redlease received had to be enforced with SIGKILL, which reports
    /// that signal as a shell would (128 + N), not the SIGKILL.
    pub(crate) fn code(&self, status: ExitStatus) -> u8 {
        match self.signal {
            Some(signal) if self.killed => {
                SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(0))
            }
            _ => exit::of_status(status),
        }
    }
}

/// Watches the running command until it exits: forwards SIGINT / SIGTERM /
/// SIGHUP / SIGQUIT to its
/// process group, and when the lease is lost (a message on `lost`, or its
/// disconnection) sends SIGTERM; either way SIGKILL follows `grace` after the
/// first, so a command that ignores the signal cannot keep the lock (or the
/// caller's shutdown) waiting. Used by every subcommand that runs a command
/// under a lease.
pub(crate) fn supervise(
    child: &Running,
    lost: &Receiver<LeaseLost>,
    signals: &Receiver<i32>,
    grace: Duration,
) -> Ended {
    let mut lost_rx = lost.clone();
    let mut signals = signals.clone();
    let mut kill_at = never();
    let mut stopping = false;
    let mut ended = Ended::default();
    let mut stop = |kill_at: &mut Receiver<Instant>, signal: Signal| {
        child.signal(signal);
        // The grace counts from the first stop; a second signal does not extend it.
        if !stopping {
            stopping = true;
            *kill_at = Instant::now().checked_add(grace).map_or_else(never, at);
        }
    };
    loop {
        select! {
            recv(child.exited()) -> _ => break,
            recv(lost_rx) -> msg => {
                // One message, then disconnection: stop listening either way.
                lost_rx = never();
                ended.lost = Some(msg.map_or("its renewal stopped", |m| reason(m.reason)));
                stop(&mut kill_at, Signal::SIGTERM);
            }
            recv(signals) -> signal => match signal.map(|n| (n, Signal::try_from(n))) {
                Ok((n, Ok(signal))) => {
                    ended.signal.get_or_insert(n);
                    stop(&mut kill_at, signal);
                }
                Ok((_, Err(_))) => {}
                Err(_) => signals = never(),
            },
            recv(kill_at) -> _ => {
                kill_at = never();
                ended.killed = true;
                child.signal(Signal::SIGKILL);
            }
        }
    }
    if ended.lost.is_some() {
        // The command has stopped; anything it left running in its group must not
        // go on working without the lock.
        child.signal(Signal::SIGKILL);
    }
    ended
}

/// Releases the lock after the command exited, and picks the exit code.
fn finish(guard: Held, ended: &Ended, status: ExitStatus) -> Result<u8, Failure> {
    let what = guard.what();
    let code = ended.code(status);
    if let Some(why) = ended.lost {
        return Err(Failure::new(
            LOST,
            format!("{what} lost while the command ran ({why}); the command was stopped"),
        ));
    }
    if !guard.is_held() {
        return Err(Failure::new(
            LOST,
            format!("{what} ended before the command did (it exited with {code})"),
        ));
    }
    if let (Some(signal), true) = (ended.signal, ended.killed) {
        let name = Signal::try_from(signal).map_or("a signal", Signal::as_str);
        eprintln!(
            "redlease: the command outlived {name} by --kill-grace and was killed; releasing"
        );
    }
    match guard.unlock() {
        Ok(released) if released.was_held() => Ok(code),
        Ok(released) => Err(Failure::new(
            LOST,
            format!(
                "{what} ended before the command did ({released:?} at release; it exited with {code})"
            ),
        )),
        Err(e) => {
            // The lease was valid when the command ended: its work ran under the lock.
            eprintln!(
                "redlease: warning: release of the {what} failed ({}); it expires with its ttl",
                exit::chain(&e)
            );
            Ok(code)
        }
    }
}

/// Why a lease was lost, in words.
fn reason(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "the key expired or was deleted",
        LossReason::Taken => "someone else holds the key",
        LossReason::Unreachable => "redis unreachable until the lease ran out",
        LossReason::MaxHold => "--max-hold reached",
        LossReason::TtlElapsed => "its ttl ran out",
        LossReason::Shutdown => "its renewal stopped",
        LossReason::Released => "the client shut down",
        _ => "lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_command_killed_after_the_grace_reports_the_signal_redlease_got() {
        let sigkilled = ExitStatus::from_raw(9);
        let ended = Ended {
            lost: None,
            signal: Some(15),
            killed: true,
        };
        assert_eq!(ended.code(sigkilled), 128 + 15);
        // A command that handled the signal and exited keeps its own status.
        let exited = ExitStatus::from_raw(7 << 8);
        let handled = Ended {
            killed: false,
            ..ended
        };
        assert_eq!(handled.code(exited), 7);
        assert_eq!(Ended::default().code(sigkilled), 128 + 9);
    }
}
