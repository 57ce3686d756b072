//! A Redisson client of `RReadWriteLock`, speaking its own scripts on a raw
//! connection (Redisson 3.2x+, `RedissonReadLock` / `RedissonWriteLock`, with
//! their unlock latch), for the interop tests; the scripts also make the
//! read-write lock benchmark's floor.

use std::time::{Duration, Instant};

use super::super::RedisServer;
use super::{eval, prefix_name, suffix_name};

/// `RedissonReadLock.tryLockInnerAsync`. KEYS[1] name, KEYS[2] timeout prefix;
/// ARGV[1] lease ms, ARGV[2] reader field, ARGV[3] write field. Nil or PTTL.
pub const READ_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
      redis.call('hset', KEYS[1], 'mode', 'read'); \
      redis.call('hset', KEYS[1], ARGV[2], 1); \
      redis.call('set', KEYS[2] .. ':1', 1); \
      redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
      redis.call('pexpire', KEYS[1], ARGV[1]); \
      return nil; \
    end; \
    if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
      local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
      local key = KEYS[2] .. ':' .. ind;\
      redis.call('set', key, 1); \
      redis.call('pexpire', key, ARGV[1]); \
      local remainTime = redis.call('pttl', KEYS[1]); \
      redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
      return nil; \
    end;\
    return redis.call('pttl', KEYS[1]);";

/// `RedissonReadLock.unlockInnerAsync`. KEYS[1] name, KEYS[2] channel, KEYS[3]
/// timeout prefix, KEYS[4] key prefix, KEYS[5] unlock latch; ARGV[1] 0
/// (`UNLOCK_MESSAGE`), ARGV[2] reader field, ARGV[3] publish command, ARGV[4]
/// latch ms.
pub const READ_UNLOCK: &str = "local val = redis.call('get', KEYS[5]); \
    if val ~= false then return tonumber(val);end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
      redis.call(ARGV[3], KEYS[2], ARGV[1]); \
      redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
      return 1; \
    end; \
    local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
    if (lockExists == 0) then return nil;end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
    if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;\
    redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
    if (redis.call('hlen', KEYS[1]) > 1) then \
      local maxRemainTime = -3; \
      local keys = redis.call('hkeys', KEYS[1]); \
      for n, key in ipairs(keys) do \
        counter = tonumber(redis.call('hget', KEYS[1], key)); \
        if type(counter) == 'number' then \
          for i=counter, 1, -1 do \
            local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
            maxRemainTime = math.max(remainTime, maxRemainTime);\
          end; \
        end; \
      end; \
      if maxRemainTime > 0 then \
        redis.call('pexpire', KEYS[1], maxRemainTime); \
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
        return 0; \
      end;\
      if mode == 'write' then \
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
        return 0;\
      end; \
    end; \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
    return 1; ";

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS[1] name; ARGV[1] lease ms,
/// ARGV[2] write field. Nil or PTTL.
pub const WRITE_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
      redis.call('hset', KEYS[1], 'mode', 'write'); \
      redis.call('hset', KEYS[1], ARGV[2], 1); \
      redis.call('pexpire', KEYS[1], ARGV[1]); \
      return nil; \
    end; \
    if (mode == 'write') then \
      if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
        redis.call('hincrby', KEYS[1], ARGV[2], 1); \
        local currentExpire = redis.call('pttl', KEYS[1]); \
        redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
        return nil; \
      end; \
    end;\
    return redis.call('pttl', KEYS[1]);";

/// `RedissonWriteLock.unlockInnerAsync`. KEYS[1] name, KEYS[2] channel, KEYS[3]
/// unlock latch; ARGV[1] 1 (`READ_UNLOCK_MESSAGE`), ARGV[2] lease ms, ARGV[3]
/// write field, ARGV[4] publish command, ARGV[5] latch ms.
pub const WRITE_UNLOCK: &str = "local val = redis.call('get', KEYS[3]); \
    if val ~= false then return tonumber(val);end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
      redis.call(ARGV[4], KEYS[2], ARGV[1]); \
      redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
      return 1; \
    end;\
    if (mode == 'write') then \
      local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
      if (lockExists == 0) then return nil;\
      else \
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
        if (counter > 0) then \
          redis.call('pexpire', KEYS[1], ARGV[2]); \
          redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
          return 0; \
        else \
          redis.call('hdel', KEYS[1], ARGV[3]); \
          if (redis.call('hlen', KEYS[1]) == 1) then \
            redis.call('del', KEYS[1]); \
            redis.call(ARGV[4], KEYS[2], ARGV[1]); \
          else \
            redis.call('hset', KEYS[1], 'mode', 'read'); \
          end; \
          redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
          return 1; \
        end; \
      end; \
    end; \
    return nil;";

/// `redisson_rwlock:{name}`.
pub fn channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// A fresh `redisson_unlock_latch:{name}:<uuid>` (`getUnlockLatchName`).
pub fn unlock_latch(name: &str) -> String {
    format!(
        "{}:{}",
        prefix_name("redisson_unlock_latch", name),
        uuid::Uuid::new_v4()
    )
}

/// `{name}:<field>:rwlock_timeout` (`getReadWriteTimeoutNamePrefix`).
pub fn timeout_prefix(name: &str, field: &str) -> String {
    suffix_name(name, &format!("{field}:rwlock_timeout"))
}

