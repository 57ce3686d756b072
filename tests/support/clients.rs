//! Clients the several-names tests (`lock_all`, `lock_any`) build alike: keys under
//! `lock:`, on one server, a Redlock quorum or a Redis Cluster.
use std::time::Duration;

use redlease::LockClient;

use super::{Masters, RedisServer};

/// A client on `server` with its keys under `lock:`.
pub fn prefixed(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .build()
        .unwrap()
}

/// A client whose waits poll only every 30 s: only a release message (or a
/// holder's TTL) wakes them sooner.
pub fn polling_rarely(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .key_prefix("lock:")
        .backoff(Duration::from_secs(30), Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Two independent Redlock clients on `masters`, keys under `lock:`.
pub fn redlock_pair(masters: &Masters) -> (LockClient, LockClient) {
    let build = || {
        LockClient::redlock(masters.urls())
            .key_prefix("lock:")
            .build()
            .unwrap()
    };
    (build(), build())
}

/// Two independent cluster clients on `cluster`, keys under `lock:`.
#[cfg(feature = "cluster")]
pub fn cluster_pair(cluster: &super::cluster::Cluster) -> (LockClient, LockClient) {
    (cluster.client(), cluster.client())
}

/// Whether a waiter has marked the token stored at `key` (a trailing `+`) on
/// any of `masters`.
pub fn marked_on_any(masters: &Masters, key: &str) -> bool {
    masters
        .servers
        .iter()
        .any(|m| m.value(key).is_some_and(|v| v.ends_with('+')))
}
