//! Redis ACL users for the tests, and the rules the guide documents for them
//! (`tests/acl.rs` checks that guide/deployments.md and guide/redisson.md quote
//! exactly these).

use super::RedisServer;

/// The minimal rule for a lock user under the prefix `lock:` (token scheme,
/// fencing, pub/sub wake-ups, bulk renewal, the session record).
pub const LOCK_RULE: &str = "~lock:* &{lock:* &redlease:waiter:* \
    +ping +set +get +del +pttl +pexpire +hset +incr +evalsha +script|load \
    +mget +time +pexpireat +exists \
    +publish +subscribe +unsubscribe +punsubscribe +info";

/// What a lock user needs beside [`LOCK_RULE`] on Valkey 9, whose token lock
/// releases with `DELIFEQ` (without it: the scripts, after one refusal per node).
pub const VALKEY_RULE: &str = "+delifeq";

/// [`LOCK_RULE`], with [`VALKEY_RULE`] where `server` has the conditional
/// commands.
pub fn lock_rule(server: &RedisServer) -> Vec<&'static str> {
    let mut rule: Vec<&str> = LOCK_RULE.split_whitespace().collect();
    if server.has_conditional_commands() {
        rule.push(VALKEY_RULE);
    }
    rule
}

/// What a Redis Cluster user needs beside [`LOCK_RULE`], on every node: the slot
/// map, keys of a slot mid-migration, and sharded release messages.
pub const CLUSTER_RULE: &str =
    "+cluster|slots +asking +command|info +spublish +ssubscribe +sunsubscribe";

/// What a fair lock user needs beside [`LOCK_RULE`].
pub const FAIR_RULE: &str = "~redisson_lock_queue:{lock:* ~redisson_lock_timeout:{lock:* \
    &redisson_lock__channel:{lock:* +exists +hset +hget +hexists +hincrby +hkeys +lindex \
    +lpop +rpush +lrem +llen +zadd +zscore +zrem +type";

/// What a read-write lock user needs beside [`LOCK_RULE`].
pub const RWLOCK_RULE: &str = "~{lock:* &redisson_rwlock:* +exists +hget +hset +hincrby +hdel \
    +hlen +hkeys +hexists +hgetall +type";

/// What a semaphore user needs beside [`LOCK_RULE`].
pub const SEMAPHORE_RULE: &str = "~{lock:* &redisson_sc:{lock:* \
    +type +incrby +decr +decrby +zadd +zrem +zscore +zcard +zcount +zrange +zrangebyscore";

/// Creates (or replaces) the user `name` with `password` and exactly `rules`: each
/// entry one rule or several separated by white space (as the constants above).
pub fn set_user(server: &RedisServer, name: &str, password: &str, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("reset").arg("on");
    cmd.arg(format!(">{password}"));
    for rule in rules {
        cmd.arg(rule.split_whitespace().collect::<Vec<_>>());
    }
    let () = server.query(&cmd);
}

/// The entries of `ACL LOG`: every command, key or channel the server refused.
pub fn refusals(server: &RedisServer) -> Vec<redis::Value> {
    server.query(redis::cmd("ACL").arg("LOG"))
}

/// The rules of `rule` but those in `left_out`.
pub fn without<'a>(rule: &'a str, left_out: &[&str]) -> Vec<&'a str> {
    rule.split_whitespace()
        .filter(|r| !left_out.contains(r))
        .collect()
}
