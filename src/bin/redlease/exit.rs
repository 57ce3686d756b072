//! Exit codes, and the error type that carries one to `main`.
//!
//! Codes follow sysexits(3) where one fits and the shells' conventions for the
//! command itself (126, 127, 128+N), so scripts can tell "busy, try later" from
//! "broken" from "the command failed". A command may itself exit with one of these
//! values; `redlease` prints a line on stderr whenever the code is its own.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use redlease::Error;

/// Bad input: an unknown option or scheme, a malformed duration, a missing command,
/// `release` without `--force`, an option not supported yet (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// Redis unreachable, or a Redis command failed (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// A bug: the library reported something this tool does not expect (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// A local OS failure: a thread or signal handler could not be set up, the command
/// could not be waited for (`EX_OSERR`).
pub(crate) const OS_ERROR: u8 = 71;
/// Not acquired within `--wait`, or still held at `wait --timeout`: someone else
/// holds the lock; `leader`: nobody leads (`EX_TEMPFAIL`).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran, and the command was stopped. No
/// sysexits code means this, so it takes the first number past their range.
pub(crate) const LOST: u8 = 79;
/// The command exists but could not be executed (as shells report it).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells report it).
pub(crate) const NOT_FOUND: u8 = 127;
/// Added to a signal's number for a command killed by it (as shells report it).
pub(crate) const SIGNAL_BASE: u8 = 128;

/// Which subcommands an exit status is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum For {
    /// Every subcommand.
    Every,
    /// Every subcommand that talks to Redis (those with `--url`).
    Connecting,
    /// These subcommands only.
    Only(&'static [&'static str]),
}

/// One line of the exit-status table: a code, whom it is for, what it means.
#[derive(Debug)]
pub(crate) struct Status {
    /// The code, or a rule for it (`N`, `128+N`).
    pub(crate) code: &'static str,
    /// The subcommands that exit with it.
    pub(crate) only: For,
    /// What it means, for them.
    pub(crate) meaning: &'static str,
}

const fn status(code: &'static str, only: For, meaning: &'static str) -> Status {
    Status {
        code,
        only,
        meaning,
    }
}

/// Every exit status: `--help` shows each subcommand its own rows, the man pages
/// their EXIT STATUS sections, and guide/cli.md has the same table (a test checks
/// that it has every code). A new subcommand adds its rows here; [`For::Every`]
/// and [`For::Connecting`] rows are its already. Rows of one code stay together.
pub(crate) const STATUSES: &[Status] = &[
    status(
        "N",
        For::Only(&["run"]),
        "the command's own exit status, when the lock was held throughout",
    ),
    status(
        "N",
        For::Only(&["elect"]),
        "the command's own exit status, when it led throughout",
    ),
    status(
        "128+N",
        For::Only(&["run", "elect"]),
        "the command was killed by signal N (130: SIGINT, 143: SIGTERM); also redlease's \
         own when signal N (SIGINT, SIGTERM) cancels the wait, or when the command \
         outlives that signal, forwarded, by --kill-grace",
    ),
    status("0", For::Only(&["inspect", "list", "release"]), "done"),
    status("0", For::Only(&["wait"]), "KEY is free"),
    status("0", For::Only(&["leader"]), "someone leads"),
    status("0", For::Only(&["completions"]), "the script was printed"),
    status(
        "64",
        For::Every,
        "bad input: an unknown option, a malformed value (a duration, a scheme, a shell)",
    ),
    status("64", For::Only(&["run", "elect"]), "no command"),
    status(
        "64",
        For::Only(&["run"]),
        "--permits N for a semaphore that has another N; a key of another format",
    ),
    status("64", For::Only(&["release"]), "no --force"),
    status(
        "64",
        For::Only(&["inspect", "release"]),
        "more than one server (several --url, or --cluster)",
    ),
    status(
        "64",
        For::Only(&["elect", "leader", "list"]),
        "several --url without --cluster",
    ),
    status("69", For::Connecting, "Redis unreachable or failing"),
    status("70", For::Every, "internal error"),
    status(
        "71",
        For::Every,
        "local OS error (threads, signals, waiting for the command, writing the output)",
    ),
    status(
        "75",
        For::Only(&["run"]),
        "not acquired within --wait (with --and: any name still held); \
         -E/--conflict-exit-code N makes it N",
    ),
    status("75", For::Only(&["wait"]), "still held at --timeout"),
    status("75", For::Only(&["leader"]), "nobody leads"),
    status(
        "79",
        For::Only(&["run"]),
        "the lock was lost while the command ran; the command was stopped",
    ),
    status(
        "79",
        For::Only(&["elect"]),
        "leadership was lost while the command ran; the command was stopped",
    ),
    status(
        "126",
        For::Only(&["run", "elect"]),
        "the command could not be executed",
    ),
    status(
        "127",
        For::Only(&["run", "elect"]),
        "the command was not found",
    ),
];

