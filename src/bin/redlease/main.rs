//! `redlease`: run a command under a distributed lock on Redis, inspect a lock
//! key, force-release a stuck one.
//!
//! What `flock(1)` is on one machine, for a fleet: the lease is renewed while the
//! command runs, and the command is stopped if the lock is lost. Built on the
//! library's public API only (the administrative reads of `inspect` and `release
//! --force` use the `redis` crate directly). Modules, one per subcommand plus
//! their helpers:
//!
//! - `args`: what clap parses, turned into library settings; `server` the servers
//!   a subcommand talks to and the client built for them;
//! - `exit`: the exit codes and the failure type that carries one;
//!   `exit_status` the table of what each code means, for `--help` and the man
//!   pages; `report` how a failure is printed (text, or JSON with `--json`);
//! - `run`, with `held` (a lock, locks, a permit or a leadership), `child` (the
//!   command's process group), `keeper` (on Linux, the process that leads that
//!   group and ends it when `redlease` dies), `status` (the line shown while
//!   waiting on a terminal) and `supervise` (the command run under the lease,
//!   shared with `elect`);
//! - `elect` (a command run while leader) and `leader` (who leads an election);
//! - `acquire` (a lease left held, printed as a ticket), `extend`, and
//!   `ticket` (`--ticket` read, `acquire --json`);
//! - `inspect`, `list` and `release`, on `probe` (reading a key as an
//!   administrator) and `owners` (who holds it, from session records);
//! - `wait`, until a key is free (the library's `wait_free`);
//! - `latch` and `latch-wait`: a fan-in latch's participant and its waiter;
//! - `manual`: shell completions and the man pages, from the clap definition.
//! - `partitions` (`run --partitions`: a member of a partition group running one
//!   command per partition held) and `group` (a group's members and partitions).
//! - `doctor`, whether the servers are configured so that locks hold.

// One `unsafe` block, in the keeper: the command's signal mask is emptied
// between fork and exec (std inherits the keeper's mask, and no safe API resets it).
#![deny(unsafe_code)]

mod acquire;
mod args;
mod child;
mod doctor;
mod elect;
mod exit;
mod exit_status;
mod extend;
mod group;
mod held;
mod inspect;
#[cfg(target_os = "linux")]
mod keeper;
mod latch;
mod leader;
mod list;
mod manual;
mod owners;
mod partitions;
mod probe;
mod release;
mod report;
mod run;
mod server;
mod status;
mod supervise;
mod terminal;
mod ticket;
mod wait;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::args::{
    CompletionsArgs, DoctorArgs, ElectArgs, GroupArgs, InspectArgs, LeaderArgs, ListArgs,
    ReleaseArgs, RunArgs, WaitArgs,
};
use crate::exit::{Failure, SOFTWARE, USAGE};
use crate::server::ServerArgs;

/// Distributed locks on Redis for shell scripts, cron jobs and batch workers.
#[derive(Debug, Parser)]
#[command(name = "redlease", version, long_about = ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// `redlease --help`'s description.
const ABOUT: &str = "\
Distributed locks on Redis for shell scripts, cron jobs and batch workers.

`redlease run` is what flock(1) is on one machine, for a fleet: it takes a lock
on Redis, runs a command while the lease is renewed in the background, releases
the lock when the command exits and exits with its status; a lost lock stops the
command. `elect` runs a command on one machine of a fleet at a time, `wait`
waits until a lock is free; `acquire` holds a lock across the steps of a job
and prints its ticket, for `extend --ticket` and `release --ticket`; `latch` and
`latch-wait` fan N workers in (the waiter learns when one dies); `inspect`,
`list`, `leader` and `release` show and repair what is in Redis. Every subcommand has its own --help (-h: a summary).";

/// `run --help`'s description.
const RUN_ABOUT: &str = "\
Acquire KEY, run COMMAND while renewing the lease, release when it exits.

