//! The answers of a cluster node that say a call ran nowhere, and how long a call
//! keeps sending itself again after them.
//!
//! `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` all come before the command runs:
//! sending it again is safe, an acquire too. While a slot moves, nodes may
//! disagree for a moment (a source already told the slot's new owner while the
//! new owner, still importing, points back; a failover seen by some nodes and not
//! others; a node that sees the cluster failed): a call then follows the answers
//! with a short, growing, jittered pause between sends, and the map is read
//! again, until the answers agree or the call's time is spent.

use std::time::{Duration, Instant};

use crate::error::Error;

/// Redirections a call follows at once: a slot that moved (`MOVED`), then was
/// migrating again (`ASK`). Every send after them is paused first.
const FREE_HOPS: u32 = 2;
/// The first pause; each next one is twice as long, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two sends.
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// An answer that says the call ran nowhere, and where it goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hop {
    /// `MOVED slot host:port`: the node at `host:port` serves the slot now.
    Moved(String),
    /// `ASK slot host:port`: the key is on the node at `host:port`, importing the
    /// slot; the call goes there once, preceded by `ASKING`.
    Ask(String),
    /// `TRYAGAIN`: the keys of a multi-key call are split by a slot migration.
    TryAgain,
    /// `CLUSTERDOWN`: the node sees the cluster failed, or the slot unserved.
    Down,
}

impl Hop {
    /// What an error says about where the call must go, if it ran nowhere.
    pub(super) fn of(e: &Error) -> Option<Hop> {
        let Error::Redis(failure) = e else {
            return None;
        };
        let e = failure.redis_error()?;
        let kind = e.kind();
        let to = || e.redirect_node().map(|(addr, _)| addr.to_owned());
        if kind == redis::ServerErrorKind::Moved.into() {
            to().map(Hop::Moved)
        } else if kind == redis::ServerErrorKind::Ask.into() {
            to().map(Hop::Ask)
        } else if kind == redis::ServerErrorKind::TryAgain.into() {
            Some(Hop::TryAgain)
        } else if kind == redis::ServerErrorKind::ClusterDown.into() {
            Some(Hop::Down)
        } else {
            None
        }
    }

    fn redirects(&self) -> bool {
        matches!(self, Hop::Moved(_) | Hop::Ask(_))
    }
}

/// How long one call keeps sending itself again.
#[derive(Debug)]
pub(super) struct Retry {
    /// How long after the first pause the call may keep trying (the read timeout).
    span: Duration,
    /// The caller's bound, if it has one.
    by: Option<Instant>,
    /// When the call stops trying: set at the first pause (no clock read on
    /// the common path, where the first answer or a free hop is the last).
    until: Option<Instant>,
    hops: u32,
    pauses: u32,
}

impl Retry {
    /// Tries for at most `span` after the first pause, and never past `by`; with
    /// a zero `span`, follows the first redirections only.
    pub(super) fn new(span: Duration, by: Option<Instant>) -> Self {
        Self {
            span,
            by,
            until: None,
            hops: 0,
            pauses: 0,
        }
    }

    /// Whether answers disagree: a redirection after a redirection, or a node
    /// that sees the cluster down. The map is then worth reading again.
    pub(super) fn disagree(&self, hop: &Hop) -> bool {
        (hop.redirects() && self.hops > 0) || *hop == Hop::Down
    }

    /// Whether the call is sent again after `hop`: at once for the first
    /// redirections, after a growing, jittered pause (slept here) otherwise, while
    /// the pause ends before the call's time is spent.
    pub(super) fn again(&mut self, hop: &Hop) -> bool {
        if hop.redirects() {
            self.hops += 1;
            if self.hops <= FREE_HOPS {
                return true;
            }
        }
        let now = Instant::now();
        let until = *self.until.get_or_insert_with(|| {
            let limit = now + self.span;
            self.by.map_or(limit, |by| by.min(limit))
        });
        let pause = pause(self.pauses);
        self.pauses += 1;
        if now + pause >= until {
            return false;
        }
        std::thread::sleep(pause);
        true
    }

    /// A pause as long as the next one would be, at most: what a waiting caller
    /// waits before it tries again.
    pub(super) fn next_pause(&self) -> Duration {
        cap(self.pauses)
    }
}

/// The upper end of pause `n`: [`FIRST_PAUSE`] doubled `n` times, at most
/// [`MAX_PAUSE`].
fn cap(n: u32) -> Duration {
    FIRST_PAUSE.saturating_mul(1 << n.min(16)).min(MAX_PAUSE)
}

/// Pause `n`, drawn from the upper half of its range (jitter spreads callers that
/// met the same answer; the lower bound keeps the pauses growing).
fn pause(n: u32) -> Duration {
    let hi = u64::try_from(cap(n).as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(fastrand::u64(hi / 2..=hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_from_one_millisecond_to_a_hundred() {
        let caps: Vec<u128> = (0..9).map(|n| cap(n).as_millis()).collect();
        assert_eq!(caps, [1, 2, 4, 8, 16, 32, 64, 100, 100]);
        assert_eq!(cap(u32::MAX), MAX_PAUSE);
        for n in 0..12 {
            let p = pause(n);
            assert!(cap(n) / 2 <= p && p <= cap(n), "{n}: {p:?}");
        }
    }

    #[test]
    fn redirections_are_followed_at_once_then_paused_until_the_bound() {
        let mut retry = Retry::new(Duration::from_millis(40), None);
        let moved = Hop::Moved("127.0.0.1:7000".into());
        assert!(!retry.disagree(&moved));
        let at = Instant::now();
        assert!(retry.again(&moved) && retry.again(&Hop::Ask("h:1".into())));
        assert!(retry.until.is_none(), "no clock read for the free hops");
        assert!(retry.disagree(&moved));
        let mut sends = 0;
        while retry.again(&moved) {
            sends += 1;
            assert!(sends < 100, "the bound was not kept");
        }
        assert!(sends >= 3, "{sends}");
        assert!(at.elapsed() < Duration::from_millis(40) + MAX_PAUSE);
        // A caller's bound already past: nothing is sent again after a pause.
        let mut late = Retry::new(Duration::from_secs(2), Some(Instant::now()));
        assert!(!late.again(&Hop::Down));
        // No span: the free hops only.
        let mut once = Retry::new(Duration::ZERO, None);
        assert!(once.again(&moved) && once.again(&moved));
        assert!(!once.again(&moved) && !once.again(&Hop::TryAgain));
    }

    #[test]
    fn only_answers_sent_before_the_command_ran_are_hops() {
        // Built from a server's reply text, as a connection reads it.
        let parse = |text: &str| {
            let reply = redis::parse_redis_value(text.as_bytes()).unwrap();
            Hop::of(&Error::from(reply.extract_error().unwrap_err()))
        };
        assert_eq!(
            parse("-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Hop::Moved("127.0.0.1:6381".into()))
        );
        assert_eq!(
            parse("-ASK 3999 127.0.0.1:6381\r\n"),
            Some(Hop::Ask("127.0.0.1:6381".into()))
        );
        assert_eq!(parse("-TRYAGAIN Multiple keys\r\n"), Some(Hop::TryAgain));
        assert_eq!(
            parse("-CLUSTERDOWN The cluster is down\r\n"),
            Some(Hop::Down)
        );
        assert_eq!(parse("-ERR unknown\r\n"), None);
    }
}
