//! A Redisson client of `RPermitExpirableSemaphore`, speaking its own scripts on a
//! raw connection (current Redisson 3.x, permit ids sent as 16 raw bytes), for the
//! interop tests; the scripts also make the semaphore benchmark's floor.

use super::super::RedisServer;
pub use super::now_ms;
use super::{eval, prefix_name, suffix_name};

/// `tryAcquireAsync(ids, timeoutDate)`. KEYS[1] name, KEYS[2] timeouts, KEYS[3]
/// channel; ARGV[1] permits, ARGV[2] expiry, ARGV[3] now, ARGV[4] no-lease score,
/// ARGV[5] publish command, ARGV[6..] ids. `OK`, `:<first expiry>` or nil.
pub const TRY_ACQUIRE: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;end; \
    local value = redis.call('get', KEYS[1]); \
    if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then \
    redis.call('decrby', KEYS[1], ARGV[1]); \
    for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end; \
    local ttl = redis.call('pttl', KEYS[1]); \
    if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; \
    return 'OK'; end; \
    local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); \
    if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); end \
    return nil;";

/// `tryReleaseAsync(permitId)`. KEYS[1] name, KEYS[2] channel, KEYS[3] timeouts;
/// ARGV[1] id, ARGV[2] 1, ARGV[3] now, ARGV[4] publish command. 1 released, 0 not.
pub const TRY_RELEASE: &str = "local expire = redis.call('zscore', KEYS[3], ARGV[1]);\
    local removed = redis.call('zrem', KEYS[3], ARGV[1]);\
    if tonumber(removed) ~= 1 then return 0;end;\
    local value = redis.call('incrby', KEYS[1], ARGV[2]); \
    redis.call(ARGV[4], KEYS[2], value); \
    if tonumber(expire) <= tonumber(ARGV[3]) then return 0;end;\
    return 1;";

/// `tryReleaseAsync(permitsIds)`. KEYS[1] name, KEYS[2] channel, KEYS[3] timeouts;
/// ARGV[1] the number of ids, ARGV[2] now, ARGV[3] publish command, ARGV[4..] ids.
/// The permits removed (0, and nothing done, when one is gone or expired).
pub const TRY_RELEASE_MANY: &str = "for i = 4, #ARGV, 1 do \
    local expire = redis.call('zscore', KEYS[3], ARGV[i]);\
    if expire== false or tonumber(expire) <= tonumber(ARGV[2]) then return 0; end; end; \
    local expiredIds = redis.call('zrangebyscore', KEYS[3], 0, ARGV[2], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[3], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[3], KEYS[2], value); end; end; \
    local keys = {}; for i = 4, #ARGV, 1 do table.insert(keys, ARGV[i]); end; \
    local removed = redis.call('zrem', KEYS[3], unpack(keys)); \
    redis.call('incrby', KEYS[1], removed); \
    redis.call(ARGV[3], KEYS[2], removed); \
    return removed;";

/// `trySetPermitsAsync(permits)`. KEYS[1] name, KEYS[2] channel; ARGV[1] permits,
/// ARGV[2] publish command. 1 set, 0 existed.
pub const TRY_SET_PERMITS: &str = "local value = redis.call('get', KEYS[1]); \
    if (value == false) then redis.call('set', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1;end;return 0;";

/// Redisson's score for a permit without lease.
pub const NO_LEASE: u64 = 922_337_203_685_477;

/// `redisson_sc:{name}` (`prefixName`).
pub fn channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

/// `{name}:timeout` (`suffixName`).
pub fn timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// Redisson's `generateId()`: 16 random bytes, in hex.
pub fn generate_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn bytes(id: &str) -> Vec<u8> {
    uuid::Uuid::try_parse(id).unwrap().as_bytes().to_vec()
}

/// One Redisson client of one semaphore, on its own connection.
pub struct RedissonSemaphore {
    pub con: redis::Connection,
    pub name: String,
}

impl RedissonSemaphore {
    pub fn new(server: &RedisServer, name: &str) -> Self {
        Self {
            con: server.conn(),
            name: name.to_owned(),
        }
    }

    /// `tryAcquire(-1, lease)` for one permit (`lease_ms` None: no lease): the
    /// permit id, or the raw reply (`:<expiry>` or nil) when none was free.
    pub fn try_acquire(&mut self, lease_ms: Option<u64>) -> Result<String, Option<String>> {
        let id = generate_id();
        let now = now_ms();
        let (timeouts, channel) = (timeouts(&self.name), channel(&self.name));
        let reply: Option<String> = eval(TRY_ACQUIRE, &[&self.name, &timeouts, &channel])
            .arg(1)
            .arg(lease_ms.map_or(NO_LEASE, |l| now + l))
            .arg(now)
            .arg(NO_LEASE)
            .arg("publish")
            .arg(bytes(&id))
            .query(&mut self.con)
            .unwrap();
        match reply.as_deref() {
            Some("OK") => Ok(id),
            _ => Err(reply),
        }
    }

    /// `tryAcquire(permits, -1, lease)`: `permits` ids written with one score,
    /// or the raw reply when fewer were free.
    pub fn try_acquire_many(
        &mut self,
        permits: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<String>, Option<String>> {
        let ids: Vec<String> = (0..permits).map(|_| generate_id()).collect();
        let now = now_ms();
        let (timeouts, channel) = (timeouts(&self.name), channel(&self.name));
        let mut cmd = eval(TRY_ACQUIRE, &[&self.name, &timeouts, &channel]);
        cmd.arg(permits)
            .arg(lease_ms.map_or(NO_LEASE, |l| now + l))
            .arg(now)
            .arg(NO_LEASE)
            .arg("publish");
        for id in &ids {
            cmd.arg(bytes(id));
        }
        let reply: Option<String> = cmd.query(&mut self.con).unwrap();
        match reply.as_deref() {
            Some("OK") => Ok(ids),
            _ => Err(reply),
        }
    }

    /// `tryRelease(permitsIds)`: the permits released.
    pub fn try_release_many(&mut self, ids: &[&str]) -> i64 {
        let (channel, timeouts) = (channel(&self.name), timeouts(&self.name));
        let mut cmd = eval(TRY_RELEASE_MANY, &[&self.name, &channel, &timeouts]);
        cmd.arg(ids.len()).arg(now_ms()).arg("publish");
        for id in ids {
            cmd.arg(bytes(id));
        }
        cmd.query(&mut self.con).unwrap()
    }

    /// `tryRelease(permitId)`: whether it was held.
    pub fn try_release(&mut self, id: &str) -> bool {
        let (channel, timeouts) = (channel(&self.name), timeouts(&self.name));
        let n: i64 = eval(TRY_RELEASE, &[&self.name, &channel, &timeouts])
            .arg(bytes(id))
            .arg(1)
            .arg(now_ms())
            .arg("publish")
            .query(&mut self.con)
            .unwrap();
        n == 1
    }

    /// `trySetPermits(permits)`: whether it created the semaphore.
    pub fn try_set_permits(&mut self, permits: u32) -> bool {
        let channel = channel(&self.name);
        let n: i64 = eval(TRY_SET_PERMITS, &[&self.name, &channel])
            .arg(permits)
            .arg("publish")
            .query(&mut self.con)
            .unwrap();
        n == 1
    }
}
