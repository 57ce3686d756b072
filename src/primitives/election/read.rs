//! [`Election::leader`]: the key, its TTL and its term record read in one
//! step, and the owner's session record.

use std::time::Duration;

use redis::Value;

use super::{Election, Leader};
use crate::error::{Error, Result};
use crate::owner::{ClientTag, Owner};
use crate::scheme::{ELECTION_SCRIPTS, LEADER, term_key, term_of};

/// What the election key holds, read in one step.
pub(super) enum Read {
    /// No leader.
    Free,
    /// A string: its value, its time left, the term the record gives it.
    Held {
        value: String,
        ttl: Duration,
        term: Option<u64>,
    },
}

impl Election {
    /// The current leader: its term, the time left on its lease and its owner
    /// (host, pid, program, client id, alive) from its client's session record;
    /// `None` when nobody leads. One atomic read of the key, its TTL and its
    /// term record (written by the winning acquire itself, so the term is never
    /// another leader's), then one lookup of the owner's record.
    ///
    /// # Errors
    /// [`Error::WrongFormat`] when the name holds another format, or a token
    /// lock that no campaign took (a plain lock of the name);
    /// [`Error::Redis`] when Redis fails.
    pub fn leader(&self) -> Result<Option<Leader>> {
        match self.read()? {
            Read::Free => Ok(None),
            Read::Held {
                value,
                ttl,
                term: Some(term),
            } => {
                let owner = self.owner(&value)?;
                Ok(Some(Leader::new(self.key(), term, ttl, owner)))
            }
            Read::Held { term: None, .. } => Err(self
                .handle
                .wrong_format("a token lock that no campaign took (a plain lock of the name?)")),
        }
    }

    /// Reads the key, its TTL and its term record in one step.
    pub(super) fn read(&self) -> Result<Read> {
        let key = self.key();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(LEADER.get_hash())
            .arg(2)
            .arg(key)
            .arg(term_key(key));
        let reply = self.handle.query(&ELECTION_SCRIPTS, &cmd)?;
        let Some((value, pttl, record)) = (match parse(reply)? {
            Parsed::Kind(kind) if kind == "none" => None,
            Parsed::Kind(kind) => return Err(self.handle.wrong_format(self.handle.found(&kind))),
            Parsed::String(held) => Some(held),
        }) else {
            return Ok(Read::Free);
        };
        if value.parse::<i64>().is_ok() {
            return Err(self
                .handle
                .wrong_format("a number (a semaphore's count or a timestamp lock?)"));
        }
        Ok(Read::Held {
            term: record.and_then(|r| term_of(&r, &value)),
            ttl: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
            value,
        })
    }

    /// The owner a holder's value names, from its client's session record.
    fn owner(&self, value: &str) -> Result<Owner> {
        let Some(tag) = ClientTag::of_token(value) else {
            return Ok(Owner::None);
        };
        let prefix = &self.handle.client.inner.settings.key_prefix;
        let record = tag.session_key(prefix);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&record);
        let topology = &self.handle.client.inner.hub.topology;
        match topology.query(&record, &[], &cmd) {
            Ok(reply) => Ok(
                redis::from_redis_value(reply).map_or(Owner::Unknown(tag), |fields| {
                    Owner::from_record(tag, &fields)
                }),
            ),
            Err(Error::Redis(f))
                if matches!(
                    f.redis_error().and_then(redis::RedisError::code),
                    Some("WRONGTYPE" | "NOPERM")
                ) =>
            {
                Ok(Owner::Unknown(tag))
            }
            Err(e) => Err(e),
        }
    }
}

/// The [`LEADER`] script's reply: the key's type, or a string's value, PTTL
/// and the term record.
enum Parsed {
    Kind(String),
    String((String, i64, Option<String>)),
}

fn parse(reply: Value) -> redis::RedisResult<Parsed> {
    let reply: Vec<Value> = redis::from_redis_value(reply)?;
    Ok(match &reply[..] {
        [_, value, pttl, record] => Parsed::String((
            redis::from_redis_value_ref(value)?,
            redis::from_redis_value_ref(pttl)?,
            redis::from_redis_value_ref(record)?,
        )),
        [kind, ..] => Parsed::Kind(redis::from_redis_value_ref(kind)?),
        [] => Parsed::Kind("none".into()),
    })
}
