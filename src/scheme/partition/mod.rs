//! The wire side of partition groups: the group's keys and the scripts a member
//! runs each round. Its API is `primitives/partition/`.
//!
//! Every key of a group `G` sits under the hash tag `{G}`, so one script reaches
//! all of them on one server and in one Redis Cluster slot:
//! - `<prefix>redlease:group:{G}:p:<i>`: partition `i`'s lock, a plain fenced
//!   token lock (taken, renewed and released as any lock is);
//! - `<prefix>redlease:group:{G}:members`: a hash, one field per member id, whose
//!   value is its record: `<expiry ms>\t<host>\t<pid>\t<program>\t<m>\t<held>`
//!   (`m` the number of partitions the member works with), `held`
//!   being `<partition>:<fence>` pairs joined by `,`, then `tag=<client tag>`
//!   (the tag its partitions' tokens carry; in the list, where older readers,
//!   which skip an item without `:`, pass over it, and absent from their
//!   records). The expiry is on the server's clock (`TIME`), written and
//!   compared only by scripts on that server;
//! - `<prefix>redlease:group:{G}:asks`: a hash, one field per partition asked for,
//!   `<member id>\t<deadline ms>` (server clock): the mark its owner sees.
//!
//! Layout: this file is the naming, the calls and the replies; `scripts.rs` the
//! Lua.

use std::time::Duration;

use redis::{RedisResult, Value};

mod scripts;

pub(crate) use scripts::{ASK, CLEAR, FORCE, PARTITION_SCRIPTS, ROUND};

use crate::owner::ClientTag;
use crate::time::ttl_millis;

/// The name (under the client's prefix) of partition `i`'s lock in `group`.
pub(crate) fn partition_name(group: &str, i: u32) -> String {
    format!("redlease:group:{{{group}}}:p:{i}")
}

/// The key of `group`'s member records.
pub(crate) fn members_key(prefix: &str, group: &str) -> String {
    format!("{prefix}redlease:group:{{{group}}}:members")
}

/// The key of `group`'s asks.
pub(crate) fn asks_key(prefix: &str, group: &str) -> String {
    format!("{prefix}redlease:group:{{{group}}}:asks")
}

/// What a round script does to the caller's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Writes (or refreshes) it, and drops expired records and orphaned asks.
    Write,
    /// Deletes it, with the asks it made (the member leaves).
    Leave,
    /// Writes nothing (a reader).
    Read,
}

/// The call of [`ROUND`]: `keys` = members, asks, then every partition's key.
pub(crate) fn round_cmd(
    keys: &[String],
    id: &str,
    ttl: Duration,
    body: &str,
    beat: Beat,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(ROUND.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    let mode = match beat {
        Beat::Write => "beat",
        Beat::Leave => "leave",
        Beat::Read => "read",
    };
    cmd.arg(id).arg(ttl_millis(ttl)).arg(body).arg(mode);
    cmd
}

/// The call of [`ASK`]: asks (keeping an ask already there) for `partitions`.
pub(crate) fn ask_cmd(asks: &str, id: &str, grace: Duration, partitions: &[u32]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(ASK.get_hash())
        .arg(1)
        .arg(asks)
        .arg(id)
        .arg(ttl_millis(grace));
    for p in partitions {
        cmd.arg(*p);
    }
    cmd
}

/// The call of [`CLEAR`]: withdraws the caller's asks for `partitions`.
pub(crate) fn clear_cmd(asks: &str, id: &str, partitions: &[u32]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(CLEAR.get_hash()).arg(1).arg(asks).arg(id);
    for p in partitions {
        cmd.arg(*p);
    }
    cmd
}

/// The call of [`FORCE`]: deletes partition `p`'s lock (`lock`) if the caller's
/// ask for it is past its deadline.
pub(crate) fn force_cmd(asks: &str, lock: &str, id: &str, p: u32) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(FORCE.get_hash())
        .arg(2)
        .arg(asks)
        .arg(lock)
        .arg(id)
        .arg(p);
    cmd
}

