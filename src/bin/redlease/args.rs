//! What clap parses, and turning it into the library's settings.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use redlease::{LegacyTimestamp, Scheme, TimestampUnit};

use crate::exit::NOT_ACQUIRED;
use crate::server::ServerArgs;

/// `--help`'s heading for the lease's durations.
const TIMING: &str = "Lease timing";
/// `--help`'s heading for what is taken: the format, the fence, other names.
const LOCK: &str = "The lock";
/// `--help`'s heading for how the command is run and what `run` exits with.
const COMMAND: &str = "The command";
/// `--help`'s heading for how results are printed.
const OUTPUT: &str = "Output";

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
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Wait at most this long for the lock; 0 tries once [default: wait as long as it takes]
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait: Option<Duration>,
    /// Tie the lock to this process's liveness: if it dies, the lock is free this long after
    ///
    /// The client's session record is extended every third of DURATION; once it is
    /// gone, any redlease client waiting for the lock takes it (token locks and
    /// elections, on one server or a Sentinel's master), without waiting for the
    /// lock's TTL. A stop or network cut longer than DURATION loses the lock (the
    /// command is then stopped).
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) liveness: Option<Duration>,
    /// How the lock is stored in Redis
    #[arg(help_heading = LOCK)]
    #[arg(long, value_enum, value_name = "SCHEME", default_value_t = SchemeArg::Token)]
    pub(crate) scheme: SchemeArg,
    /// Stop renewing this long after acquiring: the lease then runs out and the command is stopped
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) max_hold: Option<Duration>,
    /// Keep the lock at least this long after acquiring, even when the command ends sooner.
    #[arg(help_heading = TIMING)]
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        conflicts_with_all = ["permits", "shared", "exclusive", "fair"],
        long_help = "Keep the lock at least this long after acquiring, even when the command ends \
                sooner (token locks): with --wait 0 on every host, the command runs at most \
                once per DURATION"
    )]
    pub(crate) min_hold: Option<Duration>,
    /// Take a fencing token with the lock.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        long_help = "Take a fencing token with the lock, passed to the command as REDLEASE_FENCE"
    )]
    pub(crate) fence: bool,
    /// Take one of N permits of the semaphore KEY instead of a lock.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        value_name = "N",
        value_parser = permits,
        conflicts_with_all = ["fence", "scheme"],
        long_help = "Take one of N permits of the semaphore KEY instead of a lock (Redisson's \
                RPermitExpirableSemaphore; created with N permits when absent, refused when \
                it has another number)"
    )]
    pub(crate) permits: Option<u32>,
    /// With --permits N, take K of the N permits at once, all or none.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        value_name = "K",
        value_parser = permits,
        requires = "permits",
        long_help = "With --permits N, take K of the N permits at once, all or none (Redisson's \
                acquire(permits)), for a command that weighs K; REDLEASE_PERMIT_ID then holds the \
                K ids, comma-separated. K above N is bad input"
    )]
    pub(crate) weight: Option<u32>,
    /// Take the read lock of the read-write lock KEY (shared with other readers).
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits", "exclusive"],
        long_help = "Take the read lock of the read-write lock KEY, shared with other readers \
                (Redisson's RReadWriteLock; like flock -s)"
    )]
    pub(crate) shared: bool,
    /// Take the write lock of the read-write lock KEY (alone).
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits"],
        long_help = "Take the write lock of the read-write lock KEY, alone (Redisson's \
                RReadWriteLock; like flock -x)"
    )]
    pub(crate) exclusive: bool,
    /// Take the fair lock KEY: waiters get it in their order of arrival.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        conflicts_with_all = ["fence", "scheme", "permits", "shared", "exclusive"],
        long_help = "Take the fair lock KEY: waiters, here and on Redisson, get it in their order \
                of arrival (Redisson's RFairLock)"
    )]
    pub(crate) fair: bool,
    /// Also take the lock KEY2 (repeatable): KEY and every --and name, all or none.
    #[arg(help_heading = LOCK)]
    #[arg(
        long = "and",
        value_name = "KEY2",
        action = ArgAction::Append,
        conflicts_with_all = ["permits", "shared", "exclusive", "fair"],
        long_help = "Also take the lock KEY2 (repeat for more): KEY and every --and name are \
                taken all or none, and none is held while waiting; with --fence, \
                REDLEASE_FENCE holds one fence per name, comma-separated, KEY's first"
    )]
    pub(crate) and: Vec<String>,
    /// Take one of the N locks KEY:0 … KEY:N-1, whichever is free.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=4096),
        conflicts_with_all = ["permits", "shared", "exclusive", "fair", "and"],
        long_help = "Take one of the N locks KEY:0 … KEY:N-1, whichever is free (from a random \
                one, so a fleet spreads): the command gets its number as REDLEASE_SLOT \
                (and its fence as REDLEASE_FENCE with --fence); a {tag} in KEY keeps them \
                in one cluster slot"
    )]
    pub(crate) slots: Option<u32>,
    /// Be a member of the partition group --group sharing M partitions.
    #[arg(help_heading = LOCK)]
    #[arg(
        long,
        value_name = "M",
        value_parser = clap::value_parser!(u32).range(1..=4096),
        requires = "group",
        conflicts_with_all = ["permits", "shared", "exclusive", "fair", "and", "slots", "min_hold", "max_hold", "wait"],
        long_help = "Be a member of the group --group sharing M partitions (no KEY): one COMMAND \
                runs per partition held, with REDLEASE_PARTITION, REDLEASE_FENCE and \
                REDLEASE_GROUP; a partition asked for by another member gets SIGTERM, \
                SIGKILL after --kill-grace, then is released"
    )]
    pub(crate) partitions: Option<u32>,
    /// The partition group's name (with --partitions).
    #[arg(help_heading = LOCK)]
    #[arg(long, value_name = "G", requires = "partitions")]
    pub(crate) group: Option<String>,
    /// At most K partitions move between members per round, group-wide (with --partitions)
    #[arg(help_heading = LOCK)]
    #[arg(long, value_name = "K", requires = "partitions")]
    pub(crate) max_moves: Option<usize>,
    /// A stable member id (with --partitions): restarted within the group's window, it gets its partitions back
    #[arg(help_heading = LOCK)]
    #[arg(long, value_name = "ID", requires = "partitions")]
    pub(crate) member_id: Option<String>,
    /// Time between SIGTERM and SIGKILL when the command must stop
    ///
    /// The command must stop when the lock was lost, or when redlease got SIGINT or
    /// SIGTERM (forwarded to it: SIGINT stays SIGINT). What the command left running
    /// when it exited gets the same grace before the release (Linux)
    #[arg(help_heading = COMMAND)]
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// Exit with N when the lock is busy (not acquired within --wait), as flock's -E
    #[arg(help_heading = COMMAND)]
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        default_value_t = NOT_ACQUIRED,
        value_parser = clap::value_parser!(u8),
        allow_negative_numbers = true,
        long_help = "Exit with N (0 to 255) when the lock is busy: not acquired within \
                     --wait, or with --and any name still held. With 0 nothing is \
                     printed, so a cron job that finds the lock busy sends no mail; \
                     pick a code the command never exits with to tell the two apart"
    )]
    pub(crate) conflict_exit_code: u8,
    /// Do not print the server's critical findings (read at connect time) on stderr
    #[arg(long, help_heading = OUTPUT)]
    pub(crate) no_doctor: bool,
    /// The lock's key (PREFIX is prepended); none with --partitions
    #[arg(required_unless_present = "partitions")]
    pub(crate) key: Option<String>,
    /// The command and its arguments, after `--`
    // Everything from the first word of the command on is the command's, as with
    // `env` or `flock`; a mistyped option before it stays an error. With
    // --partitions there is no KEY: its place holds the command's first word.
    #[arg(
        value_name = "COMMAND",
        required_unless_present = "partitions",
        trailing_var_arg = true
    )]
    pub(crate) command: Vec<OsString>,
}

