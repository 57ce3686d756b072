//! `redlease wait [--timeout D] KEY`: wait until nobody holds KEY, without
//! taking it (the library's `LockClient::wait_free`).

use std::time::Duration;

use crate::args::WaitArgs;
use crate::exit::{Failure, NOT_ACQUIRED};

/// `wait --help`'s description.
pub(crate) const WAIT_ABOUT: &str = "\
Wait until nobody holds KEY, without taking it; exit 0 then, 75 at --timeout.

Free means no key, a legacy timestamp that has passed, or a semaphore with a free
permit; any lock format counts as held while it exists. The answer is stale at once:
someone may take KEY right after. To act alone on KEY, use `redlease run`.";

/// How long `wait` waits without `--timeout`: as long as it takes, in the
/// longest wait one call can express (a century, renewed if it ever runs out).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Runs `wait`: exit 0 as soon as KEY is free, [`NOT_ACQUIRED`] (75) when
/// `--timeout` ran out with it still held. The answer is stale at once: someone
/// may take KEY right after.
pub(crate) fn wait(args: &WaitArgs) -> Result<u8, Failure> {
    let (client, server) = args.server.client(|b| b)?;
    loop {
        let timeout = args.timeout.unwrap_or(FOREVER);
        match client.wait_free(&args.key, timeout) {
            Ok(true) => return Ok(0),
            Ok(false) if args.timeout.is_some() => {
                let key = args.server.full_key(&args.key);
                eprintln!("redlease: `{key}` still held after --timeout");
                return Ok(NOT_ACQUIRED);
            }
            Ok(false) => {}
            Err(e) => return Err(Failure::from_lib(&e, &server)),
        }
    }
}
