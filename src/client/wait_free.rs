//! [`LockClient::wait_free`]: waiting until nobody holds a name, without taking it.
//!
//! A look is the one snapshot script [`LockClient::inspect`] runs (one round trip,
//! owners not looked up), read as free or held per format; a redlease token is
//! also marked once per holder, as a waiting caller marks it, so that its release
//! publishes. Between looks the caller sleeps on a [`Watcher`] of the channels the
//! present format publishes on, for one polling step at most.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::LockClient;
use super::follow::following;
use crate::client::inspect::{self, Holder, LockInfo};
use crate::error::{Error, Operation, Result};
use crate::format::LockFormat;
use crate::owner::ClientTag;
use crate::scheme::token::scripts::TOKEN_MARK;
use crate::scheme::{Keys, TimestampUnit, companion, fair_keys, rw_channel, semaphore_channel};
use crate::threads::wait::{Heard, Watcher};

/// How many of the client's longest polling steps a watcher sleeps between looks
/// when the holder publishes its release and every channel is subscribed: the
/// release wakes it, and the look only covers a release that could not publish
/// (a lock handed over inside its holder's client, a key deleted by hand).
const TRUSTED_STEPS: u32 = 10;

/// The first step after a look that found a quorum's name free on some masters
/// and held on others, doubled on each such look up to the client's longest
/// step: a Redlock release reaches every master at once, and the message came
/// from one of them.
const PARTLY_FREE_STEP: Duration = Duration::from_millis(2);

/// `PTTL` of a key that does not exist.
const KEY_GONE: i64 = -2;

/// What one look found.
#[derive(Debug, Default)]
struct Held {
    /// Free on some masters of a quorum, too few for a majority.
    partly_free: bool,
    /// How long the holder has left at most, when its key says.
    remaining: Option<Duration>,
    /// The channels a release of the present holder may publish on.
    channels: Vec<String>,
    /// Whether the holder's release surely publishes on one of them.
    publishes: bool,
    /// The holder's value, to tell a new holder from the last one.
    value: Option<String>,
}

