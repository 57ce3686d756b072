//! `redlease extend --ticket T --ttl D`: sets the remaining time of the lease a
//! ticket names, which `acquire` left unrenewed.

use std::time::Duration;

use clap::Args;
use redlease::Error;

use crate::args::duration;
use crate::exit::{Failure, LOST};
use crate::server::ServerArgs;
use crate::ticket::TicketArg;

/// `redlease extend`.
#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    #[command(flatten)]
    pub(crate) ticket: TicketArg,
    /// The lease's new time to live, from now
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Duration,
}

/// Runs `extend`: exit 0 when extended, 79 when the lock is no longer the
/// ticket's (it expired, or someone else holds it).
pub(crate) fn extend(args: &ExtendArgs) -> Result<u8, Failure> {
    let ticket = args.ticket.read()?;
    let (client, server) = args.server.client(|b| b)?;
    match client.extend_ticket(&ticket, args.ttl) {
        Ok(()) => {
            let ttl = humantime::format_duration(args.ttl);
            println!("`{}` extended: held for {ttl} from now", ticket.key());
            Ok(0)
        }
        Err(Error::LockLost { .. }) => Err(Failure::new(
            LOST,
            format!(
                "`{}` is no longer this ticket's: it expired or someone else holds it",
                ticket.key()
            ),
        )),
        Err(e) => Err(Failure::from_lib(&e, &server)),
    }
}
