#![allow(dead_code)]
//! Real `redis-server` processes for the integration tests, after redis-rs
//! `redis-test/src/server.rs` and `redis/tests/support/mod.rs`.
//!
//! Every test starts its own servers on free ports of `127.0.0.1`, so tests run in parallel
//! without sharing keys. The binary is `$REDLEASE_REDIS_SERVER`, else `redis-server` from
//! `PATH`; a missing binary fails the test, it never skips it.

pub mod acl;
pub mod alone;
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clients;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod counter;
pub mod fair_queue;
pub mod fleet;
pub mod format;
pub mod info;
pub mod keys;
pub mod proxy;
pub mod redisson;
pub mod sentinel;
pub mod tls;

use std::fs::{self, File};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a server may take to answer its first `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Fresh ports tried when `redis-server` reports "Address already in use".
const PORT_ATTEMPTS: usize = 10;
const CONN_TIMEOUT: Duration = Duration::from_secs(2); // of `RedisServer::conn`
/// Poll interval of [`eventually`] and [`wait_for`].
const POLL: Duration = Duration::from_millis(2);
static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One `redis-server` child process on `127.0.0.1`, killed and reaped on `Drop`.
///
/// All methods take `&self`, so a server can be shared with scoped threads (one thread
/// pauses it while another waits on a lock).
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    extra_args: Vec<String>,
    child: Mutex<Option<Child>>,
    pid: AtomicU32,
    paused: AtomicBool,
}

impl RedisServer {
    /// Starts a server with the default arguments; see [`RedisServer::start_with`].
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts `redis-server --port P --bind 127.0.0.1 --save "" --appendonly no --logfile
    /// <tmp>/redis.log --dir <tmp>` followed by `extra_args`, on a free port, and waits
    /// (at most 5 s) until it answers `PING` (with the password of a `--requirepass`).
    ///
    /// # Panics
    /// If the binary is missing, or the server does not come up (the panic message holds
    /// its log), or 10 ports in a row were taken.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let extra_args: Vec<String> = extra_args.iter().map(ToString::to_string).collect();
        let mut port = free_port();
        // Removed on unwind too, if the server does not come up.
        let dir = TempDir::new(port);
        for _ in 0..PORT_ATTEMPTS {
            if let Some(child) = launch(&dir.0, port, &extra_args) {
                return RedisServer {
                    port,
                    dir,
                    extra_args,
                    pid: AtomicU32::new(child.id()),
                    child: Mutex::new(Some(child)),
                    paused: AtomicBool::new(false),
                };
            }
            port = free_port();
        }
        panic!("no free port in {PORT_ATTEMPTS} tries");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:P/`, with the password of a `--requirepass` argument if any.
    pub fn url(&self) -> String {
        admin_url(self.port, &self.extra_args)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A new connection with 2 s connect, read and write timeouts.
    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        connect(&self.url(), CONN_TIMEOUT)
    }

    /// [`RedisServer::try_conn`], unwrapped.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap()
    }

    /// Runs `cmd` on a new [`RedisServer::conn`], unwrapped.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.conn()).unwrap()
    }

    /// The server's clock (`TIME`) in microseconds since the Unix epoch: the least
    /// fence a fenced acquire after this call can get.
    pub fn clock_micros(&self) -> u64 {
        let (s, us): (u64, u64) = self.query(&redis::cmd("TIME"));
        s * 1_000_000 + us
    }

    /// Pid of the current process (changes on [`RedisServer::restart`]).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Freezes the server with `SIGSTOP`: connections stay open, nothing is answered (the
    /// kernel still completes new TCP handshakes). Panics if the server is not running.
    pub fn pause(&self) {
        let sent = self.signal("STOP");
        assert!(sent, "pause: server not running");
        // The stop is asynchronous; return only once the kernel reports state `T`.
        let stat = format!("/proc/{}/stat", self.pid());
        let stopped = || fs::read_to_string(&stat).is_ok_and(|s| s.contains(") T "));
        let stopped = eventually(Duration::from_secs(1), stopped);
        assert!(stopped, "pause: server did not stop");
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Thaws a paused server with `SIGCONT`; queued commands are then answered. Panics if
    /// the server is not running.
    pub fn resume(&self) {
        let sent = self.signal("CONT");
        assert!(sent, "resume: server not running");
        self.paused.store(false, Ordering::SeqCst);
    }

    /// `SIGKILL`s the server and reaps it: its port refuses connections until
    /// [`RedisServer::restart`]. Data is lost (no persistence). A no-op if already dead.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Kills the server if running, then starts a fresh, empty one on the same port and
    /// waits for `PING` (retrying for ~1 s while the port is still busy).
    ///
    /// # Panics
    /// If the server does not come back.
    pub fn restart(&self) {
        self.kill();
        for _ in 0..PORT_ATTEMPTS {
            if let Some(child) = launch(&self.dir.0, self.port, &self.extra_args) {
                self.pid.store(child.id(), Ordering::SeqCst);
                *self.child.lock() = Some(child);
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// [`restart`](Self::restart) with another server binary (`bin`: a path, or
    /// a name on `PATH`) on the same port: the clients of the old one meet another
    /// kind of server where they reconnect.
    ///
    /// # Panics
    /// If the server does not come up.
    pub fn restart_as(&self, bin: &str) {
        self.kill();
        for _ in 0..PORT_ATTEMPTS {
            if let Some(child) = launch_with(bin, &self.dir.0, self.port, &self.extra_args) {
                self.pid.store(child.id(), Ordering::SeqCst);
                *self.child.lock() = Some(child);
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("could not start {bin} on port {}", self.port);
    }

    /// Whether the child process is alive (paused counts as alive).
    pub fn is_running(&self) -> bool {
        self.child
            .lock()
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Sends `kill -<sig>` to our child while we still hold it unreaped, so the pid cannot
    /// belong to another process. Returns whether the signal was delivered.
    fn signal(&self, sig: &str) -> bool {
        let mut child = self.child.lock();
        let Some(child) = child.as_mut() else {
            return false;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.paused.load(Ordering::SeqCst) {
            self.signal("CONT");
        }
        self.kill();
    }
}

/// `n` independent servers, for Redlock.
#[derive(Debug)]
pub struct Masters {
    pub servers: Vec<RedisServer>,
}

impl Masters {
    pub fn start(n: usize) -> Masters {
        Masters {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }
}

/// What one wake-up round saw of its waiter (see [`assert_woken`]): its attempt
/// count when it was seen queued, its count when it held the lock, and the
/// wake-ups by a release message the round added.
pub struct WakeRound {
    pub queued: u64,
    pub acquired: u64,
    pub wakeups: u64,
}

/// Asserts that a queued waiter is woken by the release message, not by polling,
/// playing `round` (queue a waiter, release, let it take the lock) up to three times.
///
/// A waiter's attempt counter moves when an attempt is sent, so the attempt its
/// subscription's confirmation makes may still be on its way when the test sees it
/// queued and releases: that attempt then takes the lock, no wake-up needed. Such a
/// round (no attempt after the one seen, no wake-up) proves nothing either way and is
/// played again; a lock taken by a later attempt with no wake-up fails at once.
pub fn assert_woken(mut round: impl FnMut() -> WakeRound) {
    for i in 0..3 {
        let r = round();
        if r.wakeups == 0 && r.acquired == r.queued {
            eprintln!("round {i}: the attempt in flight at the release took the lock");
            continue;
        }
        assert!(
            r.wakeups >= 1,
            "woken by polling, not by the release message ({} attempts queued, {} when acquired)",
            r.queued,
            r.acquired
        );
        return;
    }
    panic!("three rounds taken by the attempt in flight at the release");
}

/// Polls `cond` every ~2 ms until it returns `true` (→ `true`) or `timeout` passes
/// (→ `false`, after one last check). Use instead of `sleep`.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    wait_for(timeout, || cond().then_some(())).is_some()
}

/// Polls `f` every ~2 ms until it returns `Some` or `timeout` passes (→ `None`).
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(POLL);
    }
}

/// Multiplier for stress-test thread and round counts: `$REDLEASE_STRESS`, default 1.
pub fn stress_factor() -> usize {
    std::env::var("REDLEASE_STRESS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// A connection to `url` with `timeout` for connect, reads and writes.
pub fn connect(url: &str, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let con = redis::Client::open(url)?.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// A port the kernel just had free: bind `127.0.0.1:0`, read the port, close.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

pub fn binary() -> String {
    std::env::var("REDLEASE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// `<temp_dir>/redlease-test-<pid>-<counter>-<port>`, removed on `Drop` (for a
/// `RedisServer`, after its own `Drop` has killed the process).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(port: u16) -> TempDir {
        let pid = std::process::id();
        for _ in 0..100 {
            let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("redlease-test-{pid}-{n}-{port}"));
            match fs::create_dir(&dir) {
                Ok(()) => return TempDir(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("cannot create {}: {e}", dir.display()),
            }
        }
        panic!("no fresh temp dir under {}", std::env::temp_dir().display());
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Spawns the server on `port` and waits for it to answer `PING` with its own pid; `None`
/// if the port was taken.
fn launch(dir: &Path, port: u16, extra_args: &[String]) -> Option<Child> {
    launch_with(&binary(), dir, port, extra_args)
}

/// [`launch`] with the server binary `bin`.
fn launch_with(bin: &str, dir: &Path, port: u16, extra_args: &[String]) -> Option<Child> {
    let log = dir.join("redis.log");
    let stdio = dir.join("stdio.log");
    let _ = fs::remove_file(&log);
    let out = File::create(&stdio).unwrap();
    let mut child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--logfile")
        .arg(&log)
        .arg("--dir")
        .arg(dir)
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| match e.kind() {
            io::ErrorKind::NotFound => panic!(
                "redis-server not found: install it with `apt-get install -y redis-server` \
                 (Debian/Ubuntu package redis-server) or set REDLEASE_REDIS_SERVER \
                 (tried `{bin}`)"
            ),
            _ => panic!("cannot run `{bin}`: {e}"),
        });
    let logs = || {
        let read = |p: &Path| fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>\n"));
        let (log, stdio) = (read(&log), read(&stdio));
        format!("--- redis.log ---\n{log}--- stdout/stderr ---\n{stdio}")
    };
    let url = admin_url(port, extra_args);
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let logs = logs();
            if logs.contains("Address already in use") {
                return None;
            }
            panic!("redis-server on port {port} exited with {status}\n{logs}");
        }
        // Another test's server may own the port: only our own pid counts as up.
        if serving_pid(&url) == Some(child.id()) {
            return Some(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let logs = logs();
            panic!("redis-server on port {port}: no PING in {STARTUP_TIMEOUT:?}\n{logs}");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The default user's URL, with the password of a `--requirepass` in `args` if any.
fn admin_url(port: u16, args: &[String]) -> String {
    let password = args.iter().skip_while(|a| *a != "--requirepass").nth(1);
    let auth = password.map_or_else(String::new, |pw| format!(":{pw}@"));
    format!("redis://{auth}127.0.0.1:{port}/")
}

/// `PING`, then the `process_id` from `INFO server`, or `None` if not answering yet.
fn serving_pid(url: &str) -> Option<u32> {
    let mut con = connect(url, Duration::from_millis(200)).ok()?;
    redis::cmd("PING").query::<String>(&mut con).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
    info.lines()
        .find_map(|l| l.trim().strip_prefix("process_id:")?.parse().ok())
}
