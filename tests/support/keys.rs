//! One key read (or set) as the tests do: its value, whether it is there, its
//! `PTTL`, and a channel's subscribers, each on a new connection of the server's.

use std::time::Duration;

use super::RedisServer;

impl RedisServer {
    /// `GET key`: its value, `None` if absent.
    pub fn value(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key))
    }

    /// `SET key value`, without an expiry.
    pub fn set(&self, key: &str, value: &str) {
        let () = self.query(redis::cmd("SET").arg(key).arg(value));
    }

    /// `SET key value PX ttl`: the key held by another client for `ttl`.
    pub fn set_for(&self, key: &str, value: &str, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap();
        let () = self.query(redis::cmd("SET").arg(key).arg(value).arg("PX").arg(ms));
    }

    /// `DEL key`.
    pub fn del(&self, key: &str) {
        let _: i64 = self.query(redis::cmd("DEL").arg(key));
    }

    /// `EXISTS key`.
    pub fn exists(&self, key: &str) -> bool {
        self.query::<i64>(redis::cmd("EXISTS").arg(key)) == 1
    }

    /// `PTTL key`: milliseconds left, -1 without an expiry, -2 if absent.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key))
    }

    /// `PUBSUB NUMSUB channel`: the clients subscribed to `channel`.
    pub fn subscribers(&self, channel: &str) -> i64 {
        let (_, n): (String, i64) = self.query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
        n
    }
}
