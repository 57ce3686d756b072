//! One thread of a Redisson client, speaking `RLock`'s own scripts on a raw
//! connection, for the interop tests; the scripts also make the benchmark's floor.

use super::super::RedisServer;
use super::{LEASE_MS, eval, owner, prefix_name};

/// Redisson 3.19+ `RedissonLock.tryLockInnerAsync`. KEYS[1] lock; ARGV[1] lease ms,
/// ARGV[2] `<uuid>:<thread id>`. Nil when acquired, else the holder's PTTL.
pub const TRY_LOCK: &str = "if ((redis.call('exists', KEYS[1]) == 0) or \
    (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; end; return redis.call('pttl', KEYS[1]);";

/// Redisson 3.x `RedissonLock.unlockInnerAsync` (before the 3.24 unlock latch).
/// KEYS[1] lock, KEYS[2] channel; ARGV[1] unlock message, ARGV[2] lease ms, ARGV[3]
/// owner. 1 released, 0 one hold fewer, nil not held by this owner.
pub const UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else \
    redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; \
    return nil;";

/// Redisson's unlock channel for `key` (`prefixName("redisson_lock__channel", key)`).
pub fn channel(key: &str) -> String {
    prefix_name("redisson_lock__channel", key)
}

/// A Redisson client's thread: its owner field, `<uuid>:1`, on its own connection.
pub struct Redisson {
    pub con: redis::Connection,
    pub owner: String,
}

impl Redisson {
    pub fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            owner: owner(1),
        }
    }

    /// Redisson's `tryLock()` attempt (`EVAL`): `None` when acquired, else the
    /// holder's remaining ms.
    pub fn try_lock(&mut self, key: &str) -> Option<i64> {
        eval(TRY_LOCK, &[key])
            .arg(LEASE_MS)
            .arg(&self.owner)
            .query(&mut self.con)
            .unwrap()
    }

    /// Redisson's `unlock()` (`EVAL`): `Some(1)` released (and `0` published),
    /// `Some(0)` one hold fewer, `None` not held by this owner.
    pub fn unlock(&mut self, key: &str) -> Option<i64> {
        eval(UNLOCK, &[key, &channel(key)])
            .arg(0)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .query(&mut self.con)
            .unwrap()
    }
}
