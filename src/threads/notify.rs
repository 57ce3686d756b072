//! The notifier thread: runs the `on_lost` callbacks, one after another, so that
//! user code never runs on the renewal thread. A slow or panicking callback delays
//! only the callbacks queued behind it: never a renewal, never a loss report.

use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};
use crate::lease::Notice;

/// The notifier's handle; dropping it stops the thread once the callbacks already
/// queued have run, and joins it.
pub(crate) struct Notifier {
    tx: Sender<Notice>,
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Notifier {
    pub(crate) fn spawn() -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let handle = thread::Builder::new()
            .name("redlease-notify".into())
            .spawn(move || run(&rx, &stopped))
            .map_err(Error::Spawn)?;
        Ok(Self {
            tx,
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// The queue leases send their callbacks to.
    pub(crate) fn sender(&self) -> Sender<Notice> {
        self.tx.clone()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Dropping the stop sender disconnects it: the thread runs what is queued
        // and ends. Leases that outlive it run their callbacks in place.
        self.stop.take();
        if let Some(handle) = self.handle.take() {
            // A callback that dropped the last client clone runs on this thread.
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

fn run(rx: &Receiver<Notice>, stop: &Receiver<()>) {
    loop {
        crossbeam_channel::select! {
            recv(rx) -> notice => match notice {
                Ok(notice) => notice.run(),
                Err(_) => return,
            },
            recv(stop) -> _ => {
                for notice in rx.try_iter() {
                    notice.run();
                }
                return;
            }
        }
    }
}
