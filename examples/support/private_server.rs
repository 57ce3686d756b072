//! A private `redis-server` for the examples, started when no server is given.
//! Shared by the examples through `#[path]`; not an example itself.

use std::error::Error;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Where the examples talk to Redis when `REDIS_URL` is unset.
#[allow(
    dead_code,
    reason = "examples that start their own servers never ask for it"
)]
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// `REDIS_URL` (default [`DEFAULT_URL`]) if a server answers there, else a private
/// server started for the demo (said on stderr), which the caller keeps until the
/// end: its `Drop` stops it.
#[allow(
    dead_code,
    reason = "examples that start their own servers never ask for it"
)]
pub fn redis_url() -> Result<(String, Option<PrivateServer>), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    if answers(&url) {
        return Ok((url, None));
    }
    let server = PrivateServer::start().map_err(|e| {
        format!("nothing answers at REDIS_URL and no private server could start: {e}")
    })?;
    eprintln!(
        "nothing answers at REDIS_URL; started a private redis-server on 127.0.0.1:{} \
         for this demo (stopped when it ends)",
        server.port
    );
    Ok((server.url(), Some(server)))
}

/// Whether a Redis server answers `PING` at `url` within half a second.
pub fn answers(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    client
        .get_connection_with_timeout(Duration::from_millis(500))
        .and_then(|mut con| {
            con.set_read_timeout(Some(Duration::from_millis(500)))?;
            redis::cmd("PING").query::<String>(&mut con)
        })
        .is_ok()
}

/// The URLs of `private`, after saying on stderr that `started` (what was
/// started, and why) on their ports for this demo.
#[allow(
    dead_code,
    reason = "only the examples that start several servers announce them"
)]
pub fn announce(private: &[PrivateServer], started: &str) -> Vec<String> {
    let ports: Vec<u16> = private.iter().map(|s| s.port).collect();
    eprintln!("{started} on 127.0.0.1 ports {ports:?} for this demo (stopped when it ends)");
    private.iter().map(PrivateServer::url).collect()
}

/// A `redis-server` child on a free port of `127.0.0.1`, killed on `Drop`.
pub struct PrivateServer {
    child: Child,
    pub port: u16,
}

impl PrivateServer {
    /// Starts `redis-server` without persistence and waits (at most 5 s) until it
    /// answers; tries another port if the first one was taken meanwhile.
    pub fn start() -> Result<Self, Box<dyn Error>> {
        Self::start_with(|_| Vec::new())
    }

    /// [`start`](Self::start), with the arguments `extra` gives for the port.
    pub fn start_with(extra: impl Fn(u16) -> Vec<String>) -> Result<Self, Box<dyn Error>> {
        for _ in 0..3 {
            // A port the kernel just had free.
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(extra(port))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!("cannot run redis-server ({e}); install it with `apt-get install redis-server`")
                })?;
            let mut server = PrivateServer { child, port };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if answers(&server.url()) {
                    return Ok(server);
                }
                if server.child.try_wait()?.is_some() {
                    break; // exited: most likely the port was taken; try another
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        Err("redis-server did not come up".into())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl PrivateServer {
    /// Kills the server and waits for it; a no-op once stopped.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}
