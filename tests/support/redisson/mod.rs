//! Redisson clients speaking Redisson's own Lua scripts on raw connections: the
//! oracle of the interop tests, and the floor of the benchmarks that compare
//! redlease with Redisson.
//!
//! Nothing here imports redlease: the scripts, key names and owner ids are
//! Redisson's, written out from Redisson's sources, so that a test comparing the
//! two can fail when redlease drifts from them.
//!
//! Layout: `rlock.rs` (`RLock`), `fair.rs` (`RFairLock`), `rwlock.rs`
//! (`RReadWriteLock`), `semaphore.rs` (`RPermitExpirableSemaphore`); this file
//! holds what they share: Redisson's naming rules, its clock, owner ids and the
//! `EVAL` call.

pub mod fair;
pub mod rlock;
pub mod rwlock;
pub mod semaphore;

use std::time::{SystemTime, UNIX_EPOCH};

/// Redisson's lease time when none is given (`lockWatchdogTimeout`).
pub const LEASE_MS: u64 = 30_000;

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name` when
/// the name already has a hash tag.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)`: `{name}:suffix`, or `name:suffix` when
/// the name already has a hash tag.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The current unix time in ms, as Redisson passes it to its scripts.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}

/// A new Redisson client's owner id for one of its threads: `<uuid>:<thread>`.
pub fn owner(thread: u64) -> String {
    format!("{}:{thread}", uuid::Uuid::new_v4())
}

/// `EVAL script <number of keys> keys…`: the caller adds the script's
/// arguments and sends it.
pub fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys);
    cmd
}