The command gets REDLEASE_KEY (the full key) and, with --fence, REDLEASE_FENCE in
its environment. It runs in its own process group: if the lock is lost, the group
gets SIGTERM, then SIGKILL after --kill-grace. SIGINT, SIGTERM, SIGHUP and SIGQUIT
are forwarded to it, and SIGKILL follows after --kill-grace if it has not exited by then (redlease then
exits 128 + the signal's number); the lock is released once it has exited. While
waiting for the lock they cancel the wait. A signal redlease was started with
ignored (nohup) stays ignored and is not forwarded. When redlease runs in its
terminal's foreground group, the command's group is the foreground group while it
runs: it reads the terminal, and Ctrl-C reaches it directly; Ctrl-Z does not
suspend it (its lease would run on). Otherwise, when redlease's stdin is a
terminal, the command's stdin is /dev/null.

On Linux a keeper process leads the command's group: if redlease is killed
(SIGKILL, the OOM killer), the keeper kills the command and everything it started,
setsid children and double forks included, long before the lease expires; once
nothing of it is left, the keeper releases the lock (a token or reentrant lock
held alone, without --min-hold; others run out with their --ttl), only if it
still holds redlease's value. The keeper gets the servers and the lease through
a pipe, never its command line or environment. What the command leaves running
when it exits gets SIGTERM, then SIGKILL after --kill-grace, before the release.
Other systems have no keeper: a killed redlease leaves its command running while
the lease expires.

With --min-hold D the lock is kept until D after the acquisition even when the
command ends sooner. A cron line on every host, `redlease run --wait 0 --min-hold
14m job -- COMMAND` every 15 minutes, runs COMMAND once per period across the
fleet; the other hosts' runs exit 75 and say how long the lock is still held, and
by whom.";

/// `elect --help`'s description.
const ELECT_ABOUT: &str = "\
Campaign for leadership of NAME, then run COMMAND while leader, renewing the lease.

The command gets REDLEASE_KEY (the full key) and REDLEASE_TERM (the term: strictly
increasing per name over every leader; pass it with each write so that a deposed
leader's late write can be refused). If leadership is lost, the command's process
group gets SIGTERM, then SIGKILL after --kill-grace, and elect exits 79. When the
command exits, elect resigns (the next candidate leads at once) and exits with its
status. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command; while
campaigning they stop
the campaign. If elect is killed, the command goes with it and its keeper resigns
once it is gone, as under `run` (Linux).";

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Cmd {
    /// Acquire KEY, run COMMAND while renewing the lease, release when it exits.
    #[command(
        long_about = RUN_ABOUT,
        override_usage = "redlease run [OPTIONS] KEY -- COMMAND [ARGS]...\n       redlease run [OPTIONS] --partitions M --group G -- COMMAND [ARGS]..."
    )]
    Run(RunArgs),
    /// Campaign for leadership of NAME, run COMMAND while leader, resign when it exits.
    #[command(
        long_about = ELECT_ABOUT,
        override_usage = "redlease elect [OPTIONS] NAME -- COMMAND [ARGS]..."
    )]
    Elect(ElectArgs),
    /// Show the current leader of the election NAME: term, time left, owner.
    Leader(LeaderArgs),
    /// Show which lock format holds KEY, the time left on it, its fence counter and its owners.
    Inspect(InspectArgs),
    /// List every lock under --prefix (taken literally), with format, time left and owners.
    List(ListArgs),
    /// Acquire NAME, print its ticket and exit, leaving it held until --ttl (for later steps).
    #[command(long_about = acquire::ACQUIRE_ABOUT)]
    Acquire(acquire::AcquireArgs),
    /// Set the remaining time of the lease a ticket names.
    Extend(extend::ExtendArgs),
    /// Release the lease of a ticket, or delete a stuck lock whoever holds it (--force).
    Release(ReleaseArgs),
    /// Wait until nobody holds KEY, without taking it (a hint: someone may take it right after).
    #[command(long_about = wait::WAIT_ABOUT)]
    Wait(WaitArgs),
    /// Join the latch NAME, run COMMAND, count down when it exits 0.
    #[command(
        long_about = latch::LATCH_ABOUT,
        override_usage = "redlease latch [OPTIONS] --count N NAME -- COMMAND [ARGS]..."
    )]
    Latch(latch::LatchArgs),
    /// Wait until the latch NAME reaches zero; exit 80 when a participant is gone without counting down.
    #[command(long_about = latch::LATCH_WAIT_ABOUT)]
    LatchWait(latch::LatchWaitArgs),
    /// Print the completion script for SHELL (see --help for where it goes).
    #[command(long_about = manual::COMPLETIONS_ABOUT)]
    Completions(CompletionsArgs),
    /// Show a partition group: its members, each partition's owner, fence and TTL
    Group(GroupArgs),
    /// Check that the servers are configured so that locks hold: eviction, persistence, replicas, ACL.
    #[command(long_about = doctor::DOCTOR_ABOUT)]
    Doctor(DoctorArgs),
}

