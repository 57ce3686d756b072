//! The read-write lock's names, as Redisson derives them from the lock's: its
//! channel, a reader's timeout keys, and redlease's waiting-writer mark.

use crate::scheme::redisson::{prefix_name, suffix_name};

/// Redisson's channel prefix (`RedissonReadLock.getChannelName`).
const CHANNEL_PREFIX: &str = "redisson_rwlock";

/// Redisson's `prefixName("redisson_rwlock", name)`.
pub(crate) fn channel(name: &str) -> String {
    prefix_name(CHANNEL_PREFIX, name)
}

/// The prefix of a reader's timeout keys (`getReadWriteTimeoutNamePrefix`).
pub(crate) fn timeout_prefix(name: &str, reader: &str) -> String {
    suffix_name(name, &format!("{reader}:rwlock_timeout"))
}

/// The waiting-writer mark of `name`.
pub(crate) fn write_wait(name: &str) -> String {
    suffix_name(name, "redlease:write_wait")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_prefix_and_suffix_rules() {
        assert_eq!(channel("cfg"), "redisson_rwlock:{cfg}");
        assert_eq!(channel("a:{b}"), "redisson_rwlock:a:{b}");
        assert_eq!(timeout_prefix("cfg", "u:1"), "{cfg}:u:1:rwlock_timeout");
        assert_eq!(timeout_prefix("a{b}", "u:1"), "a{b}:u:1:rwlock_timeout");
        assert_eq!(write_wait("cfg"), "{cfg}:redlease:write_wait");
        assert_eq!(suffix_name("cfg", ""), "{cfg}");
    }
}
