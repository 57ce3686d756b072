//! `redlease acquire NAME`: takes a lock (a token or a Redisson-format
//! reentrant one) or permits of a semaphore, prints the ticket and exits,
//! leaving the lease held until its TTL (for `extend --ticket` and `release
//! --ticket` in a later step).

use std::time::Duration;

use clap::{Args, ValueEnum};
use redlease::{LockOptions, Scheme};

use crate::args::{duration, permits};
use crate::exit::{Failure, NOT_ACQUIRED, SOFTWARE};
use crate::held::Held;
use crate::server::ServerArgs;
use crate::ticket::to_json;

/// `acquire --help`'s description.
pub(crate) const ACQUIRE_ABOUT: &str = "\
Acquire NAME, print the lease's ticket and exit: the lock stays held until --ttl
runs out, unless a later step extends or releases it with the ticket.

For a job of several steps (shell scripts, CI stages) that must hold one lock
(or with --permits, a semaphore's permit) across them: `T=$(redlease acquire --ttl 10m NAME)`, then the steps, then
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
    /// How the lock is stored in Redis
    #[arg(long, value_enum, value_name = "SCHEME", default_value_t = TicketScheme::Token)]
    pub(crate) scheme: TicketScheme,
    /// Take one of N permits of the semaphore NAME instead of a lock.
    #[arg(
        long,
        value_name = "N",
        value_parser = permits,
        conflicts_with_all = ["fence", "scheme"],
        long_help = "Take one of N permits of the semaphore NAME instead of a lock (Redisson's \
                RPermitExpirableSemaphore; created with N permits when absent, refused when \
                it has another number): the ticket names the permit"
    )]
    pub(crate) permits: Option<u32>,
    /// With --permits N, take K of the N permits at once, all or none (one ticket for the K)
    #[arg(long, value_name = "K", value_parser = permits, requires = "permits")]
    pub(crate) weight: Option<u32>,
    /// Print one JSON object (`ticket`, `key`, `scheme`, `fence`, `ttl_ms`) instead of the ticket alone
    #[arg(long)]
    pub(crate) json: bool,
    /// The lock's name (PREFIX is prepended)
    pub(crate) name: String,
}

/// How `acquire` stores a lock (`--scheme`): the schemes whose lease a ticket
/// can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TicketScheme {
    /// `SET key <uuid> NX PX ttl`: redis-py, redsync, node-redlock, redlock-rs
    Token,
    /// Redisson's reentrant `RLock` hash: Redisson clients and redlease exclude each other
    Reentrant,
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
    let mut opts = LockOptions::new().ttl(ttl);
    if let Some(wait) = args.wait {
        opts = opts.wait(wait);
    }
    let key = args.server.full_key(&args.name);
    let held = if let Some(n) = args.permits {
        Held::permit(&client, &args.name, (n, args.weight), &opts)?
    } else {
        let scheme = match args.scheme {
            TicketScheme::Token => Scheme::Token,
            TicketScheme::Reentrant => Scheme::Reentrant,
        };
        let opts = opts.fencing(args.fence).scheme(scheme);
        client
            .lock_with(&args.name, &opts)
            .map(|g| g.map(Held::Lock))
    };
    let Some(held) = held.map_err(|e| failure(&e))? else {
        let what = match (args.permits, args.weight) {
            (Some(n), Some(k)) if k > 1 => {
                format!("no {k} permits of `{key}` (of {n}) came free at once")
            }
            (Some(n), _) => format!("no permit of `{key}` (of {n}) came free"),
            (None, _) => format!("`{key}` is held by someone else"),
        };
        return Err(Failure::new(
            NOT_ACQUIRED,
            format!("{what} (not acquired within --wait)"),
        ));
    };
    let Some(ticket) = held.into_ticket() else {
        return Err(Failure::new(SOFTWARE, "what was acquired has no ticket"));
    };
    let ticket = ticket.map_err(|e| failure(&e))?;
    if args.json {
        println!("{}", to_json(&ticket, ttl));
    } else {
        println!("{ticket}");
    }
    Ok(0)
}