/// The command line as clap reads it: [`Cli`], each subcommand's long `--help`
/// ending with its exit statuses (from [`exit_status::STATUSES`]).
fn command() -> clap::Command {
    let mut cmd = Cli::command().after_long_help(exit_status::help(None, true));
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(&name, |sub| {
            let statuses = exit_status::help(Some(&name), exit_status::connects(&sub));
            sub.after_long_help(statuses)
        });
    }
    cmd
}

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    if let Some(code) = keeper::dispatch() {
        return code;
    }
    if let Some(result) = manual::dispatch(command) {
        return result.map_or_else(|f| report::report(&f, false), ExitCode::from);
    }
    let matches = match command().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => return parse_failure(&e),
    };
    let json = report::wants_json(&matches);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return report::report(&Failure::new(SOFTWARE, e.to_string()), json),
    };
    let server: Option<&ServerArgs> = match &cli.command {
        Cmd::Run(a) => Some(&a.server),
        Cmd::Elect(a) => Some(&a.server),
        Cmd::Leader(a) => Some(&a.server),
        Cmd::Inspect(a) => Some(&a.server),
        Cmd::List(a) => Some(&a.server),
        Cmd::Acquire(a) => Some(&a.server),
        Cmd::Extend(a) => Some(&a.server),
        Cmd::Release(a) => Some(&a.server),
        Cmd::Wait(a) => Some(&a.server),
        Cmd::Latch(a) => Some(&a.server),
        Cmd::LatchWait(a) => Some(&a.server),
        Cmd::Group(a) => Some(&a.server),
        Cmd::Doctor(a) => Some(&a.server),
        Cmd::Completions(_) => None,
    };
    let secrets = server.map(ServerArgs::secrets).unwrap_or_default();
    let result = match &cli.command {
        Cmd::Run(a) => run::run(a),
        Cmd::Elect(a) => elect::elect(a),
        Cmd::Leader(a) => leader::leader(a),
        Cmd::Inspect(a) => inspect::inspect(a),
        Cmd::List(a) => list::list(a),
        Cmd::Acquire(a) => acquire::acquire(a),
        Cmd::Extend(a) => extend::extend(a),
        Cmd::Release(a) => release::release(a),
        Cmd::Wait(a) => wait::wait(a),
        Cmd::Latch(a) => latch::latch(a),
        Cmd::LatchWait(a) => latch::latch_wait(a),
        Cmd::Completions(a) => manual::completions(a.shell, command()),
        Cmd::Group(a) => group::group(a),
        Cmd::Doctor(a) => doctor::doctor(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(mut failure) => {
            failure.message = redact(&failure.message, &secrets);
            report::report(&failure, json)
        }
    }
}

/// Help and version go to stdout with code 0; any other parse error is one line
/// on stderr with [`USAGE`], rather than clap's paragraph and its code 2.
fn parse_failure(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            ExitCode::from(USAGE)
        }
        _ => {
            // clap's error, its possible values and tips, without the usage and
            // the pointer to --help that follow them.
            let text = err.render().to_string();
            let mut line = String::new();
            let wanted = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:"))
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"));
            for part in wanted {
                if !line.is_empty() {
                    let goes_on = part.starts_with('[') || line.ends_with(':');
                    line.push_str(if goes_on { " " } else { "; " });
                }
                line.push_str(part.strip_prefix("error: ").unwrap_or(part));
            }
            let json = report::json_requested(command);
            report::report(&Failure::usage(format!("{line} (see --help)")), json)
        }
    }
}

/// `message` with every secret replaced by `***`. Messages are built to hold no
/// password; this makes sure of it.
fn redact(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(message.to_owned(), |m, s| m.replace(s.as_str(), "***"))
}
