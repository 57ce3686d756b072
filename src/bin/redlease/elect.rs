//! `redlease elect NAME -- COMMAND`: campaign for leadership of NAME, run the
//! command while leader (the library renews the lease), stop it when
//! leadership is lost, resign when it exits. The supervision is `run`'s.

use redlease::{CancelToken, Error, LockClient, LockClientBuilder, LockOptions};

use crate::args::{ElectArgs, ServerArgs, Servers, server_name};
use crate::child::Running;
use crate::exit::{Failure, NOT_ACQUIRED};
use crate::held::Held;
use crate::run::{cancelled, finish, supervise, watch_signals};

/// Runs `elect`; returns the exit code (the command's, or 128 + a signal that
/// stopped the campaign) or the failure to report.
pub(crate) fn elect(args: &ElectArgs) -> Result<u8, Failure> {
    let (builder, server) = builder(&args.server);
    let cancel = CancelToken::new();
    let signals = watch_signals(cancel.clone())?;
    let client = builder
        .key_prefix(args.server.prefix.as_str())
        .build()
        .map_err(|e| Failure::from_lib(&e, &server))?;
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
    // A signal that raced the campaign: resign before the command starts.
    if !signals.is_empty() {
        let _ = held.unlock();
        return Ok(cancelled(&signals, &key));
    }
    let env = held.env();
    let child = match Running::spawn(&args.command, &env) {
        Ok(child) => child,
        Err(failure) => {
            let _ = held.unlock();
            return Err(failure);
        }
    };
    let ended = supervise(&child, held.lost(), &signals, args.kill_grace);
    let status = child.wait()?;
    finish(held, &ended, status)
}

/// A client builder for the servers `server` names, and the first server's
/// `host:port` for messages.
pub(crate) fn builder(server: &ServerArgs) -> (LockClientBuilder, String) {
    let (builder, url) = match server.servers() {
        Servers::One(url) => (LockClient::builder(url.as_str()), url),
        Servers::Quorum(urls) => {
            let first = urls[0].clone();
            (LockClient::redlock(urls.iter().map(String::as_str)), first)
        }
        Servers::Cluster(urls) => {
            let first = urls.first().cloned().unwrap_or_default();
            (LockClient::cluster(urls.iter().map(String::as_str)), first)
        }
    };
    (builder, server_name(&url))
}
