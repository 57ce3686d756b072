//! The status line shown while `run` waits for a busy lock on a terminal: who
//! holds the key as far as its value tells, and the time left on their lease,
//! rewritten in place every half second.

use std::io::{self, IsTerminal, Write};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use redlease::LockInfo;

use crate::inspect::summary;
use crate::probe;

/// No line for a lock acquired within this: an uncontended run prints nothing.
const FIRST: Duration = Duration::from_millis(300);
/// Time between updates.
const EVERY: Duration = Duration::from_millis(500);

/// The thread drawing the line; [`stop`](Self::stop) erases it.
#[derive(Debug)]
pub(crate) struct Status {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl Status {
    /// Starts the line for the lock `name` under `prefix` on the server at `url`, if
    /// stderr is a terminal (`None` otherwise, or if the thread cannot start: the
    /// line is a nicety).
    pub(crate) fn start(url: &str, prefix: &str, name: &str) -> Option<Self> {
        if !io::stderr().is_terminal() {
            return None;
        }
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let (url, prefix, name) = (url.to_owned(), prefix.to_owned(), name.to_owned());
        let handle = thread::Builder::new()
            .name("redlease-status".into())
            .spawn(move || draw(&url, &prefix, &name, &stopped))
            .ok()?;
        Some(Self { stop, handle })
    }

    /// Erases the line and waits for the thread (at most one read's timeout).
    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}

/// The thread: waits [`FIRST`], then redraws every [`EVERY`] until stopped.
fn draw(url: &str, prefix: &str, name: &str, stopped: &Receiver<()>) {
    let key = format!("{prefix}{name}");
    let mut con = None;
    let mut width = 0;
    let mut wait = FIRST;
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
        wait = EVERY;
        if con.is_none() {
            con = probe::connect(url).ok();
        }
        let read = con.as_mut().map(|c| LockInfo::read(c, prefix, name));
        let what = if let Some(Ok(info)) = read {
            summary(&info)
        } else {
            con = None; // reconnect next time
            "cannot read it".to_owned()
        };
        let line = format!("redlease: waiting for `{key}`: {what}");
        width = width.max(line.chars().count());
        // `\r` and padding rewrite the previous line in place.
        let _ = write!(io::stderr(), "\r{line:width$}");
    }
    if width > 0 {
        let _ = write!(io::stderr(), "\r{:width$}\r", "");
    }
}