/// `redlease group`.
#[derive(Debug, Args)]
pub(crate) struct GroupArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub(crate) json: bool,
    /// The group's number of partitions [default: as its live members' records say]
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) partitions: Option<u32>,
    /// The group's name
    pub(crate) name: String,
}

/// `redlease elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Leadership lease time to live; renewed every third of it while the command runs [default: 30s]
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Tie the leadership to this process's liveness: if it dies, the leadership is free this long after
    ///
    /// The client's session record is extended every third of DURATION; once it is
    /// gone, any redlease client waiting for the lock takes it (token locks and
    /// elections, on one server or a Sentinel's master), without waiting for the
    /// lock's TTL. A stop or network cut longer than DURATION loses the lock (the
    /// command is then stopped).
    #[arg(help_heading = TIMING)]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) liveness: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command must stop
    ///
    /// The command must stop when leadership was lost. What the command left running
    /// when it exited gets the same grace before the resignation (Linux)
    #[arg(help_heading = COMMAND)]
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
    /// Print one JSON object instead of text; a failure is `{"error", "code"}` on stderr
    #[arg(help_heading = OUTPUT)]
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
    /// Print one JSON object instead of text; a failure is `{"error", "code"}` on stderr
    #[arg(help_heading = OUTPUT)]
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
    /// Print one JSON object per lock, one per line, each as `inspect --json` prints it;
    /// a failure is `{"error", "code"}` on stderr
    #[arg(help_heading = OUTPUT)]
    #[arg(long)]
    pub(crate) json: bool,
}

/// `redlease release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Delete the key whoever holds it (required with KEY: this is not an unlock)
    #[arg(long)]
    pub(crate) force: bool,
    /// Release the lease of this ticket (from `acquire`) if it is still its: the ticket, `-` for stdin, or a file
    #[arg(long, value_name = "TICKET|-|FILE", conflicts_with_all = ["force", "key"])]
    pub(crate) ticket: Option<String>,
    /// The lock's key (PREFIX is prepended)
    #[arg(required_unless_present = "ticket")]
    pub(crate) key: Option<String>,
}

/// `redlease completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell the script is for
    #[arg(value_enum, value_name = "SHELL")]
    pub(crate) shell: clap_complete::Shell,
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
pub(crate) fn permits(text: &str) -> Result<u32, String> {
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
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 30s, 5m, 1500ms)"))
}
