//! A diagnosis for the fleet group (`REDLEASE_FLEET_MONITOR=1`): in which order
//! the worker processes subscribed to the key's release channel, read from
//! `MONITOR`, with each subscriber connection traced to its process by `ss -tnp`.
//! Redis writes a release message to a channel's subscribers in one fixed order;
//! with turns decided by a race, that order did not predict who lagged.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::thread;

use parking_lot::Mutex;

use super::super::support::RedisServer;

/// Lines of a `MONITOR` connection, read on a thread of their own.
pub struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Self {
        let mut con = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        con.write_all(b"MONITOR\r\n").unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(con).lines() {
                let Ok(line) = line else { break };
                if line.contains("SUBSCRIBE") {
                    sink.lock().push(line);
                }
            }
        });
        Self { lines }
    }

    /// Prints the order of the release channel's subscriptions as worker indices
    /// (`pids[i]` is worker `i`).
    pub fn report(&self, server: &RedisServer, pids: &[u32]) {
        let out = Command::new("ss").args(["-tnpH"]).output().unwrap();
        let ss = String::from_utf8_lossy(&out.stdout);
        let peer = format!("127.0.0.1:{}", server.port());
        let worker_of = |port: &str| -> Option<usize> {
            let local = format!("127.0.0.1:{port}");
            let row = ss.lines().find(|l| {
                let mut f = l.split_whitespace().skip(3);
                f.next() == Some(local.as_str()) && f.next() == Some(peer.as_str())
            })?;
            let pid: u32 = row.split("pid=").nth(1)?.split(',').next()?.parse().ok()?;
            pids.iter().position(|p| *p == pid)
        };
        let order: Vec<String> = self
            .lines
            .lock()
            .iter()
            .filter(|l| l.contains(":released"))
            .filter_map(|l| {
                let port = l.split("127.0.0.1:").nth(1)?.split(']').next()?;
                let verb = l.split('"').nth(1)?;
                Some(format!("{verb} by {:?}", worker_of(port)))
            })
            .collect();
        println!("FLEET release channel, in order: {order:?}");
    }
}
