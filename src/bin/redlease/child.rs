//! The command run under the lock: started in its own process group (the
//! terminal's foreground group while it runs, when redlease has the terminal),
//! watched for its exit, signalled, and reaped.
//!
//! On Linux the process started is the keeper (`keeper/`), which leads the
//! group, runs the command in it and ends everything it started if this process
//! dies; its exit status is the command's. Elsewhere the command is started
//! directly, and a supervisor killed without a word leaves it running.

use std::ffi::OsString;
use std::io::{self, IsTerminal};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::Duration;

use crossbeam_channel::Receiver;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use redlease::Ticket;

use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND, OS_ERROR};
use crate::server::Servers;

/// A started command.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    /// Its process group: the command's pid, as it leads its own group.
    group: Pid,
    /// Disconnects when the command has exited (it is not reaped until [`wait`](Self::wait)).
    exited: Receiver<()>,
}

impl Running {
    /// Starts `command` (program and arguments) with `env` added to its
    /// environment, in a process group of its own, so that a lost lock stops
    /// everything it started (`sh -c '…'` and its children), not just its first
    /// process. On Linux, under a keeper that ends what is left of it `grace`
    /// after the command exits, and all of it at once if this process dies.
    /// With `foreground` (redlease has the terminal, Linux only: see `terminal.rs`), the
    /// command's group is made the terminal's foreground group before the command
    /// starts, and it reads the terminal as it would without redlease. With
    /// `lease` (Linux), the keeper is handed the servers and the lease's ticket
    /// through a pipe, to release the lease itself if this process dies.
    ///
    /// Must be called on the main thread: the kernel's parent-death signal
    /// fires when the thread that started the keeper ends.
    ///
    /// # Errors
    /// [`NOT_FOUND`] / [`CANNOT_EXECUTE`] as shells report them, [`OS_ERROR`]
    /// when the keeper or the exit watcher cannot start.
    pub(crate) fn spawn(
        command: &[OsString],
        env: &[(&str, String)],
        grace: Duration,
        foreground: bool,
        lease: Option<Lease<'_>>,
    ) -> Result<Self, Failure> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Failure::usage("no command given"))?;
        // The pipe's end the keeper inherits: this process's copy is closed once
        // the keeper has started.
        let (mut cmd, lease_pipe) = started(program, args, grace, foreground, lease);
        cmd.envs(env.iter().map(|(k, v)| (k, v))).process_group(0);
        // A process group that is not the terminal's foreground group is stopped
        // (SIGTTIN) when it reads the terminal: it would hang holding the lock.
        // Reading end-of-file fails fast instead.
        if io::stdin().is_terminal() && !foreground {
            cmd.stdin(Stdio::null());
        }
        let name = program.to_string_lossy();
        let child = cmd.spawn();
        // Inheritable until now: nothing else starts from redlease meanwhile.
        drop(lease_pipe);
        let child = child.map_err(|e| match e.kind() {
            // The keeper reports the command's own failure to start as a shell
            // would (127, 126); this one is the keeper's.
            _ if cfg!(target_os = "linux") => {
                Failure::new(OS_ERROR, format!("cannot start the keeper of {name}: {e}"))
            }
            io::ErrorKind::NotFound => {
                Failure::new(NOT_FOUND, format!("{name}: command not found"))
            }
            _ => Failure::new(CANNOT_EXECUTE, format!("{name}: cannot run: {e}")),
        })?;
        let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let (tx, exited) = crossbeam_channel::bounded::<()>(0);
        let watcher = thread::Builder::new()
            .name("redlease-child".into())
            .spawn(move || {
                // WNOWAIT leaves the command a zombie: its pid, and so its group
                // id, cannot be reused before `wait` reaps it, so every signal
                // sent until then reaches the command's group and no other.
                while let Err(Errno::EINTR) =
                    waitid(Id::Pid(group), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
                {
                }
                drop(tx);
            });
        let mut running = Self {
            child,
            group,
            exited,
        };
        if let Err(e) = watcher {
            let _ = running.child.kill();
            let _ = running.child.wait();
            return Err(Failure::new(
                OS_ERROR,
                format!("cannot watch the command: {e}"),
            ));
        }
        Ok(running)
    }

    /// Disconnects once the command has exited.
    pub(crate) fn exited(&self) -> &Receiver<()> {
        &self.exited
    }

    /// Sends `signal` to the command's process group. A group already gone is no
    /// error: there is nothing left to stop. On Linux SIGKILL is asked of the
    /// keeper (SIGUSR1), which sends it to the group and to every descendant
    /// that left it.
    pub(crate) fn signal(&self, signal: Signal) {
        if cfg!(target_os = "linux") && signal == Signal::SIGKILL {
            let _ = kill(self.group, Signal::SIGUSR1);
        } else {
            let _ = killpg(self.group, signal);
        }
    }

    /// Reaps the command and returns its exit status.
    ///
    /// # Errors
    /// [`OS_ERROR`] if the status cannot be read.
    pub(crate) fn wait(mut self) -> Result<ExitStatus, Failure> {
        // The keeper leaves nothing behind; if it was itself killed, what is
        // left of its group goes now, while its unreaped pid still names it.
        let _ = killpg(self.group, Signal::SIGKILL);
        self.child
            .wait()
            .map_err(|e| Failure::new(OS_ERROR, format!("cannot wait for the command: {e}")))
    }
}

/// The lease a keeper is to release if the supervisor dies: the servers it is
/// held on, and its ticket.
pub(crate) type Lease<'a> = (&'a Servers, Ticket);

/// What is started for `program`: on Linux, this binary as a keeper of it, and
/// the pipe it inherits with `lease` in it (`None` without one, or when the
/// pipe cannot be made: the lease then ends with its TTL if redlease is killed).
#[cfg(target_os = "linux")]
fn started(
    program: &OsString,
    args: &[OsString],
    grace: Duration,
    tty: bool,
    lease: Option<Lease<'_>>,
) -> (Command, Option<OwnedFd>) {
    use crate::keeper::{Handover, lease_number};
    let pipe = lease.and_then(|(servers, ticket)| {
        let servers = servers.clone();
        Handover { servers, ticket }
            .pipe()
            .map_err(|e| eprintln!("redlease: warning: cannot hand the lease to the keeper: {e}"))
            .ok()
    });
    // /proc/self/exe, read by the new process, is this very binary even if the
    // file was replaced or removed since.
    let mut cmd = Command::new("/proc/self/exe");
    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    cmd.arg0("redlease")
        .arg(crate::keeper::KEEP)
        .arg(std::process::id().to_string())
        .arg(grace_ms.to_string())
        .arg(if tty { crate::keeper::TTY } else { "-" })
        .arg(pipe.as_ref().map_or_else(|| "-".to_owned(), lease_number))
        .arg(program)
        .args(args);
    crate::keeper::as_a_shell_starts_it(&mut cmd);
    (cmd, pipe)
}

/// What is started for `program`: elsewhere, the program itself (no keeper: a
/// killed redlease leaves its lease to its TTL).
#[cfg(not(target_os = "linux"))]
fn started(
    program: &OsString,
    args: &[OsString],
    _grace: Duration,
    _tty: bool,
    _lease: Option<Lease<'_>>,
) -> (Command, Option<OwnedFd>) {
    let mut cmd = Command::new(program);
    cmd.args(args);
    (cmd, None)
}