impl Status {
    /// Whether the subcommand `name` (`connects`: it has `--url`) exits with it.
    pub(crate) fn is_for(&self, name: &str, connects: bool) -> bool {
        match self.only {
            For::Every => true,
            For::Connecting => connects,
            For::Only(names) => names.contains(&name),
        }
    }
}

/// The exit statuses of the subcommand `name` (`connects`: it has `--url`), or
/// of every subcommand when `name` is `None`, each code once: `(code, meaning)`.
/// A meaning shared by only some subcommands names them (`wait: KEY is free`).
pub(crate) fn statuses(name: Option<&str>, connects: bool) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for row in STATUSES {
        let meaning = match (name, row.only) {
            (Some(name), _) if !row.is_for(name, connects) => continue,
            (None, For::Only(names)) => format!("{}: {}", names.join(", "), row.meaning),
            _ => row.meaning.to_owned(),
        };
        match out.last_mut() {
            Some((code, text)) if *code == row.code => {
                text.push_str("; ");
                text.push_str(&meaning);
            }
            _ => out.push((row.code, meaning)),
        }
    }
    out
}

/// Whether the subcommand `cmd` talks to Redis (it has `--url`).
pub(crate) fn connects(cmd: &clap::Command) -> bool {
    cmd.get_arguments().any(|a| a.get_long() == Some("url"))
}

/// The `Exit status:` list `--help` ends with, wrapped to 80 columns.
pub(crate) fn help(name: Option<&str>, connects: bool) -> String {
    const INDENT: usize = 9;
    let mut out = "Exit status:".to_owned();
    for (code, meaning) in statuses(name, connects) {
        let _ = write!(out, "\n  {code:<7}");
        let mut column = INDENT;
        for (i, word) in meaning.split(' ').enumerate() {
            if i > 0 && column + 1 + word.len() > 80 {
                out.push('\n');
                out.push_str(&" ".repeat(INDENT));
                column = INDENT;
            } else if i > 0 {
                out.push(' ');
                column += 1;
            }
            out.push_str(word);
            column += word.len();
        }
    }
    out
}

/// Why `redlease` ends with a code of its own, and the one-line message it prints.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: u8,
    /// One line, without the `redlease: ` prefix.
    pub(crate) message: String,
}

impl Failure {
    /// A failure with `code`.
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Bad input ([`USAGE`]).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    /// A library error, for the server at `server` (host:port, never the URL: it
    /// may hold a password).
    pub(crate) fn from_lib(err: &Error, server: &str) -> Self {
        let code = match err {
            Error::Config { .. }
            | Error::Invalid { .. }
            | Error::WrongFormat { .. }
            | Error::Unsupported { .. }
            | Error::ReadHeld { .. } => USAGE,
            Error::Redis(_) | Error::Permission { .. } | Error::NoQuorum { .. } => UNAVAILABLE,
            Error::Spawn(_) => OS_ERROR,
            Error::LockLost { .. } => LOST,
            _ => SOFTWARE,
        };
        if code == UNAVAILABLE {
            Self::new(code, format!("redis at {server}: {}", chain(err)))
        } else {
            Self::new(code, chain(err))
        }
    }

    /// A Redis error met by the administrative commands, which use the `redis`
    /// crate directly.
    pub(crate) fn redis(err: &redis::RedisError, server: &str) -> Self {
        Self::new(UNAVAILABLE, format!("redis at {server}: {}", chain(err)))
    }
}

/// `err` and its sources, joined by `: `, each text said once.
pub(crate) fn chain(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        // redis-rs's errors repeat their I/O cause's text in their own.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The exit code for a command's exit status: its own code, or 128 + the signal
/// that killed it, as shells report it.
pub(crate) fn of_status(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(u8::MAX);
    }
    let signal = status.signal().and_then(|s| u8::try_from(s).ok());
    signal.map_or(SOFTWARE, |s| SIGNAL_BASE.saturating_add(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_of_its_own_is_in_the_table() {
        let own = [
            USAGE,
            UNAVAILABLE,
            SOFTWARE,
            OS_ERROR,
            NOT_ACQUIRED,
            LOST,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        for code in own {
            let code = code.to_string();
            assert!(STATUSES.iter().any(|s| s.code == code), "{code}");
        }
    }

    #[test]
    fn help_gives_each_code_one_entry_and_wraps_at_80_columns() {
        let all = help(None, true);
        for line in all.lines() {
            assert!(line.len() <= 80, "{line:?}");
        }
        let codes: Vec<&str> = all
            .lines()
            .filter_map(|l| l.strip_prefix("  ")?.split(' ').next())
            .filter(|c| !c.is_empty())
            .collect();
        let mut unique = codes.clone();
        unique.dedup();
        assert_eq!(codes, unique, "{all}");
        // A subcommand sees its own rows, without its name before each.
        let wait = help(Some("wait"), true);
        assert!(
            wait.contains("\n  75     still held at --timeout"),
            "{wait}"
        );
        assert!(!wait.contains("126") && !wait.contains("wait:"), "{wait}");
        // One that never connects has no Redis row.
        assert!(!help(Some("completions"), false).contains("\n  69 "));
    }
}
