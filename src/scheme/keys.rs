//! [`Keys`]: the Redis names that belong to one lock key.

use super::Backend;
use crate::error::{Error, Result};

/// The Redis names that belong to one lock key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// The lock key, with the client's prefix.
    pub(crate) lock: String,
    /// The pub/sub channel a release publishes on.
    pub(crate) channel: String,
    /// How many bytes of `lock` are the client's key prefix.
    pub(crate) prefix: usize,
    /// In a Redis Cluster, the tag of the lock key's slot, which the fence
    /// counter's name carries (set by the cluster topology).
    pub(crate) slot_tag: Option<u32>,
}

impl Keys {
    /// Derives the names for `key` as `backend` stores it, checking it.
    pub(crate) fn new(prefix: &str, key: &str, backend: &dyn Backend) -> Result<Self> {
        let mut keys = Self::plain(prefix, key)?;
        keys.channel = backend.channel(&keys.lock);
        Ok(keys)
    }

    /// The names for `key` as a reader sees them, without a scheme: no
    /// channel. An error for an empty key.
    pub(crate) fn plain(prefix: &str, key: &str) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::Invalid {
                what: "lock key",
                reason: "the key is empty",
            });
        }
        let mut lock = String::with_capacity(prefix.len() + key.len());
        lock.push_str(prefix);
        lock.push_str(key);
        Ok(Self {
            channel: String::new(),
            lock,
            prefix: prefix.len(),
            slot_tag: None,
        })
    }

    /// The names for a Redis Cluster: the fence counter moves into the lock key's
    /// slot, so one script can touch both.
    #[cfg(feature = "cluster")]
    pub(crate) fn in_cluster(mut self) -> Self {
        self.slot_tag = Some(crate::net::slots::tag(crate::net::slots::slot(
            self.lock.as_bytes(),
        )));
        self
    }

    /// The fencing counter: one per key prefix on a node, `<prefix>redlease:fence`,
    /// the one place that names it.
    ///
    /// Every fenced acquire and hand-off under the prefix takes its fence from it
    /// in the same script as the write it fences (`scripts::FENCE`: one more than
    /// the counter, at least the server's clock in µs). Strictly increasing on the
    /// node, it is strictly increasing per key, and the number of counters does not
    /// grow with the number of lock names. It sits under the prefix so that an ACL user
    /// restricted to the prefix's keys (`~lock:*`) may touch it; lock names
    /// starting with `redlease:` are redlease's own under any prefix.
    ///
    /// Redis Cluster needs a script's keys in one slot: there the counter is one
    /// per hash slot, `<prefix>redlease:fence:{t}`, with `t` a short
    /// [tag](crate::net::slots::tag) that hashes to the lock key's slot — at most 16384
    /// counters per prefix, still independent of the number of lock names, and
    /// moved with the slot when the cluster is resharded.
    pub(crate) fn fence(&self) -> String {
        let prefix = &self.lock[..self.prefix];
        let mut name = String::with_capacity(prefix.len() + FENCE.len() + 9);
        name.push_str(prefix);
        name.push_str(FENCE);
        if let Some(tag) = self.slot_tag {
            use std::fmt::Write as _;
            let _ = write!(name, ":{{{tag}}}");
        }
        name
    }
}

/// The fence counter's name after the key prefix.
const FENCE: &str = "redlease:fence";

/// A name next to `key` that Redis Cluster hashes to the same slot: a key with a
/// hash tag keeps it (`a{x}b` → `a{x}b:fence`), any other key becomes the tag
/// (`a` → `{a}:fence`).
///
/// The token release script names the release channel by the same rule (it is
/// not sent the channel when nobody waits): keep the two in step.
pub(crate) fn companion(key: &str, suffix: &str) -> String {
    let mut name = String::with_capacity(key.len() + suffix.len() + 3);
    // A key with a `}` keeps its name: a hash tag then keeps the slot, and a stray
    // `}` cannot be wrapped safely (same node without Cluster).
    let wrap = !key.contains('}');
    if wrap {
        name.push('{');
    }
    name.push_str(key);
    if wrap {
        name.push('}');
    }
    name.push(':');
    name.push_str(suffix);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::TokenBackend;

    fn token() -> TokenBackend {
        TokenBackend::new(crate::owner::ClientId::new().tag())
    }

    #[test]
    fn companions_share_the_cluster_slot() {
        assert_eq!(companion("lock:a", "fence"), "{lock:a}:fence");
        assert_eq!(companion("lock:{a}", "fence"), "lock:{a}:fence");
        assert_eq!(companion("x{}y", "fence"), "x{}y:fence");
        assert_eq!(companion("a}b", "fence"), "a}b:fence");
    }

    #[test]
    fn empty_keys_are_rejected() {
        let token = TokenBackend::new(crate::owner::ClientId::new().tag());
        assert!(matches!(
            Keys::new("p:", "", &token),
            Err(Error::Invalid { .. })
        ));
        let k = Keys::new("p:", "k", &token).unwrap();
        assert_eq!(k.lock, "p:k");
        assert_eq!(k.channel, "{p:k}:released");
    }

    #[test]
    fn one_fence_counter_serves_every_key_under_a_prefix() {
        for key in ["a", "order:999", "user:{42}:invoice"] {
            assert_eq!(
                Keys::new("lock:", key, &token()).unwrap().fence(),
                "lock:redlease:fence"
            );
        }
        assert_eq!(
            Keys::new("", "a", &token()).unwrap().fence(),
            "redlease:fence"
        );
        assert_eq!(
            Keys::new("app:", "a", &token()).unwrap().fence(),
            "app:redlease:fence"
        );
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn in_a_cluster_the_fence_counter_shares_the_lock_keys_slot() {
        use crate::net::slots::slot;
        for key in ["a", "order:999", "user:{42}:invoice", "x}y"] {
            let keys = Keys::new("lock:", key, &token()).unwrap().in_cluster();
            let fence = keys.fence();
            assert!(fence.starts_with("lock:redlease:fence:{"), "{fence}");
            assert_eq!(slot(fence.as_bytes()), slot(keys.lock.as_bytes()));
        }
    }
}
