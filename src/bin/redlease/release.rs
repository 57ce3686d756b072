//! `redlease release --force KEY`: the administrative delete of a stuck lock;
//! `redlease release --ticket T`: the release of a lease `acquire` left held.

use std::sync::LazyLock;

use redis::Script;
use redlease::{LockInfo, Release};

use crate::args::ReleaseArgs;
use crate::exit::{Failure, LOST};
use crate::inspect::summary;
use crate::probe;
use crate::server::server_name;

/// Deletes the lock key whatever holds it and, if it existed, wakes the waiters
/// as a release would: the token scheme's, and Redisson's (and the reentrant
/// scheme's). KEYS[1]: the lock key; ARGV[1]: its release channel, ARGV[2]:
/// Redisson's. One script, so no waiter is woken for a delete that did not happen
/// and none misses the wake-up of one that did.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('DEL', KEYS[1]) == 1 then
    redis.call('PUBLISH', ARGV[1], 'released')
    redis.call('PUBLISH', ARGV[2], 0)
    return 1
end
return 0
",
    )
});

/// Runs `release`: refuses without `--force`, else deletes the key and says what
/// it held. Exit code 0 also when the key was already gone.
pub(crate) fn release(args: &ReleaseArgs) -> Result<u8, Failure> {
    let name = match (&args.ticket, &args.key) {
        (Some(ticket), _) => return by_ticket(args, ticket),
        (None, Some(name)) => name,
        (None, None) => return Err(Failure::usage("release needs KEY or --ticket")),
    };
    let key = args.server.full_key(name);
    if !args.force {
        // Deleting a lock someone holds lets a second holder in: never by default.
        return Err(Failure::usage(format!(
            "release deletes `{key}` whoever holds it: pass --force (see `redlease inspect`)"
        )));
    }
    let url = args.server.one_server("release")?;
    let server = server_name(&url);
    let redis_failure = |e: redis::RedisError| Failure::redis(&e, &server);
    let mut con = probe::connect(&url).map_err(redis_failure)?;
    // Read first only to say what was deleted; the delete does not depend on it.
    let before = LockInfo::read(&mut con, &args.server.prefix, name)
        .map_err(|e| Failure::from_lib(&e, &server))?;
    let [token_channel, redisson_channel] = before.release_channels();
    let deleted: i64 = FORCE_RELEASE
        .key(&key)
        .arg(token_channel)
        .arg(redisson_channel)
        .invoke(&mut con)
        .map_err(redis_failure)?;
    if deleted == 1 {
        println!("deleted `{key}` ({}); waiters woken", summary(&before));
    } else {
        println!("`{key}` did not exist; nothing deleted");
    }
    Ok(0)
}

/// Runs `release --ticket`: the compare-and-delete of the ticket's value. Exit
/// 0 when released, 79 when the lock was no longer the ticket's (it expired, or
/// someone else holds it: left as it is).
fn by_ticket(args: &ReleaseArgs, ticket: &str) -> Result<u8, Failure> {
    let ticket = crate::ticket::read(ticket)?;
    let (client, server) = args.server.client(|b| b)?;
    let key = ticket.key();
    match client.release_ticket(&ticket) {
        Ok(Release::Released) => {
            println!("released `{key}`");
            Ok(0)
        }
        Ok(Release::Expired) => Err(Failure::new(
            LOST,
            format!("`{key}` had expired: the lease ran out before this release"),
        )),
        Ok(_) => Err(Failure::new(
            LOST,
            format!("`{key}` is no longer this ticket's: someone else holds it (left as it is)"),
        )),
        Err(e) => Err(Failure::from_lib(&e, &server)),
    }
}
