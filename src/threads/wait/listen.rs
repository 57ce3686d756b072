//! The waiter thread's pub/sub connection: classic channels through the `redis`
//! crate's `PubSub` (RESP2), or, in a cluster with sharded pub/sub, shard channels
//! on a RESP3 connection read by hand.
//!
//! The crate's blocking `PubSub` neither sends `SSUBSCRIBE` nor delivers a RESP2
//! `smessage`; over RESP3 every pub/sub reply is a push, which a read that timed
//! out earlier can never mistake for a late reply. So a sharded listener sends its
//! (un)subscriptions without waiting, and their confirmations come back among the
//! messages: [`Event::Confirmed`], and [`Event::Dropped`] when the server ends a
//! subscription itself (its slot moved to another master).

use std::time::Duration;

use redis::{PushKind, RedisResult, Value};

/// What the connection said.
pub(super) enum Event {
    /// A message on a channel.
    Message(String),
    /// A shard channel's subscription is confirmed.
    Confirmed(String),
    /// A shard channel is no longer subscribed (its slot moved, or we left it).
    Dropped(String),
    /// Nothing a waiter needs (a confirmation of the kick channel, a reply).
    Other,
}

/// One pub/sub connection of a waiter thread.
pub(super) enum Listener<'a> {
    Classic(redis::PubSub<'a>),
    Sharded(&'a mut redis::Connection),
}

impl<'a> Listener<'a> {
    /// A listener on `con`, which must speak RESP3 when `sharded`.
    pub(super) fn new(con: &'a mut redis::Connection, sharded: bool) -> Self {
        if sharded {
            Listener::Sharded(con)
        } else {
            Listener::Classic(con.as_pubsub())
        }
    }

    /// How long a read waits.
    pub(super) fn set_read_timeout(&self, timeout: Duration) -> RedisResult<()> {
        match self {
            Listener::Classic(ps) => ps.set_read_timeout(Some(timeout)),
            Listener::Sharded(con) => con.set_read_timeout(Some(timeout)),
        }
    }

    /// Subscribes to the thread's own kick channel (classic pub/sub in both modes).
    pub(super) fn subscribe_kick(&mut self, kick: &str) -> RedisResult<()> {
        match self {
            Listener::Classic(ps) => ps.subscribe(kick),
            Listener::Sharded(con) => send(con, "SUBSCRIBE", kick),
        }
    }

    /// Subscribes to a release channel; `true` when it is confirmed already, else
    /// the confirmation comes as an [`Event::Confirmed`] (none if the server
    /// refused: a slot another master serves, a channel the user may not read).
    pub(super) fn subscribe(&mut self, channel: &str) -> RedisResult<bool> {
        match self {
            Listener::Classic(ps) => ps.subscribe(channel).map(|()| true),
            Listener::Sharded(con) => send(con, "SSUBSCRIBE", channel).map(|()| false),
        }
    }

    /// Leaves a release channel.
    pub(super) fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Listener::Classic(ps) => ps.unsubscribe(channel),
            Listener::Sharded(con) => send(con, "SUNSUBSCRIBE", channel),
        }
    }

    /// The next thing the connection says, waiting at most the read timeout.
    pub(super) fn next(&mut self) -> RedisResult<Event> {
        match self {
            Listener::Classic(ps) => {
                let msg = ps.get_message()?;
                Ok(Event::Message(msg.get_channel_name().to_owned()))
            }
            Listener::Sharded(con) => Ok(match con.recv_response()? {
                Value::Push { kind, data } => event(&kind, &data),
                _ => Event::Other,
            }),
        }
    }
}

/// Sends `verb channel` without reading anything.
fn send(con: &mut redis::Connection, verb: &str, channel: &str) -> RedisResult<()> {
    con.send_packed_command(&redis::cmd(verb).arg(channel).get_packed_command())
}

/// A RESP3 push as an [`Event`]; its first datum is the channel.
fn event(kind: &PushKind, data: &[Value]) -> Event {
    let Some(channel) = data
        .first()
        .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
    else {
        return Event::Other;
    };
    match kind {
        PushKind::Message | PushKind::SMessage => Event::Message(channel),
        PushKind::SSubscribe => Event::Confirmed(channel),
        PushKind::SUnsubscribe => Event::Dropped(channel),
        _ => Event::Other,
    }
}