/// One member's record as a round read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) id: String,
    /// How long the record lives without another beat.
    pub(crate) ttl: Duration,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) program: String,
    /// The number of partitions it works with.
    pub(crate) partitions: u32,
    /// The partitions it said it held, with their fences.
    pub(crate) held: Vec<(u32, u64)>,
    /// The tag its partitions' tokens carry (`None` from an older version).
    pub(crate) tag: Option<ClientTag>,
}

/// One ask as a round read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) partition: u32,
    pub(crate) by: String,
    /// Time left to its deadline (zero once past).
    pub(crate) left: Duration,
}

/// One partition's lock as a round read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lock {
    /// No key.
    Free,
    /// Held: a member's round reads only that; a reader ([`Beat::Read`]) also
    /// reads what is left of its TTL (`None` for a key without one) and its
    /// value (`None` when not a string).
    Held {
        ttl: Option<Duration>,
        value: Option<String>,
    },
}

impl Lock {
    pub(crate) fn is_free(&self) -> bool {
        matches!(self, Lock::Free)
    }
}

/// What one round read: the live records sorted by id, each partition's lock,
/// and the asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) members: Vec<Record>,
    pub(crate) partitions: Vec<Lock>,
    pub(crate) asks: Vec<Ask>,
}

/// A record's body (everything after the expiry), fields made tab-free.
pub(crate) fn record_body(
    host: &str,
    pid: u32,
    program: &str,
    m: u32,
    held: &[(u32, u64)],
    tag: ClientTag,
) -> String {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    let mut held: Vec<String> = held.iter().map(|(p, f)| format!("{p}:{f}")).collect();
    held.push(format!("{TAG}{tag}"));
    format!(
        "{}\t{pid}\t{}\t{m}\t{}",
        clean(host),
        clean(program),
        held.join(",")
    )
}

/// A [`ROUND`] reply: records, lock TTLs, asks, lock values.
type Reply = (
    Vec<Vec<String>>,
    Vec<i64>,
    Vec<Vec<String>>,
    Vec<Option<String>>,
);

/// The item of a record's `held` list that gives the member's client tag.
const TAG: &str = "tag=";

