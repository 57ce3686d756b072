//! [`Plan`]: a lock call's options with the client's defaults filled in.

use std::sync::Arc;
use std::time::Duration;

use crate::client::options::Renewal;
use crate::lease::{LostCallback, Terms};
use crate::scheme::{Backend, Replicas};

/// A lock call's options with the client's defaults filled in.
pub(super) struct Plan {
    pub(super) ttl: Duration,
    pub(super) fence: bool,
    pub(super) renewal: Renewal,
    pub(super) interval: Duration,
    pub(super) max_hold: Option<Duration>,
    pub(super) max_renewals: Option<u32>,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) on_lost: Option<LostCallback>,
    pub(super) replicas: Option<Replicas>,
    /// The minimum hold (checked against the scheme and `max_hold`).
    pub(super) min_hold: Option<Duration>,
    /// Whether its guard's drop queues the release for the I/O thread.
    pub(super) background: bool,
    /// Computed once by [`Plan::with_terms`].
    pub(super) terms: Option<Terms>,
}

impl Plan {
    /// The terms on which a lease of this plan can pass between holders of the
    /// client as it is: renewed, no fence, no hold bound, no minimum hold (it
    /// counts from each holder's own acquisition), no callback.
    pub(super) fn with_terms(mut self) -> Self {
        let plain = self.renewal == Renewal::Auto
            && !self.fence
            && self.max_hold.is_none()
            && self.max_renewals.is_none()
            && self.on_lost.is_none()
            && self.min_hold.is_none()
            && self.backend.hands_over();
        self.terms = plain.then_some(Terms {
            ttl: self.ttl,
            interval: self.interval,
        });
        self
    }

    /// Whether a waiting caller of this plan may be handed a lock by a releasing
    /// guard: a token lock, with no replica confirmation (a hand-off sends no `WAIT`).
    pub(super) fn takes_hand_off(&self) -> bool {
        self.backend.hands_over() && self.replicas.is_none()
    }
}
