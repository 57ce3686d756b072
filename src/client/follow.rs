//! Reads sent straight to a node (`inspect`, `wait_free`) follow a cluster's
//! redirections as the topology's own calls do: an answer that the command ran
//! nowhere (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) sends it again, where the
//! connection noted the slot went, within the caller's time.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::threads::cancel::CancelToken;

/// Redirections followed at once, as a cluster call follows its first ones;
/// after them a read pauses 1, 2, 4 … ms, up to [`MAX_HOP_PAUSE`], before it is
/// sent again.
const FREE_HOPS: u32 = 2;
const MAX_HOP_PAUSE: Duration = Duration::from_millis(100);

/// Runs `read` until it answers with something other than a redirection, or
/// until the next pause would end past `deadline` (then the last redirection is
/// the answer), or the client shuts down.
pub(super) fn following<T>(
    deadline: Option<Instant>,
    shutdown: &CancelToken,
    mut read: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut hops = 0u32;
    loop {
        let e = match read() {
            Err(e) if ran_nowhere(&e) => e,
            answer => return answer,
        };
        hops += 1;
        if hops <= FREE_HOPS {
            continue;
        }
        let pause = Duration::from_millis(1 << (hops - FREE_HOPS - 1).min(7)).min(MAX_HOP_PAUSE);
        let late = deadline.is_some_and(|d| Instant::now() + pause >= d);
        if late || shutdown.is_cancelled() {
            return Err(e);
        }
        std::thread::sleep(pause);
    }
}

/// Whether a cluster node answered that the command ran nowhere: sending it
/// again, where the answer says, is safe.
fn ran_nowhere(e: &Error) -> bool {
    let Error::Redis(failure) = e else {
        return false;
    };
    failure.redis_error().is_some_and(|e| {
        [
            redis::ServerErrorKind::Moved,
            redis::ServerErrorKind::Ask,
            redis::ServerErrorKind::TryAgain,
            redis::ServerErrorKind::ClusterDown,
        ]
        .into_iter()
        .any(|k| e.kind() == k.into())
    })
}
