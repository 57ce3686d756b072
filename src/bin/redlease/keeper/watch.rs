//! The keeper's watch over what it started: every child reaped (stops and
//! resumptions seen), a command stopped from the terminal resumed, the signals
//! that end it all sent, until nothing is left.

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, at, never, select, tick};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, getpid, getppid};

use super::procs;

/// How often SIGKILL is sent again to what is left while everything is being
/// killed: a process that forked between a scan and its kill leaves an orphan
/// that the next round finds.
const AGAIN: Duration = Duration::from_millis(10);

/// How often the parent is looked for if signals can no longer be read.
const LOOK: Duration = Duration::from_millis(100);

/// Reaps every child (the command, and the orphans reparented to the keeper):
/// each `(pid, status)` is sent, stops and resumptions too; the channel
/// disconnects when none is left.
pub(super) fn reap() -> std::io::Result<Receiver<(Pid, WaitStatus)>> {
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
pub(super) fn child_wait_all() -> Result<(), Errno> {
    loop {
        match waitpid(None, None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the command and everything it started are gone; returns the
/// command's status (`None` if the keeper never saw it: its parent died).
pub(super) fn watch(
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
pub(super) fn kill_all(signal: Signal) {
    let me = getpid();
    let doomed = procs::doomed(me);
    for &pid in &doomed {
        let _ = kill(pid, signal);
    }
    if signal != Signal::SIGKILL {
        // Also reaches what forks meanwhile; the keeper has it blocked (read
        // from its signalfd and ignored).
        let _ = killpg(me, signal);
        // A stopped process would see the signal only once resumed.
        for pid in doomed {
            let _ = kill(pid, Signal::SIGCONT);
        }
        let _ = killpg(me, Signal::SIGCONT);
    }
}
