//! Exit codes, and the error type that carries one to `main`.
//!
//! Codes follow sysexits(3) where one fits and the shells' conventions for the
//! command itself (126, 127, 128+N), so scripts can tell "busy, try later" from
//! "broken" from "the command failed". A command may itself exit with one of these
//! values; `redlease` prints a line on stderr whenever the code is its own.
//! What each code means, per subcommand, is the table in `exit_status` (shown by
//! `--help` and the man pages); guide/cli.md has the same table.

use std::error::Error as StdError;
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
/// `doctor`: a server is configured so that locks can be lost or wrongly
/// granted (a critical finding) (`EX_CONFIG`).
pub(crate) const UNSAFE: u8 = 78;
/// The lock was lost while the command ran, and the command was stopped. No
/// sysexits code means this, so it takes the first number past their range.
pub(crate) const LOST: u8 = 79;
/// `latch-wait`: a participant of the latch is gone without counting down (it
/// died, or its command failed). Past [`LOST`], the next number of our own.
pub(crate) const DIED: u8 = 80;
/// The command exists but could not be executed (as shells report it).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells report it).
pub(crate) const NOT_FOUND: u8 = 127;
/// Added to a signal's number for a command killed by it (as shells report it).
pub(crate) const SIGNAL_BASE: u8 = 128;

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
            Error::ParticipantDied { .. } => DIED,
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
