//! Replica confirmation: `WAIT count timeout` behind an acquire, in the same round
//! trip, and the acquisition given back when too few replicas acknowledged it.
//!
//! Redis replicates asynchronously: a lock granted by a master that fails before
//! the write reaches a replica is gone after the failover, and a second holder may
//! take it. `WAIT` narrows that window: the lock is reported taken only once
//! `count` replicas have acknowledged it. It does not close it: an acknowledged
//! write may still be lost (a replica acknowledges what it received, not what it
//! persisted; a failover may promote a replica that had not acknowledged), and a
//! renewal is never confirmed this way.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::{Acquire, Announce, Backend, Keys, Request, with_scripts};
use crate::connection::Conn;
use crate::error::{Error, Result};
use crate::resp::{self, Arg};
use crate::time::{MAX_TTL, ttl_millis};

/// How many replicas must acknowledge an acquisition, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

impl Replicas {
    /// `count` replicas within `timeout`, checked; `None` for a count of 0 (no
    /// confirmation). The timeout is at least 1 ms: `WAIT n 0` would block for ever.
    pub(crate) fn checked(count: u32, timeout: Duration) -> Result<Option<Self>> {
        if count == 0 {
            return Ok(None);
        }
        if timeout < Duration::from_millis(1) {
            return Err(Error::config(
                "replicas",
                "the timeout must be at least 1 ms",
            ));
        }
        if timeout > MAX_TTL {
            return Err(Error::config("replicas", "the timeout is too long"));
        }
        Ok(Some(Self { count, timeout }))
    }
}

/// An acquisition fewer than `required` replicas acknowledged in time, given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreplicated {
    pub(crate) acked: u32,
    pub(crate) required: u32,
}

/// Sends one acquire command, `args` (packed by hand, see `resp`), and, when
/// `replicas` is set, `WAIT` behind it in one pipeline. Returns the acquire's reply and how many replicas acknowledged this
/// connection's writes (`None` without `replicas`). Loads `scripts` and sends again
/// after `NOSCRIPT`.
///
/// A `WAIT` that fails (a server that cannot count replicas) counts as no
/// acknowledgement: the acquire's write is there, and must be given back.
pub(crate) fn send_acquire(
    conn: &mut Conn,
    scripts: &[&std::sync::LazyLock<redis::Script>],
    args: &[Arg<'_>],
    replicas: Option<Replicas>,
) -> RedisResult<(Value, Option<u32>)> {
    let Some(r) = replicas else {
        let reply = with_scripts(conn, scripts, |c| c.request(args))?;
        return Ok((reply, None));
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .add_command(resp::cmd(args))
        .cmd("WAIT")
        .arg(r.count)
        .arg(ttl_millis(r.timeout));
    let (reply, wait) = with_scripts(conn, scripts, |c| {
        let replies = c.pipeline(&pipe, 2)?;
        let [reply, wait] = <[Value; 2]>::try_from(replies)
            .map_err(|_| (redis::ErrorKind::Client, "WAIT pipeline: not two replies"))?;
        // An acquire that failed (`NOSCRIPT` among others) wrote nothing.
        Ok((reply.extract_error()?, wait))
    })?;
    let acked = match wait
        .extract_error()
        .and_then(|v| Ok(redis::from_redis_value::<u64>(v)?))
    {
        Ok(n) => u32::try_from(n).unwrap_or(u32::MAX),
        Err(e) => {
            log::warn!("WAIT failed ({e}); counted as no replica acknowledging");
            0
        }
    };
    Ok((reply, Some(acked)))
}

/// One attempt of `backend` to take the lock under `keys`, confirmed by replicas
/// when `req.replicas` is set.
///
/// The replies are read within `read_timeout` plus the `WAIT` timeout; the
/// connection's `read_timeout` is put back afterwards. An acquisition too few
/// replicas acknowledged is given back at once (compare-and-delete, or one hold
/// fewer for the reentrant scheme), then reported as [`Unreplicated`]. An
/// error from that give-back is returned as is: the value may then still be
/// stored, as after any acquire whose reply was lost.
pub(crate) fn acquire_confirmed(
    backend: &dyn Backend,
    conn: &mut Conn,
    keys: &Keys,
    value: &str,
    req: Request,
    read_timeout: Duration,
) -> RedisResult<Result<Acquire, Unreplicated>> {
    let Some(r) = req.replicas else {
        return backend.acquire(conn, keys, value, req).map(Ok);
    };
    conn.run(|c| c.set_read_timeout(Some(read_timeout.saturating_add(r.timeout))))?;
    let outcome = backend.acquire(conn, keys, value, req);
    if !conn.broken {
        conn.run(|c| c.set_read_timeout(Some(read_timeout)))?;
    }
    match outcome? {
        Acquire::Acquired {
            acked: Some(acked), ..
        } if acked < r.count => {
            // Whatever it finds (gone already, say), the lock is not ours now.
            let _ = backend.release(
                conn,
                &keys.lock,
                Announce::always(&keys.channel),
                value,
                &[],
            )?;
            Ok(Err(Unreplicated {
                acked,
                required: r.count,
            }))
        }
        other => Ok(Ok(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_zero_turns_confirmation_off_and_timeouts_are_bounded() {
        assert_eq!(Replicas::checked(0, Duration::ZERO).unwrap(), None);
        let one = Replicas::checked(1, Duration::from_millis(1)).unwrap();
        assert_eq!(one.map(|r| r.count), Some(1));
        for bad in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
            match Replicas::checked(1, bad) {
                Err(Error::Config { option, .. }) => assert_eq!(option, "replicas"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
