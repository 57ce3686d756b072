//! What clap parses, and turning it into the library's settings.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use redlease::{LegacyTimestamp, Scheme, TimestampUnit};

use crate::server::ServerArgs;

/// How the lock is stored (`--scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SchemeArg {
    /// `SET key <uuid> NX PX ttl`: redis-py, redsync, node-redlock, redlock-rs
    Token,
    /// `SETNX`/`GETSET` timestamp locks, expiry in unix milliseconds
    LegacyMs,
    /// `SETNX`/`GETSET` timestamp locks, expiry in unix seconds
    LegacyS,
    /// Redisson's reentrant `RLock` hash: Redisson clients and redlease exclude each other
    Reentrant,
}

impl SchemeArg {
    /// The library's scheme.
    pub(crate) fn scheme(self) -> Scheme {
        let legacy = |unit| Scheme::LegacyTimestamp(LegacyTimestamp::new().unit(unit));
        match self {
            SchemeArg::Token => Scheme::Token,
            SchemeArg::LegacyMs => legacy(TimestampUnit::Millis),
            SchemeArg::LegacyS => legacy(TimestampUnit::Seconds),
            SchemeArg::Reentrant => Scheme::Reentrant,
        }
    }
}

/// `redlease run`.
#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each is a command-line flag; clap refuses the conflicting ones"
)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Lease time to live; renewed every third of it while the command runs [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Wait at most this long for the lock; 0 tries once [default: wait as long as it takes]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait: Option<Duration>,
    /// How the lock is stored in Redis
    #[arg(long, value_enum, value_name = "SCHEME", default_value_t = SchemeArg::Token)]
    pub(crate) scheme: SchemeArg,
    /// Stop renewing this long after acquiring: the lease then runs out and the command is stopped
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) max_hold: Option<Duration>,
    /// Keep the lock at least this long after acquiring, even when the command ends sooner.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        conflicts_with_all = ["permits", "shared", "exclusive", "fair"],
        help = "Keep the lock at least this long after acquiring, even when the command ends \
                sooner (token locks): with --wait 0 on every host, the command runs at most \
                once per DURATION"
    )]
    pub(crate) min_hold: Option<Duration>,
    /// Take a fencing token with the lock.
    #[arg(
        long,
        help = "Take a fencing token with the lock, passed to the command as REDLEASE_FENCE"
    )]
    pub(crate) fence: bool,
    /// Take one of N permits of the semaphore KEY instead of a lock.
    #[arg(
        long,
        value_name = "N",
        value_parser = permits,
        conflicts_with_all = ["fence", "scheme"],
        help = "Take one of N permits of the semaphore KEY instead of a lock (Redisson's \
                RPermitExpirableSemaphore; created with N permits when absent, refused when \
                it has another number)"
    )]
    pub(crate) permits: Option<u32>,
    /// Take the read lock of the read-write lock KEY (shared with other readers).
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits", "exclusive"],
        help = "Take the read lock of the read-write lock KEY, shared with other readers \
                (Redisson's RReadWriteLock; like flock -s)"
    )]
    pub(crate) shared: bool,
    /// Take the write lock of the read-write lock KEY (alone).
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits"],
        help = "Take the write lock of the read-write lock KEY, alone (Redisson's \
                RReadWriteLock; like flock -x)"
    )]
    pub(crate) exclusive: bool,
    /// Take the fair lock KEY: waiters get it in their order of arrival.
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits", "shared", "exclusive"],
        help = "Take the fair lock KEY: waiters, here and on Redisson, get it in their order \
                of arrival (Redisson's RFairLock)"
    )]
    pub(crate) fair: bool,
    /// Also take the lock KEY2 (repeatable): KEY and every --and name, all or none.
    #[arg(
        long = "and",
        value_name = "KEY2",
        action = ArgAction::Append,
        conflicts_with_all = ["permits", "shared", "exclusive", "fair"],
        help = "Also take the lock KEY2 (repeat for more): KEY and every --and name are \
                taken all or none, and none is held while waiting; with --fence, \
                REDLEASE_FENCE holds one fence per name, comma-separated, KEY's first"
    )]
    pub(crate) and: Vec<String>,
    /// Time between SIGTERM (or a forwarded SIGINT) and SIGKILL when the command must
    /// stop: the lock was lost, or redlease got SIGINT / SIGTERM
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// Do not print the server's critical findings (read at connect time) on stderr
    #[arg(long)]
    pub(crate) no_doctor: bool,
    /// The lock's key (PREFIX is prepended)
    pub(crate) key: String,
    /// The command and its arguments, after `--`
    // Everything from the first word of the command on is the command's, as with
    // `env` or `flock`; a mistyped option before it stays an error.
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

/// `redlease elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Leadership lease time to live; renewed every third of it while the command runs [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command must stop because leadership was lost
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// The election's name (PREFIX is prepended)
    pub(crate) name: String,
    /// The command and its arguments, after `--`
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

/// `redlease leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// The election's name (PREFIX is prepended)
    pub(crate) name: String,
}

/// `redlease inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// The lock's key (PREFIX is prepended)
    pub(crate) key: String,
}

/// `redlease list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Print one JSON object per lock, one per line, each as `inspect --json` prints it
    #[arg(long)]
    pub(crate) json: bool,
}

/// `redlease release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Delete the key whoever holds it (required: this is not an unlock)
    #[arg(long)]
    pub(crate) force: bool,
    /// The lock's key (PREFIX is prepended)
    pub(crate) key: String,
}

/// `redlease wait`.
#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Give up after this long (exit 75) [default: wait as long as it takes]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) timeout: Option<Duration>,
    /// The lock's key (PREFIX is prepended)
    pub(crate) key: String,
}

/// `redlease doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// The longest lease TTL the clients use: uptime, clock drift and renewal slack are checked against it [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
}

/// Parses a number of permits: 1 to 4294967295.
fn permits(text: &str) -> Result<u32, String> {
    let n: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of permits"))?;
    match u32::try_from(n) {
        Ok(0) => Err("a semaphore needs at least 1 permit".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{n} permits is beyond {}", u32::MAX)),
    }
}

/// Parses a human duration (`30s`, `5m`, `1500ms`, `1h 30m`, `0`).
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 30s, 5m, 1500ms)"))
}
