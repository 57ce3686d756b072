//! `redlease acquire NAME`: takes a lock, prints its ticket and exits, leaving
//! the lease held until its TTL (for `extend --ticket` and `release --ticket`
//! in a later step).

use std::time::Duration;

use clap::Args;
use redlease::{LockOptions, Scheme};

use crate::args::duration;
use crate::exit::{Failure, NOT_ACQUIRED};
use crate::server::ServerArgs;
use crate::ticket::to_json;

/// `acquire --help`'s description.
pub(crate) const ACQUIRE_ABOUT: &str = "\
Acquire NAME, print the lease's ticket and exit: the lock stays held until --ttl
runs out, unless a later step extends or releases it with the ticket.

For a job of several steps (shell scripts, CI stages) that must hold one lock
across them: `T=$(redlease acquire --ttl 10m NAME)`, then the steps, then
`redlease release --ticket \"$T\"` (or `--ticket FILE`, `--ticket -` for stdin).
Nothing renews the lease between the steps: give --ttl room, or run
`redlease extend --ticket T --ttl D`. The ticket holds no server address or
password, but it lets whoever has it release or extend the lock: keep it in a
file of mode 0600 or a variable, not on a command line others can list.";

/// `redlease acquire`.
#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Lease time to live: the lock is held this long after acquiring unless released or extended [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Wait at most this long for the lock; 0 tries once [default: wait as long as it takes]
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait: Option<Duration>,
    /// Take a fencing token with the lock (in the ticket, and in --json's `fence`)
    #[arg(long)]
    pub(crate) fence: bool,
    /// Print one JSON object (`ticket`, `key`, `scheme`, `fence`, `ttl_ms`) instead of the ticket alone
    #[arg(long)]
    pub(crate) json: bool,
    /// The lock's name (PREFIX is prepended)
    pub(crate) name: String,
}

/// The TTL when `--ttl` is not given (the library's default).
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Runs `acquire`: exit 0 with the ticket printed, 75 when not acquired
/// within `--wait`.
pub(crate) fn acquire(args: &AcquireArgs) -> Result<u8, Failure> {
    // No `--liveness` here: the session would end when this process exits,
    // and the lease it leaves held would be breakable at once.
    let ttl = args.ttl.unwrap_or(DEFAULT_TTL);
    let (client, server) = args.server.client(|b| b.ttl(ttl))?;
    let failure = |e: &redlease::Error| Failure::from_lib(e, &server);
    let mut opts = LockOptions::new()
        .ttl(ttl)
        .fencing(args.fence)
        .scheme(Scheme::Token);
    if let Some(wait) = args.wait {
        opts = opts.wait(wait);
    }
    let Some(guard) = client
        .lock_with(&args.name, &opts)
        .map_err(|e| failure(&e))?
    else {
        return Err(Failure::new(
            NOT_ACQUIRED,
            format!(
                "`{}` is held by someone else (not acquired within --wait)",
                args.server.full_key(&args.name)
            ),
        ));
    };
    let ticket = guard.into_ticket().map_err(|e| failure(&e))?;
    if args.json {
        println!("{}", to_json(&ticket, ttl));
    } else {
        println!("{ticket}");
    }
    Ok(0)
}
