//! Releases a caller does not wait for: a guard dropped by a client built with
//! `release_in_background(true)` queues its release ([`Free`]) for its node's
//! I/O thread and returns. The thread takes every release queued meanwhile
//! (`worker::collect`) and sends them in one write, pipelined ([`send`]): one round
//! trip, and one read of the replies, for many releases.
//!
//! [`Queued`] is the client's record of the names whose release is queued and
//! not yet answered. An acquire of such a name waits for the answer first
//! ([`Queued::settle`]), so it is never reported busy only because this client's
//! own release has not landed yet; the compare-and-delete would not remove the
//! new holder's value anyway (another token), so the order matters for the
//! answer only, never for safety. A release whose pipeline failed leaves the
//! record and joins the I/O thread's retried cleanups.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use redis::{RedisResult, Value};

use crate::metrics::{Counters, bump};
use crate::net::connection::Conn;
use crate::net::node::Node;
use crate::scheme::token::cond;
use crate::scheme::token::scripts::{TOKEN_RELEASE, TOKEN_RELEASE_SHARDED};
use crate::scheme::{Announce, Backend, Freed, Keys, Release, with_scripts};

/// A value to take out of Redis, tried until it expires by itself at `until`.
#[derive(Clone)]
pub(crate) struct Cleanup {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) keys: Keys,
    pub(crate) value: String,
    pub(crate) until: Instant,
}

/// A guard's release, queued for its node's I/O thread.
pub(crate) struct Free {
    /// The name as the client's record knows it: the lock key with its prefix.
    pub(crate) name: String,
    pub(crate) cleanup: Cleanup,
    /// Publish the release message whoever waits (this client has callers of
    /// the key); otherwise only for a value a waiter marked, as a release does.
    pub(crate) always: bool,
    pub(crate) queued: Arc<Queued>,
}

/// A client's releases queued and not yet answered, by name; and what the
/// answered ones found, for a shutdown's report.
#[derive(Debug, Default)]
pub(crate) struct Queued {
    names: Mutex<HashMap<String, usize>>,
    answered: Condvar,
    /// The releases queued now: an acquire reads it, one atomic load, and looks
    /// no further while it is zero.
    pending: AtomicUsize,
    released: AtomicUsize,
    gone: AtomicUsize,
    failed: AtomicUsize,
}

/// What the answered background releases found, counted since the client began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) released: usize,
    pub(crate) gone: usize,
    pub(crate) failed: usize,
}

