//! `redlease latch NAME --count N -- COMMAND`: a participant of the fan-in
//! latch NAME (the library's `Latch`): join, run COMMAND, count down when it
//! succeeds; `redlease latch-wait NAME`: wait until the count reaches zero, or
//! a participant is gone without counting down.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use redlease::{Error, Owner};

use crate::args::duration;
use crate::exit::{self, DIED, Failure, NOT_ACQUIRED};
use crate::server::ServerArgs;

/// `latch --help`'s description.
pub(crate) const LATCH_ABOUT: &str = "\
Join the latch NAME, run COMMAND, count down when it exits 0.

The latch counts down from --count (made when absent; Redisson's RCountDownLatch
format, so a Redisson await() returns when it reaches zero). While COMMAND runs,
the participant's lease is renewed with --liveness as its TTL [default: 5s]. When
COMMAND fails, latch leaves without counting down and exits with its status: the
waiters (`latch-wait`) exit 80 at once. When redlease is killed, its lease runs
out and the waiters exit 80 within --liveness. COMMAND gets REDLEASE_LATCH (the
full key) in its environment.";

/// `latch-wait --help`'s description.
pub(crate) const LATCH_WAIT_ABOUT: &str = "\
Wait until the latch NAME counts down to zero; exit 0 then, 80 when a participant
is gone without counting down, 75 at --wait.

With --count N the latch is made when absent (start the waiter first); without,
it must exist. Woken by Redisson's channel and by the leases' expiry: a dead
participant is seen at most its liveness after its last renewal.";

/// `redlease latch`.
#[derive(Debug, Args)]
pub(crate) struct LatchArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// How many participants count down (1 to 4294967295)
    #[arg(long, value_name = "N", value_parser = count)]
    pub(crate) count: u32,
    /// The participant's liveness: its lease's TTL, renewed every third of it; waiters see it gone this long after this process dies [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) liveness: Option<Duration>,
    /// The latch's name (PREFIX is prepended)
    pub(crate) name: String,
    /// The command and its arguments, after `--`
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

/// `redlease latch-wait`.
#[derive(Debug, Args)]
pub(crate) struct LatchWaitArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Make the latch with N participants when absent [default: it must exist]
    #[arg(long, value_name = "N", value_parser = count)]
    pub(crate) count: Option<u32>,
    /// Give up after this long (exit 75) [default: wait as long as it takes]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait: Option<Duration>,
    /// The latch's name (PREFIX is prepended)
    pub(crate) name: String,
}

/// Runs `latch`: joins, runs the command, counts down when it exits 0. Exits
/// with the command's status, or 79 when the lease ran out before the count down.
pub(crate) fn latch(args: &LatchArgs) -> Result<u8, Failure> {
    let (client, server) = args
        .server
        .client(|b| crate::server::with_liveness(b, args.liveness))?;
    let fail = |e: &Error| Failure::from_lib(e, &server);
    let latch = client.latch(&args.name, args.count).map_err(|e| fail(&e))?;
    let me = latch.join().map_err(|e| fail(&e))?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given"))?;
    let status = Command::new(program)
        .args(rest)
        .env("REDLEASE_LATCH", latch.key())
        .stdin(Stdio::inherit())
        .status();
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            let _ = me.leave();
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            return Err(Failure::new(
                code,
                format!("{}: {e}", program.to_string_lossy()),
            ));
        }
    };
    if !status.success() {
        // Leaving unused: the waiters learn at once that this participant failed.
        let _ = me.leave();
        return Ok(exit::of_status(status));
    }
    match me.count_down() {
        Ok(_) => Ok(0),
        Err(e) => Err(fail(&e)),
    }
}

/// Runs `latch-wait`: 0 done, [`DIED`] a participant gone, [`NOT_ACQUIRED`] at
/// `--wait`.
pub(crate) fn latch_wait(args: &LatchWaitArgs) -> Result<u8, Failure> {
    let (client, server) = args.server.client(|b| b)?;
    let latch = match args.count {
        Some(n) => client.latch(&args.name, n),
        None => client.open_latch(&args.name),
    }
    .map_err(|e| Failure::from_lib(&e, &server))?;
    let done = match args.wait {
        Some(wait) => latch.wait_for(wait),
        None => latch.wait().map(|()| true),
    };
    match done {
        Ok(true) => Ok(0),
        Ok(false) => {
            eprintln!("redlease: latch `{}` not done after --wait", latch.key());
            Ok(NOT_ACQUIRED)
        }
        Err(Error::ParticipantDied { who, .. }) => {
            eprintln!(
                "redlease: latch `{}`: a participant is gone without counting down ({})",
                latch.key(),
                describe(&who)
            );
            Ok(DIED)
        }
        Err(e) => Err(Failure::from_lib(&e, &server)),
    }
}

/// Who a participant was, in one phrase.
fn describe(who: &Owner) -> String {
    match who {
        Owner::Alive(s) => format!(
            "client {} of {} pid {} on {}",
            s.tag().as_str(),
            s.program(),
            s.pid(),
            s.host()
        ),
        Owner::Gone(tag) | Owner::Unknown(tag) => format!("client {}", tag.as_str()),
        _ => "an unknown client".to_owned(),
    }
}

/// Parses a participant count: 1 to 4294967295.
fn count(text: &str) -> Result<u32, String> {
    let n: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of participants"))?;
    match u32::try_from(n) {
        Ok(0) => Err("a latch needs at least 1 participant".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{n} participants is beyond {}", u32::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked_before_anything_is_sent() {
        assert_eq!(count("8"), Ok(8));
        assert!(count("0").unwrap_err().contains("at least 1"));
        assert!(count("x").is_err());
    }
}
