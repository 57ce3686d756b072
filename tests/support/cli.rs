//! Running the `redlease` binary in tests: a scratch directory for the files
//! commands write, the command itself, and bounded waits for its exit.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::{RedisServer, eventually};

/// How long a command may take to exit.
pub const HUNG: Duration = Duration::from_secs(20);
/// How long a command may take to start (write its first file).
pub const STARTUP: Duration = Duration::from_secs(10);
/// The exit code of bad input.
pub const USAGE: i32 = 64;
/// The exit code of a lock not acquired within `--wait`.
pub const NOT_ACQUIRED: i32 = 75;
/// `run`'s exit code when the lease was lost and the command stopped.
pub const LOST: i32 = 79;

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A scratch directory for the files commands write, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new directory whose name holds `tag`, this process and a count.
    pub fn new(tag: &str) -> Scratch {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redlease-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The path of `name` in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `redlease ARGS` with stdin closed, stdout and stderr piped, and no `REDIS_URL`
/// from the environment.
///
/// It dies (SIGKILL) when the thread that spawns it ends, so that a test that
/// fails or forgets it leaves nothing running: on Linux its keeper then ends the
/// command it runs, and what that started (`tests/cli_keeper.rs` checks it). A
/// test spawns it on its own thread, or on one that outlives the process.
pub fn redlease<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    // Cargo names the binary to integration tests and benchmarks only; an example
    // that includes this support (the chaos soak) never runs the tool.
    let Some(binary) = option_env!("CARGO_BIN_EXE_redlease") else {
        panic!("the redlease binary is built for integration tests only");
    };
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(target_os = "linux")]
    die_with_the_spawning_thread(&mut cmd);
    cmd
}

/// Asks the kernel for SIGKILL when the thread that spawns `cmd` ends.
#[cfg(target_os = "linux")]
fn die_with_the_spawning_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, and only
    // makes one system call (prctl), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

/// `redlease run --url <server> OPTS NAME -- sh -c SCRIPT`.
pub fn run_sh(server: &RedisServer, opts: &[&str], name: &str, script: &str) -> Command {
    let url = server.url();
    let mut args = vec!["run", "--url", &url];
    args.extend_from_slice(opts);
    args.extend_from_slice(&[name, "--", "sh", "-c", script]);
    redlease(&args)
}

/// Waits at most `timeout` for `child` to exit; kills it (through its handle) and
/// panics if it does not.
pub fn exit_within(child: &mut Child, timeout: Duration) -> ExitStatus {
    let mut status = None;
    let exited = eventually(timeout, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redlease did not exit within {timeout:?}");
    }
    status.unwrap()
}

/// Waits for `child` (at most [`HUNG`]) and collects its output.
pub fn finish(mut child: Child) -> Output {
    exit_within(&mut child, HUNG);
    child.wait_with_output().unwrap()
}

/// Runs `cmd` to completion (at most [`HUNG`]) and returns its output.
pub fn output(mut cmd: Command) -> Output {
    finish(cmd.spawn().unwrap())
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `path` exists with a first line.
pub fn has_line(path: &Path) -> bool {
    fs::read_to_string(path).is_ok_and(|s| s.contains('\n'))
}

/// Writes `$VAR` (`REDLEASE_KEY`, `REDLEASE_PERMIT_ID`) to `started`, then waits
/// for `go` to exist; gives up (exit 1) once the scratch directory is gone.
pub fn hold_until(started: &Path, go: &Path, var: &str) -> String {
    let dir = go.parent().unwrap_or(go);
    format!(
        "echo \"${var}\" > {}; while [ ! -e {} ]; do [ -d {} ] || exit 1; sleep 0.05; done",
        started.display(),
        go.display(),
        dir.display()
    )
}

/// `redlease inspect --json NAME`'s report, parsed; panics unless it succeeds.
pub fn inspect_json(server: &RedisServer, name: &str) -> Value {
    let out = output(redlease([
        "inspect",
        "--json",
        "--url",
        &server.url(),
        name,
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}
