//! Tickets on the command line: `--ticket` read from its argument, a file or
//! stdin, and what `acquire --json` prints.

use std::io::Read as _;
use std::time::Duration;

use clap::Args;
use redlease::{LockFormat, Ticket};
use serde_json::{Value, json};

use crate::exit::Failure;

/// `--ticket`, for `extend` and `release`.
#[derive(Debug, Args)]
pub(crate) struct TicketArg {
    /// The lease's ticket, as `redlease acquire` printed it: the ticket itself, `-` to read it from stdin, or a file holding it
    ///
    /// A ticket lets whoever has it release or extend the lock: prefer a file
    /// (mode 0600) or stdin to the command line, which other users may list.
    #[arg(long, value_name = "TICKET|-|FILE")]
    pub(crate) ticket: String,
}

impl TicketArg {
    /// The ticket `--ticket` names: itself, stdin's (`-`) or a file's.
    pub(crate) fn read(&self) -> Result<Ticket, Failure> {
        read(&self.ticket)
    }
}

/// The ticket `arg` names: the ticket itself when it starts with
/// `rl-ticket:`, stdin's when it is `-`, else the file's at that path.
pub(crate) fn read(arg: &str) -> Result<Ticket, Failure> {
    let text = if arg.starts_with("rl-ticket:") {
        arg.to_owned()
    } else if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::usage(format!("--ticket -: reading stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(arg).map_err(|e| Failure::usage(format!("--ticket {arg}: {e}")))?
    };
    text.parse()
        .map_err(|e| Failure::usage(format!("--ticket: {e}")))
}

/// `acquire --json`'s object: the printed ticket and its parts but the value
/// (which the ticket carries: `scheme` is `token`, `reentrant` or `permit`),
/// and the lease's TTL.
pub(crate) fn to_json(ticket: &Ticket, ttl: Duration) -> Value {
    let scheme = match ticket.format() {
        LockFormat::Reentrant => "reentrant",
        LockFormat::Semaphore => "permit",
        _ => "token",
    };
    json!({
        "ticket": ticket.to_string(),
        "key": ticket.key(),
        "scheme": scheme,
        "fence": ticket.fence(),
        "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    })
}
