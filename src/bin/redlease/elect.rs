//! `redlease elect NAME -- COMMAND`: campaign for leadership of NAME, run the
//! command while leader (the library renews the lease), stop it when
//! leadership is lost, resign when it exits. The supervision is `run`'s.

use redlease::{CancelToken, Error, LockOptions};

use crate::args::ElectArgs;
use crate::exit::{Failure, NOT_ACQUIRED};
use crate::held::Held;
use crate::supervise::{cancelled, run_command, watch_signals};

/// Runs `elect`; returns the exit code (the command's, or 128 + a signal that
/// stopped the campaign) or the failure to report.
pub(crate) fn elect(args: &ElectArgs) -> Result<u8, Failure> {
    let cancel = CancelToken::new();
    let signals = watch_signals(cancel.clone())?;
    let (client, server) = args
        .server
        .client(|b| crate::server::with_liveness(b, args.liveness))?;
    let key = args.server.full_key(&args.name);
    let election = client
        .election(&args.name)
        .map_err(|e| Failure::from_lib(&e, &server))?;
    let mut opts = LockOptions::new().cancel(cancel);
    if let Some(ttl) = args.ttl {
        opts = opts.ttl(ttl);
    }
    let leadership = match election.campaign_with(&opts) {
        Ok(Some(leadership)) => leadership,
        // Without a wait a campaign ends only in leadership or an error.
        Ok(None) => {
            return Err(Failure::new(
                NOT_ACQUIRED,
                format!("`{key}`: campaign ended without leadership"),
            ));
        }
        Err(Error::Cancelled { .. }) => return Ok(cancelled(&signals, &key)),
        Err(e) => return Err(Failure::from_lib(&e, &server)),
    };
    let held = Held::Leader(leadership);
    let servers = args.server.servers();
    run_command(
        held,
        &servers,
        &args.command,
        &signals,
        args.kill_grace,
        &key,
    )
}
