//! The terminal's foreground process group: while a command runs under `run` or
//! `elect`, its process group is the terminal's foreground group, as a shell
//! with job control makes a job's, so that it reads the terminal, and Ctrl-C,
//! Ctrl-\ and the terminal's other keys reach it.
//!
//! The command runs in a process group of its own (so that a lost lease stops
//! all of it): without this hand-over that group would be a background one,
//! stopped (SIGTTIN) or refused (EIO) when it reads the terminal. The keeper
//! gives the terminal to its group before it starts the command (see
//! [`give_to_own_group`]); the supervisor takes it back once the keeper has
//! exited ([`Terminal`]'s drop). Only when redlease itself runs in the
//! terminal's foreground group: a redlease started in the background gives the
//! terminal to nobody, as a shell's background job would not have it.

use std::fs::{File, OpenOptions};

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// The controlling terminal, opened to hand its foreground group over and back.
fn controlling() -> Option<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// Blocks SIGTTOU on the calling thread. A process that is not in its terminal's
/// foreground group and sets the foreground group (or writes to a terminal set
/// `tostop`) is sent SIGTTOU, which stops it, unless the signal is blocked or
/// ignored: then the call goes through.
fn block_ttou() {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let _ = ttou.thread_block();
}

/// The terminal of a redlease that runs in its foreground group: to be given to
/// the command's group while it runs, and taken back when dropped.
#[derive(Debug)]
pub(crate) struct Terminal {
    tty: File,
    /// The foreground group redlease found (its own), given back on drop.
    ours: Pid,
}

impl Terminal {
    /// The controlling terminal, if there is one and redlease's process group is
    /// its foreground group. SIGTTOU is blocked on this thread from then on: once
    /// the command's group has the terminal, redlease is in the background, and
    /// what it writes or the hand-back must not stop it.
    pub(crate) fn foreground() -> Option<Self> {
        let tty = controlling()?;
        let ours = getpgrp();
        if tcgetpgrp(&tty).ok()? != ours {
            return None;
        }
        block_ttou();
        Some(Self { tty, ours })
    }
}

impl Drop for Terminal {
    /// Takes the foreground group back (a shell waiting for redlease would take
    /// it back itself, but a script that goes on reading the terminal would not).
    fn drop(&mut self) {
        let _ = tcsetpgrp(&self.tty, self.ours);
    }
}

/// Makes the calling process's group the foreground group of its controlling
/// terminal (the keeper, before it starts the command, so that the command's
/// first read of the terminal already finds it). The keeper has SIGTTOU blocked.
/// Returns whether it did.
#[cfg(target_os = "linux")]
pub(crate) fn give_to_own_group() -> bool {
    controlling().is_some_and(|tty| tcsetpgrp(&tty, getpgrp()).is_ok())
}