/// Reads a [`ROUND`] reply for `m` partitions.
///
/// # Errors
/// A reply of another shape.
pub(crate) fn read_view(reply: &Value, m: usize) -> RedisResult<View> {
    let bad = || {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected partition round reply",
        ))
    };
    let (members, ttls, asks, values): Reply = redis::from_redis_value_ref(reply)?;
    if ttls.len() != m || !(values.is_empty() || values.len() == m) {
        return Err(bad());
    }
    let mut records = Vec::with_capacity(members.len());
    for fields in members {
        let [id, left, body] = <[String; 3]>::try_from(fields).map_err(|_| bad())?;
        let mut parts = body.splitn(5, '\t');
        let host = parts.next().unwrap_or_default().to_owned();
        let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let program = parts.next().unwrap_or_default().to_owned();
        let partitions = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        let items = parts.next().unwrap_or_default().split(',');
        let tag = items
            .clone()
            .find_map(|item| ClientTag::of_hex(item.strip_prefix(TAG)?));
        let held = items
            .filter_map(|pair| {
                let (p, f) = pair.split_once(':')?;
                Some((p.parse().ok()?, f.parse().ok()?))
            })
            .collect();
        let left: u64 = left.parse().map_err(|_| bad())?;
        records.push(Record {
            id,
            ttl: Duration::from_millis(left),
            host,
            pid,
            program,
            partitions,
            held,
            tag,
        });
    }
    records.sort_by(|a, b| a.id.cmp(&b.id));
    let mut values = values.into_iter();
    let partitions = ttls
        .into_iter()
        .map(|t| {
            let value = values.next().flatten();
            match t {
                -2 => Lock::Free,
                // No TTL: a member's round (it reads no TTL), or a lock held for good.
                -1 => Lock::Held { ttl: None, value },
                t => Lock::Held {
                    ttl: Some(Duration::from_millis(u64::try_from(t).unwrap_or(0))),
                    value,
                },
            }
        })
        .collect();
    let mut read = Vec::with_capacity(asks.len());
    for fields in asks {
        let [p, by, left] = <[String; 3]>::try_from(fields).map_err(|_| bad())?;
        let (Ok(partition), Ok(left)) = (p.parse::<u32>(), left.parse::<i64>()) else {
            continue;
        };
        let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
        read.push(Ask {
            partition,
            by,
            left,
        });
    }
    Ok(View {
        members: records,
        partitions,
        asks: read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn tag() -> ClientTag {
        ClientTag::of_hex("0123456789abcdef").unwrap()
    }

    #[test]
    fn a_round_reply_reads_as_records_locks_and_asks() {
        let body = record_body("h\tost", 42, "w", 2, &[(3, 17), (5, 9)], tag());
        let token = "rl2:0123456789abcdef:7";
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Array(vec![bulk("b"), bulk("900"), bulk(&body)]),
                // An older version's record: no tag.
                Value::Array(vec![bulk("a"), bulk("100"), bulk("x\t1\ty\t2\t")]),
            ]),
            Value::Array(vec![Value::Int(-2), Value::Int(1500)]),
            Value::Array(vec![Value::Array(vec![bulk("1"), bulk("a"), bulk("-5")])]),
            Value::Array(vec![Value::Nil, bulk(token)]),
        ]);
        let view = read_view(&reply, 2).unwrap();
        assert_eq!(view.members[0].id, "a");
        assert!(view.members[0].held.is_empty());
        assert_eq!(view.members[0].tag, None);
        assert_eq!(view.members[1].host, "h ost");
        assert_eq!(view.members[1].pid, 42);
        assert_eq!(view.members[1].partitions, 2);
        assert_eq!(view.members[1].held, [(3, 17), (5, 9)]);
        assert_eq!(view.members[1].tag, Some(tag()));
        assert_eq!(
            view.partitions,
            [
                Lock::Free,
                Lock::Held {
                    ttl: Some(Duration::from_millis(1500)),
                    value: Some(token.into())
                }
            ]
        );
        assert_eq!(
            view.asks,
            [Ask {
                partition: 1,
                by: "a".into(),
                left: Duration::ZERO
            }]
        );
        assert!(read_view(&reply, 3).is_err());
    }

    #[test]
    fn a_members_round_reads_held_or_free_and_no_values() {
        let reply = Value::Array(vec![
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(-1), Value::Int(-2)]),
            Value::Array(vec![]),
            Value::Array(vec![]),
        ]);
        let view = read_view(&reply, 2).unwrap();
        let held = Lock::Held {
            ttl: None,
            value: None,
        };
        assert_eq!(view.partitions, [held, Lock::Free]);
    }

    #[test]
    fn an_older_reader_skips_the_tag_in_a_records_held_list() {
        let body = record_body("h", 1, "w", 4, &[(3, 17)], tag());
        let held = body.rsplit('\t').next().unwrap();
        // What an older version's `read_view` keeps of the list.
        let pairs: Vec<(u32, u64)> = held
            .split(',')
            .filter_map(|pair| {
                let (p, f) = pair.split_once(':')?;
                Some((p.parse().ok()?, f.parse().ok()?))
            })
            .collect();
        assert_eq!(pairs, [(3, 17)]);
        assert_eq!(held, "3:17,tag=0123456789abcdef");
    }

    #[test]
    fn every_key_of_a_group_is_under_its_tag() {
        assert_eq!(partition_name("g", 7), "redlease:group:{g}:p:7");
        assert_eq!(members_key("l:", "g"), "l:redlease:group:{g}:members");
        assert_eq!(asks_key("l:", "g"), "l:redlease:group:{g}:asks");
    }
}
