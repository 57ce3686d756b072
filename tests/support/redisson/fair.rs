//! A Redisson client of `RFairLock`, speaking its own scripts on a raw
//! connection (Redisson 3.x `RedissonFairLock`, `lock()` and `unlock()`), for
//! the interop tests; the scripts also make the fair lock benchmark's floor.

use super::super::RedisServer;
pub use super::{LEASE_MS, now_ms, prefix_name};
use super::{eval, owner};

/// `RedissonFairLock.tryLockInnerAsync` (`EVAL_LONG`, what `lock()` sends).
/// KEYS[1] name, KEYS[2] queue, KEYS[3] timeouts; ARGV[1] lease ms, ARGV[2]
/// owner, ARGV[3] thread wait ms, ARGV[4] now (unix ms). Nil or a wait in ms.
pub const LOCK: &str = "while true do \
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0);\
    if firstThreadId2 == false then break;end;\
    local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));\
    if timeout <= tonumber(ARGV[4]) then \
    redis.call('zrem', KEYS[3], firstThreadId2);redis.call('lpop', KEYS[2]);\
    else break;end;end;\
    if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) \
    or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
    redis.call('lpop', KEYS[2]);redis.call('zrem', KEYS[3], ARGV[2]);\
    local keys = redis.call('zrange', KEYS[3], 0, -1);\
    for i = 1, #keys, 1 do redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);end;\
    redis.call('hset', KEYS[1], ARGV[2], 1);redis.call('pexpire', KEYS[1], ARGV[1]);\
    return nil;end;\
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    redis.call('hincrby', KEYS[1], ARGV[2],1);redis.call('pexpire', KEYS[1], ARGV[1]);\
    return nil;end;\
    local timeout = redis.call('zscore', KEYS[3], ARGV[2]);\
    if timeout ~= false then return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]);end;\
    local lastThreadId = redis.call('lindex', KEYS[2], -1);local ttl;\
    if lastThreadId ~= false and lastThreadId ~= ARGV[2] then \
    ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);\
    else ttl = redis.call('pttl', KEYS[1]);end;\
    local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);\
    if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then \
    redis.call('rpush', KEYS[2], ARGV[2]);end;\
    return ttl;";

/// `RedissonFairLock.unlockInnerAsync`. KEYS[1] name, KEYS[2] queue, KEYS[3]
/// timeouts, KEYS[4] channel base; ARGV[1] 0, ARGV[2] lease ms, ARGV[3] owner,
/// ARGV[4] now (unix ms). 1 released, 0 one hold fewer, nil not held.
pub const UNLOCK: &str = "while true do \
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0);\
    if firstThreadId2 == false then break;end; \
    local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));\
    if timeout <= tonumber(ARGV[4]) then \
    redis.call('zrem', KEYS[3], firstThreadId2); redis.call('lpop', KEYS[2]); \
    else break;end; end;\
    if (redis.call('exists', KEYS[1]) == 0) then \
    local nextThreadId = redis.call('lindex', KEYS[2], 0); \
    if nextThreadId ~= false then \
    redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); end; \
    return 1; end;\
    if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; end; \
    redis.call('del', KEYS[1]); \
    local nextThreadId = redis.call('lindex', KEYS[2], 0); \
    if nextThreadId ~= false then \
    redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); end; \
    return 1; ";

/// Redisson's `threadWaitTime` when none is given (5 minutes).
pub const WAIT_MS: u64 = 300_000;

/// `redisson_lock_queue:{name}` and `redisson_lock_timeout:{name}`: the queue
/// and the timeouts of a fair lock.
pub fn queue_and_timeouts(name: &str) -> (String, String) {
    (
        prefix_name("redisson_lock_queue", name),
        prefix_name("redisson_lock_timeout", name),
    )
}

/// A Redisson client's thread on a fair lock: its owner, `<uuid>:1`.
pub struct RedissonFair {
    pub con: redis::Connection,
    pub owner: String,
}

impl RedissonFair {
    pub fn new(server: &RedisServer) -> Self {
        Self {
            con: server.conn(),
            owner: owner(1),
        }
    }

    /// Its own wake-up channel for `name`.
    pub fn channel(&self, name: &str) -> String {
        format!(
            "{}:{}",
            prefix_name("redisson_lock__channel", name),
            self.owner
        )
    }

    /// One attempt of `lock()`: `None` acquired, else queued (a wait in ms).
    pub fn attempt(&mut self, name: &str) -> Option<i64> {
        self.attempt_waiting(name, WAIT_MS)
    }

    /// One attempt of `tryLock(wait, ...)`: Redisson passes the caller's wait
    /// (`wait_ms`) where `lock()` passes its thread wait time.
    pub fn attempt_waiting(&mut self, name: &str, wait_ms: u64) -> Option<i64> {
        let (queue, timeouts) = queue_and_timeouts(name);
        eval(LOCK, &[name, &queue, &timeouts])
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(wait_ms)
            .arg(now_ms())
            .query(&mut self.con)
            .unwrap()
    }

    /// Redisson's `lock()` loop (`RedissonLock.lock`): one attempt; when
    /// queued, it subscribes to its own channel and attempts again after each
    /// wake-up, or when the wait the script returned runs out; after a negative
    /// wait only a wake-up makes it try again (Redisson waits for it without
    /// end; here at most `bound`, then it tries once more). `listen` is a
    /// connection of its own for the subscription. `Err` when it has not the
    /// lock after `bound` in all.
    pub fn lock(
        &mut self,
        listen: &mut redis::Connection,
        name: &str,
        bound: std::time::Duration,
    ) -> Result<(), String> {
        self.lock_telling(listen, name, bound, || {})
    }

    /// [`lock`](Self::lock), calling `waited` each time a wait ends (woken or
    /// run out), before the next attempt.
    pub fn lock_telling(
        &mut self,
        listen: &mut redis::Connection,
        name: &str,
        bound: std::time::Duration,
        mut waited: impl FnMut(),
    ) -> Result<(), String> {
        use std::time::{Duration, Instant};
        let end = Instant::now() + bound;
        if self.attempt(name).is_none() {
            return Ok(());
        }
        let mut sub = listen.as_pubsub();
        sub.subscribe(self.channel(name)).unwrap();
        loop {
            let Some(wait) = self.attempt(name) else {
                return Ok(());
            };
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{} not acquired in {bound:?}", self.owner));
            }
            let wait = match u64::try_from(wait) {
                Ok(ms) => Duration::from_millis(ms.max(1)).min(left),
                Err(_) => left,
            };
            sub.set_read_timeout(Some(wait)).unwrap();
            let _woken = sub.get_message().is_ok();
            waited();
        }
    }

    /// `unlock()`: `Some(1)` released, `None` not held.
    pub fn unlock(&mut self, name: &str) -> Option<i64> {
        let (queue, timeouts) = queue_and_timeouts(name);
        let channel = prefix_name("redisson_lock__channel", name);
        eval(UNLOCK, &[name, &queue, &timeouts, &channel])
            .arg(0)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(now_ms())
            .query(&mut self.con)
            .unwrap()
    }
}
