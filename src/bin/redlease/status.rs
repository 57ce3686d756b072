//! The status line shown while `run` waits for a busy lock on a terminal: who
//! holds the key as far as its value tells, and the time left on their lease,
//! rewritten in place every half second.

use std::io::{self, IsTerminal, Write};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

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
    /// Starts the line for `key` (fence counter `fence`) on the server at `url`, if
    /// stderr is a terminal (`None` otherwise, or if the thread cannot start: the
    /// line is a nicety).
    pub(crate) fn start(url: &str, key: &str, fence: &str) -> Option<Self> {
        if !io::stderr().is_terminal() {
            return None;
        }
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let (url, key, fence) = (url.to_owned(), key.to_owned(), fence.to_owned());
        let handle = thread::Builder::new()
            .name("redlease-status".into())
            .spawn(move || draw(&url, &key, &fence, &stopped))
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
fn draw(url: &str, key: &str, fence: &str, stopped: &Receiver<()>) {
    let mut con = None;
    let mut width = 0;
    let mut wait = FIRST;
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
        wait = EVERY;
        let read = match con.as_mut() {
            Some(c) => probe::read(c, key, fence),
            None => probe::connect(url).and_then(|mut c| {
                let snapshot = probe::read(&mut c, key, fence);
                con = Some(c);
                snapshot
            }),
        };
        let what = if let Ok(snapshot) = read {
            summary(&snapshot)
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