impl Queued {
    /// Records `name`'s release as queued; before it is sent.
    pub(crate) fn add(&self, name: &str) {
        let mut names = self.names.lock();
        *names.entry(name.to_owned()).or_default() += 1;
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// Records `name`'s release as answered (`Some`) or failed (`None`), and wakes
    /// the callers waiting for it.
    pub(crate) fn done(&self, name: &str, outcome: Option<Release>) {
        let counter = match outcome {
            Some(Release::Released) => &self.released,
            Some(_) => &self.gone,
            None => &self.failed,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.cancel(name);
    }

    /// Takes `name` out of the record without counting it (its release went
    /// another way).
    pub(crate) fn cancel(&self, name: &str) {
        let mut names = self.names.lock();
        if let Some(n) = names.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                names.remove(name);
            }
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
        drop(names);
        self.answered.notify_all();
    }

    /// Waits until no release of `name` is queued, or until `by`: an acquire of
    /// `name` then finds the key as this client's release left it.
    pub(crate) fn settle(&self, name: &str, by: Instant) {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut names = self.names.lock();
        while names.contains_key(name) {
            if self.answered.wait_until(&mut names, by).timed_out() {
                return;
            }
        }
    }

    /// Waits until no release is queued, or until `by`; how many still are.
    pub(crate) fn drain(&self, by: Instant) -> usize {
        let mut names = self.names.lock();
        while !names.is_empty() {
            if self.answered.wait_until(&mut names, by).timed_out() {
                break;
            }
        }
        self.pending.load(Ordering::SeqCst)
    }

    /// What the answered releases found so far.
    pub(crate) fn tally(&self) -> Tally {
        Tally {
            released: self.released.load(Ordering::SeqCst),
            gone: self.gone.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }
}

impl std::ops::Sub for Tally {
    type Output = Tally;
    fn sub(self, earlier: Tally) -> Tally {
        Tally {
            released: self.released.saturating_sub(earlier.released),
            gone: self.gone.saturating_sub(earlier.gone),
            failed: self.failed.saturating_sub(earlier.failed),
        }
    }
}

/// Sends `batch` in one pipelined write on a pooled connection of `node`, and
/// records each answer. Returns the releases that got none (the node failed or
/// did not answer in time), for the caller to retry as cleanups.
pub(super) fn send(node: &Node, counters: &Counters, batch: Vec<Free>) -> Vec<Cleanup> {
    let answers = node
        .with_retry(|conn| {
            with_scripts(conn, &[&TOKEN_RELEASE, &TOKEN_RELEASE_SHARDED], |c| {
                pipelined(c, &batch)
            })
        })
        .inspect_err(|e| log::debug!("background releases failed: {e}"))
        .ok();
    let mut failed = Vec::new();
    for (i, free) in batch.into_iter().enumerate() {
        let answer = answers.as_ref().and_then(|a| a.get(i)).and_then(read);
        if let Some(outcome) = answer {
            if outcome == Release::Released {
                bump(&counters.released, 1);
            } else {
                log::debug!("background release of `{}`: {outcome:?}", free.name);
            }
            free.queued.done(&free.name, Some(outcome));
        } else {
            bump(&counters.release_errors, 1);
            free.queued.done(&free.name, None);
            failed.push(free.cleanup);
        }
    }
    failed
}

/// The token release of each of `batch`, as a guard's release sends it
/// (`EVALSHA <sha> 1 key value [channel]`), in one pipeline; errors kept as
/// replies. A `NOSCRIPT` fails the whole call, so the scripts are loaded and it
/// is sent again (see [`with_scripts`]): the releases it ran found their key
/// gone the second time, which only their count in a report shows.
fn pipelined(conn: &mut Conn, batch: &[Free]) -> RedisResult<Vec<Value>> {
    if conn.conditional() {
        return conditional(conn, batch);
    }
    let script = if conn.sharded() {
        &TOKEN_RELEASE_SHARDED
    } else {
        &TOKEN_RELEASE
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for free in batch {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg(&free.cleanup.keys.lock)
            .arg(&free.cleanup.value);
        if free.always {
            cmd.arg(&free.cleanup.keys.channel);
        }
    }
    // Replies read one at a time, stopping at the first that fails (as a renewal
    // batch reads them); any error left means the reply stream is unknown.
    let replies = conn.pipeline(&pipe, batch.len());
    conn.broken |= replies.is_err();
    let replies = replies?;
    if let Some(Value::ServerError(e)) = replies
        .iter()
        .find(|r| matches!(r, Value::ServerError(e) if e.code() == "NOSCRIPT"))
    {
        return Err(e.clone().into());
    }
    for r in &replies {
        conn.note_reply(r);
    }
    Ok(replies)
}

/// The releases of `batch` on a server with conditional commands (Valkey 9): one
/// `DELIFEQ key token` each (and the release message beside it where `always`
/// asks), in one pipeline; a release that deleted nothing (a value a waiter
/// marked, a key gone or someone else's) is then told apart as a guard's release
/// tells it (`token::cond::release`). Answers as the release script would; an
/// error reply is kept, and an ACL that refuses `DELIFEQ` turns the node's
/// connections to scripts (the failed ones retry as cleanups).
fn conditional(conn: &mut Conn, batch: &[Free]) -> RedisResult<Vec<Value>> {
    let publish = if conn.sharded() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut at = Vec::with_capacity(batch.len());
    let mut sent = 0;
    for free in batch {
        let keys = &free.cleanup.keys;
        at.push(sent);
        pipe.cmd("DELIFEQ").arg(&keys.lock).arg(&free.cleanup.value);
        sent += 1;
        if free.always {
            pipe.cmd(publish).arg(&keys.channel).arg("released");
            sent += 1;
        }
    }
    let replies = conn.pipeline(&pipe, sent);
    conn.broken |= replies.is_err();
    let replies = replies?;
    for r in &replies {
        conn.note_reply(r);
    }
    let mut answers = Vec::with_capacity(batch.len());
    for (free, &i) in batch.iter().zip(&at) {
        let answer = match &replies[i] {
            Value::Int(1) => Value::Int(1),
            Value::Int(_) => {
                let announce = Announce {
                    channel: &free.cleanup.keys.channel,
                    always: false,
                    keep: None,
                };
                let (key, value) = (&free.cleanup.keys.lock, &free.cleanup.value);
                Value::Int(cond::release(conn, key, announce, value)?)
            }
            Value::ServerError(e) if e.code() == "NOPERM" => {
                conn.refuse_conditional();
                replies[i].clone()
            }
            other => other.clone(),
        };
        answers.push(answer);
    }
    Ok(answers)
}

/// A release script's reply, if it is one.
fn read(reply: &Value) -> Option<Release> {
    let n: i64 = redis::from_redis_value_ref(reply).ok()?;
    Some(Freed::from_reply(n).outcome)
}