impl LockClient {
    /// Waits until nobody holds `name`, for at most `timeout`; never takes it.
    ///
    /// Returns `Ok(true)` as soon as a look finds the name free, `Ok(false)` when
    /// `timeout` ran out with it still held (it looks once even when `timeout`
    /// is zero); a look under way at the timeout ends within the client's
    /// network timeouts. Free means, per format: no key (a token lock is held
    /// while its key lives); a legacy timestamp lock
    /// whose timestamp has passed (a deployed client would take it over); a
    /// semaphore with a free permit (or an expired one, which the next call gives
    /// back). A reentrant, fair or read-write lock is held while its hash exists;
    /// a fair lock's queue alone does not hold it.
    ///
    /// **The answer is stale at once**: someone may take the name right after
    /// the look. It is a hint (for a dashboard, a scheduler that wants to start
    /// when a job ends), not a lock; to act alone on the name, take it.
    ///
    /// Between looks it sleeps on the channels the holder's format publishes on
    /// (a redlease token, which it marks as a waiting caller does; Redisson's
    /// lock, read-write lock, semaphore and fair-lock queue head), so a release
    /// wakes it within a round trip; a holder that does not publish (another
    /// client's token, a legacy timestamp) is polled on the client's
    /// [backoff](crate::LockClientBuilder::backoff) step, never past the holder's
    /// remaining TTL. A holder that publishes is looked at again after its TTL,
    /// or ten longest backoff steps, whichever is sooner. Each look is one round
    /// trip (one per master with Redlock, where the name is free on a majority).
    /// It takes no place in the line of this client's callers waiting for the
    /// name, and takes no release message from them.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty name; [`Error::WrongFormat`] when the key
    /// holds no lock format (a list, a set, a hash of other fields, ...);
    /// [`Error::Shutdown`] when the client is [closed](Self::close), also while
    /// it waits; [`Error::Redis`] when a look got no answer, or, in a Redis
    /// Cluster, was still redirected (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`)
    /// when `timeout` ran out (a look follows the slot's move within the call,
    /// as every cluster call does).
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use std::time::Duration;
    /// let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
    /// if client.wait_free("nightly-report", Duration::from_secs(60))? {
    ///     println!("the report job has finished (someone may start another now)");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_free(&self, name: &str, timeout: Duration) -> Result<bool> {
        let keys = Keys::plain(&self.inner.settings.key_prefix, name)?;
        let hub = &*self.inner.hub;
        if hub.shutdown.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut watcher = Watcher::new(hub, self.inner.waiters.as_ref(), None);
        let mut last_value = None;
        let mut partly_free_looks = 0;
        loop {
            let Some(held) = self.look_following(&keys, watcher.listening(), deadline)? else {
                return Ok(true);
            };
            if held.value != last_value {
                watcher.restart_steps();
                last_value.clone_from(&held.value);
            }
            let added = watcher.listen(&held.channels);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(false);
            }
            // Listening only from now on: a release since the look is seen by
            // another look now when the channels are subscribed already, or
            // when their confirmation wakes us.
            if added && watcher.hears() {
                continue;
            }
            if !held.partly_free {
                partly_free_looks = 0;
            }
            let step = match (held.publishes, watcher.hears()) {
                _ if held.partly_free => {
                    partly_free_looks += 1;
                    let doubled = PARTLY_FREE_STEP.saturating_mul(1 << partly_free_looks.min(16));
                    doubled.min(watcher.longest_step())
                }
                (true, true) => watcher.longest_step() * TRUSTED_STEPS,
                // Until the subscription is confirmed (which wakes us), or while
                // pub/sub is down: the capped step, without the ramp.
                (true, false) => watcher.longest_step(),
                (false, _) => watcher.step(),
            };
            // A holder that never publishes is waited out by its TTL at most.
            let step = held
                .remaining
                .map_or(step, |r| step.min(r + Duration::from_millis(1)));
            let until = now + step;
            let until = deadline.map_or(until, |d| d.min(until));
            match watcher.sleep(until) {
                Heard::Shutdown => return Err(Error::Shutdown),
                Heard::Something | Heard::Nothing => {}
            }
            if hub.shutdown.is_cancelled() {
                return Err(Error::Shutdown);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// [`look`](Self::look), sent again while a cluster node answers that it ran
    /// nowhere (see [`following`]), until `deadline`.
    fn look_following(
        &self,
        keys: &Keys,
        mark: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<Held>> {
        following(deadline, &self.inner.hub.shutdown, || self.look(keys, mark))
    }

    /// One look at the name on every node that holds it: `None` when it is free
    /// (on a majority of a quorum's masters). `mark`: mark a redlease token,
    /// so that its release publishes (only worth it while pub/sub listens).
    fn look(&self, keys: &Keys, mark: bool) -> Result<Option<Held>> {
        let topology = &self.inner.hub.topology;
        let fence = topology.fence_of(keys);
        let nodes = topology.readers(&keys.lock);
        let majority = nodes.len() / 2 + 1;
        let (mut free, mut failed, mut last_error) = (0, 0, None);
        let mut held = Held::default();
        for node in &nodes {
            let quick = node
                .get()
                .and_then(|mut c| Ok(token_look(&mut c, &keys.lock, mark)?));
            match quick {
                Ok(Some(found)) => {
                    match found {
                        Quick::Free => free += 1,
                        Quick::Held(h) => held.merge(h),
                    }
                    if free >= majority {
                        return Ok(None);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    failed += 1;
                    last_error = Some(e.during(Operation::Inspect, &keys.lock, node.limits()));
                    continue;
                }
            }
            let read = node.get().and_then(|mut c| {
                Ok(c.run(|c| {
                    let info = inspect::snapshot(c, &keys.lock, &fence)?;
                    let unmarked = info.format() == LockFormat::Token
                        && info
                            .value()
                            .is_some_and(|v| ClientTag::of_token(v).is_some() && !v.ends_with('+'));
                    // The mark comes after the snapshot: a release in between
                    // published nothing (nobody had marked the value), and the
                    // mark finds no key (`PTTL` -2). The name was free then.
                    let gone = mark
                        && unmarked
                        && TOKEN_MARK.key(&keys.lock).invoke::<i64>(c)? == KEY_GONE;
                    Ok((info, gone))
                })?)
            });
            let (info, gone) = match read {
                Ok(read) => read,
                Err(e) => {
                    failed += 1;
                    last_error = Some(e.during(Operation::Inspect, &keys.lock, node.limits()));
                    continue;
                }
            };
            let found = if gone { None } else { holder(&info, now_ms())? };
            match found {
                None => free += 1,
                Some(h) => held.merge(h),
            }
            if free >= majority {
                return Ok(None);
            }
        }
        held.partly_free = free > 0;
        match last_error {
            Some(e) if failed > nodes.len() - majority => Err(e),
            _ if nodes.is_empty() => Err(Error::Shutdown),
            _ => Ok(Some(held)),
        }
    }
}

impl Held {
    /// Adds what another master of a quorum showed.
    fn merge(&mut self, other: Held) {
        let first = self.channels.is_empty() && self.value.is_none();
        self.remaining = match (self.remaining, other.remaining) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for c in other.channels {
            if !self.channels.contains(&c) {
                self.channels.push(c);
            }
        }
        self.publishes = other.publishes && (first || self.publishes);
        if self.value.is_none() {
            self.value = other.value;
        }
    }
}

/// Who holds the name as `info` shows it, at `now_ms` (unix ms); `None` when free.
///
/// # Errors
/// [`Error::WrongFormat`] for a key of no lock format.
/// What a look with no script found.
enum Quick {
    Free,
    Held(Held),
}

/// A look with no script, on a server with conditional commands (where a user
/// may have no scripting): `GET` and `PTTL` of the lock key, read as free (no
/// key) or held by a token (a value that is no number), marked as a waiting
/// caller marks it. `None` when it cannot tell (another server, another format:
/// a number, a key of another type): the snapshot script looks then.
fn token_look(
    conn: &mut crate::net::connection::Conn,
    key: &str,
    mark: bool,
) -> redis::RedisResult<Option<Quick>> {
    if !conn.conditional() {
        return Ok(None);
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
    let replies = conn.pipeline(&pipe, 2)?;
    let redis::Value::Int(pttl) = replies[1] else {
        return Ok(None);
    };
    let value = match &replies[0] {
        redis::Value::Nil if pttl == KEY_GONE => return Ok(Some(Quick::Free)),
        redis::Value::BulkString(v) => String::from_utf8_lossy(v).into_owned(),
        _ => return Ok(None),
    };
    if value.parse::<u64>().is_ok() {
        return Ok(None);
    }
    let ours = ClientTag::of_token(&value).is_some();
    let mut pttl = pttl;
    if mark && ours && !value.ends_with('+') {
        pttl = crate::scheme::token::cond::mark(conn, key, value.as_bytes())?;
        if pttl == KEY_GONE {
            return Ok(Some(Quick::Free));
        }
    }
    Ok(Some(Quick::Held(Held {
        partly_free: false,
        remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
        channels: if ours {
            vec![companion(key, "released")]
        } else {
            Vec::new()
        },
        publishes: ours,
        value: Some(value),
    })))
}

fn holder(info: &LockInfo, now_ms: u64) -> Result<Option<Held>> {
    let key = info.key();
    let value = info.value().map(str::to_owned);
    let held = match info.format() {
        LockFormat::Free => return Ok(None),
        LockFormat::Token => {
            // Only a redlease token's release publishes (once a waiter marked it).
            let ours = info
                .value()
                .is_some_and(|v| ClientTag::of_token(v).is_some());
            Held {
                partly_free: false,
                remaining: info.ttl(),
                channels: if ours {
                    vec![companion(key, "released")]
                } else {
                    Vec::new()
                },
                publishes: ours,
                value,
            }
        }
        LockFormat::LegacyTimestamp => {
            let Some(until) = legacy_end(info) else {
                return Ok(None);
            };
            let Some(left) = until.checked_sub(now_ms).filter(|ms| *ms > 0) else {
                return Ok(None);
            };
            let left = Duration::from_millis(left);
            // redlease's legacy releases publish; the deployed clients' do not.
            Held {
                partly_free: false,
                remaining: Some(info.ttl().map_or(left, |t| t.min(left))),
                channels: vec![companion(key, "released")],
                publishes: false,
                value,
            }
        }
        LockFormat::Reentrant => {
            // Redisson's RLock publishes on the lock's channel; a fair lock
            // (the same hash) only on the channel of its queue's head, and not
            // at all when nobody is queued.
            let [_, _, channel] = fair_keys(key);
            let head = info
                .queue()
                .first()
                .map(|w| format!("{channel}:{}", w.id()));
            Held {
                partly_free: false,
                remaining: info.ttl(),
                publishes: head.is_some(),
                channels: std::iter::once(channel).chain(head).collect(),
                value: info.holders().first().map(|h| h.value().to_owned()),
            }
        }
        LockFormat::ReadWrite => Held {
            partly_free: false,
            remaining: info.ttl(),
            channels: vec![rw_channel(key)],
            publishes: true,
            value: info.holders().first().map(|h| h.value().to_owned()),
        },
        LockFormat::Semaphore => {
            let free = info.free_permits().unwrap_or(0);
            let expired = i64::try_from(info.permits_expired()).unwrap_or(i64::MAX);
            if free.saturating_add(expired) > 0 {
                return Ok(None);
            }
            // The soonest permit to expire is given back by the next call after it.
            let soonest = info.holders().first().and_then(Holder::expires_at);
            let remaining = soonest.map(|t| {
                t.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
            });
            Held {
                partly_free: false,
                remaining,
                channels: vec![semaphore_channel(key)],
                publishes: true,
                value: info.holders().first().map(|h| h.value().to_owned()),
            }
        }
        _ => {
            return Err(Error::wrong_format(
                key,
                LockFormat::Any,
                found(info.redis_type()),
            ));
        }
    };
    Ok(Some(held))
}

/// When a legacy timestamp lock expires, in unix ms: the first instant its
/// stored expiry is in the past (deployed clients take over once
/// `stored < now`, in its unit).
fn legacy_end(info: &LockInfo) -> Option<u64> {
    let stored: u64 = info.value()?.parse().ok()?;
    Some(match info.timestamp_unit()? {
        TimestampUnit::Seconds => stored.saturating_add(1).saturating_mul(1000),
        _ => stored.saturating_add(1),
    })
}

/// What a key of Redis type `kind` that holds no lock format is.
fn found(kind: &str) -> &'static str {
    match kind {
        "string" => "a string of no lock format",
        "hash" => "a hash of no lock format",
        "list" => "a list",
        "set" => "a set",
        "zset" => "a sorted set",
        "stream" => "a stream",
        _ => "a value of another type",
    }
}

/// This machine's unix time in ms.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_no_lock_format_are_named_by_their_type() {
        assert_eq!(found("list"), "a list");
        assert_eq!(found("zset"), "a sorted set");
        assert_eq!(found("hash"), "a hash of no lock format");
        assert_eq!(found("vectorset"), "a value of another type");
    }

    #[test]
    fn quorum_answers_merge_to_the_longest_hold_and_every_channel() {
        let mut held = Held::default();
        held.merge(Held {
            partly_free: false,
            remaining: Some(Duration::from_secs(1)),
            channels: vec!["a".into()],
            publishes: true,
            value: Some("x".into()),
        });
        held.merge(Held {
            partly_free: false,
            remaining: Some(Duration::from_secs(3)),
            channels: vec!["a".into(), "b".into()],
            publishes: false,
            value: Some("y".into()),
        });
        assert_eq!(held.remaining, Some(Duration::from_secs(3)));
        assert_eq!(held.channels, ["a", "b"]);
        assert!(!held.publishes, "one master's holder may not publish");
        assert_eq!(held.value.as_deref(), Some("x"));
    }
}