/// One Redisson client (`uuid`) and thread (`thread`) of one read-write lock,
/// on its own connection.
pub struct RedissonRwLock {
    pub con: redis::Connection,
    pub name: String,
    pub field: String,
}

impl RedissonRwLock {
    pub fn new(server: &RedisServer, name: &str, thread: u64) -> Self {
        Self {
            con: server.conn(),
            name: name.to_owned(),
            field: super::owner(thread),
        }
    }

    fn write_field(&self) -> String {
        format!("{}:write", self.field)
    }

    /// `readLock().tryLock(0, lease)`: `None` when held, else the PTTL.
    pub fn read_lock(&mut self, lease_ms: u64) -> Option<i64> {
        let prefix = timeout_prefix(&self.name, &self.field);
        eval(READ_LOCK, &[&self.name, &prefix])
            .arg(lease_ms)
            .arg(&self.field)
            .arg(self.write_field())
            .query(&mut self.con)
            .unwrap()
    }

    /// `readLock().unlock()`: Redisson's reply (1 deleted and published, 0 left
    /// to other holders, nil not held).
    pub fn read_unlock(&mut self) -> Option<i64> {
        let latch = unlock_latch(&self.name);
        let prefix = timeout_prefix(&self.name, &self.field);
        let key_prefix = prefix
            .split(&format!(":{}", self.field))
            .next()
            .unwrap()
            .to_owned();
        let channel = channel(&self.name);
        eval(
            READ_UNLOCK,
            &[&self.name, &channel, &prefix, &key_prefix, &latch],
        )
        .arg(0)
        .arg(&self.field)
        .arg("publish")
        .arg(5000)
        .query(&mut self.con)
        .unwrap()
    }

    /// `writeLock().tryLock(0, lease)`: `None` when held, else the PTTL.
    pub fn write_lock(&mut self, lease_ms: u64) -> Option<i64> {
        eval(WRITE_LOCK, &[&self.name])
            .arg(lease_ms)
            .arg(self.write_field())
            .query(&mut self.con)
            .unwrap()
    }

    /// `writeLock().unlock()`: Redisson's reply (1 released, 0 one hold fewer,
    /// nil not held).
    pub fn write_unlock(&mut self) -> Option<i64> {
        let (channel, latch) = (channel(&self.name), unlock_latch(&self.name));
        eval(WRITE_UNLOCK, &[&self.name, &channel, &latch])
            .arg(1)
            .arg(30_000)
            .arg(self.write_field())
            .arg("publish")
            .arg(5000)
            .query(&mut self.con)
            .unwrap()
    }

    /// `readLock().lock()` (`RedissonLock.lock`): see [`lock_loop`](Self::lock_loop).
    pub fn read(&mut self, listen: &mut redis::Connection, lease_ms: u64, bound: Duration) -> bool {
        self.lock_loop(listen, bound, |l| l.read_lock(lease_ms))
    }

    /// Redisson's `lock()` loop: one attempt; when busy, it subscribes to the
    /// lock's channel and attempts again after each message, or when the PTTL
    /// the script returned runs out (Redisson waits without end; here at most
    /// `bound` in all). `listen` is a connection of its own for the
    /// subscription. `false` when it has not the lock after `bound`.
    fn lock_loop(
        &mut self,
        listen: &mut redis::Connection,
        bound: Duration,
        mut attempt: impl FnMut(&mut Self) -> Option<i64>,
    ) -> bool {
        let end = Instant::now() + bound;
        if attempt(self).is_none() {
            return true;
        }
        let mut sub = listen.as_pubsub();
        sub.subscribe(channel(&self.name)).unwrap();
        loop {
            let Some(ttl) = attempt(self) else {
                return true;
            };
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait =
                u64::try_from(ttl).map_or(left, |ms| Duration::from_millis(ms.max(1)).min(left));
            sub.set_read_timeout(Some(wait)).unwrap();
            let _woken = sub.get_message().is_ok();
        }
    }
}

/// A Redisson client's thread looping on `name` until `end` on
/// `readLock().lock()` (a reader, each wait bounded by 3 s) or on
/// `writeLock().tryLock()` (a writer: one attempt), each section a hold of
/// `hold`, each step followed by a pause drawn evenly from `pause` (a pseudo-random
/// sequence seeded by the clock, so that two such loops cannot stay in one phase for
/// long); returns its sections.
pub fn sections(
    server: &RedisServer,
    name: &str,
    write: bool,
    hold: Duration,
    pause: std::ops::RangeInclusive<Duration>,
    end: Instant,
) -> usize {
    let micros = |d: &Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let (low, high) = (micros(pause.start()), micros(pause.end()));
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |t| u64::from(t.subsec_nanos()) | 1);
    let mut lock = RedissonRwLock::new(server, name, 1);
    let mut listen = server.conn();
    let mut n = 0;
    let bound = Duration::from_secs(3);
    while Instant::now() < end {
        let got = if write {
            lock.write_lock(30_000).is_none()
        } else {
            lock.read(&mut listen, 30_000, bound)
        };
        if got {
            n += 1;
            std::thread::sleep(hold);
            let released = if write {
                lock.write_unlock()
            } else {
                lock.read_unlock()
            };
            assert!(released.is_some(), "Redisson held it");
        }
        // xorshift64: enough to spread pauses; no statistics rest on it.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let spread = high.saturating_sub(low) + 1;
        std::thread::sleep(Duration::from_micros(low + seed % spread));
    }
    n
}
