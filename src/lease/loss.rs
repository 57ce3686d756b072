//! How a holder hears that its lease ended: the reason ([`LossReason`]), the
//! message ([`LeaseLost`]), and the `on_lost` callback queued for the notifier
//! thread ([`Notice`]).

use std::sync::Arc;

/// A callback run when a lease is lost, on the client's notifier thread (or the
/// guard owner's thread once the client is gone).
pub(crate) type LostCallback = Arc<dyn Fn(&LeaseLost) + Send + Sync>;

/// A callback to run and the message to run it with, queued for the notifier.
pub(crate) struct Notice {
    pub(crate) callback: LostCallback,
    pub(crate) msg: LeaseLost,
}

impl Notice {
    /// Runs the callback, catching a panic (logged; the panic hook has printed it).
    pub(crate) fn run(self) {
        let Notice { callback, msg } = self;
        let call = std::panic::AssertUnwindSafe(|| callback(&msg));
        if std::panic::catch_unwind(call).is_err() {
            log::error!("on_lost callback for `{}` panicked", msg.key);
        }
    }
}

/// Why a lease was lost; carried by [`LeaseLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the key gone: it expired, or someone deleted it.
    Expired,
    /// A renewal found another value under the key: someone else holds it now.
    Taken,
    /// Renewals kept failing (Redis unreachable or slow) until the lease's local
    /// validity ran out; with Redlock, a renewal could not reach a majority of the
    /// nodes.
    Unreachable,
    /// The lease reached its `max_hold` or `max_renewals` bound and was left to expire.
    MaxHold,
    /// The lease was not renewed ([`Renewal::None`](crate::Renewal::None)) and its
    /// TTL ran out.
    TtlElapsed,
    /// The client was dropped: nothing renews the lease any more. Unlike the other
    /// reasons this is a warning, not a loss: the lease stays valid, and
    /// [`is_held`](crate::LockGuard::is_held) true, until the guard's `valid_until()`.
    Shutdown,
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) ended the lease while
    /// its guard lived: released in Redis, or, when that release got no answer
    /// before the shutdown's deadline, left to expire with its TTL (no longer
    /// renewed either way). Not counted as a loss in the metrics.
    Released,
    /// The client's liveness session ended
    /// ([`LockClientBuilder::liveness`](crate::LockClientBuilder::liveness)): its
    /// session record was found gone (expired while the client was paused or cut
    /// off, evicted, deleted by hand), or could not be extended before the
    /// liveness ran out. Another client may break the lock from then on.
    SessionEnded,
}

impl LossReason {
    /// The reason's name in metrics' labels.
    pub(super) fn label(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Taken => "taken",
            LossReason::Unreachable => "unreachable",
            LossReason::MaxHold => "max_hold",
            LossReason::TtlElapsed => "ttl_elapsed",
            LossReason::Shutdown => "shutdown",
            LossReason::Released => "released",
            LossReason::SessionEnded => "session_ended",
        }
    }
}

/// The message sent on [`LockGuard::lost`](crate::LockGuard::lost) and passed to the
/// `on_lost` callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseLost {
    /// The lock key, with the client's prefix.
    pub key: String,
    /// Why it was lost.
    pub reason: LossReason,
}
