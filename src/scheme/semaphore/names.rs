//! The semaphore's names, as Redisson derives them from the semaphore's, and its
//! permit ids as the expiry set stores them.

use redis::RedisResult;

use crate::scheme::redisson::{prefix_name, suffix_name};

/// Redisson's channel prefix (`RedissonPermitExpirableSemaphore.channelName`).
const CHANNEL_PREFIX: &str = "redisson_sc";

/// Redisson's `prefixName("redisson_sc", name)`: the name in braces (its own hash
/// tag), or as it is when it holds a `{`.
pub(crate) fn channel(name: &str) -> String {
    prefix_name(CHANNEL_PREFIX, name)
}

/// Redisson's `suffixName(name, "timeout")`: the permits' expiry set.
pub(crate) fn timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// A permit id's 16 bytes, as the expiry set stores them (Redisson's
/// `decodeHexDump`); an error for anything but 32 hex digits.
pub(crate) fn id_bytes(id: &str) -> RedisResult<[u8; 16]> {
    let parsed = (id.len() == 32)
        .then(|| uuid::Uuid::try_parse(id).ok())
        .flatten();
    parsed.map(|u| *u.as_bytes()).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "a permit id is 32 hex digits",
            id.to_owned(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_prefix_and_suffix_rules() {
        assert_eq!(channel("jobs"), "redisson_sc:{jobs}");
        assert_eq!(channel("a:{b}"), "redisson_sc:a:{b}");
        assert_eq!(timeouts("jobs"), "{jobs}:timeout");
        assert_eq!(timeouts("a:{b}"), "a:{b}:timeout");
    }
}
