//! Reading a session record: one small hash per client,
//! `<prefix>redlease:session:<tag>` (`write.rs` keeps it).
//!
//! Fields: `host`, `pid`, `program`, `started` (unix ms), `version`
//! (`rl1/<crate version>`: the record's format, then the writer's version) and
//! `client_id` (the client's UUID). A reader accepts a record only in format `rl1`
//! whose `client_id` has the tag it looked up, with every field readable.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ClientTag;

/// The record format a reader understands; the `version` field starts with it.
pub(super) const FORMAT: &str = "rl1/";

/// A live redlease client, as its session record describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    tag: ClientTag,
    host: String,
    pid: u32,
    program: String,
    client_id: String,
    started: SystemTime,
    version: String,
    liveness: Option<Duration>,
}

impl Session {
    /// The host name of the client's machine.
    pub fn host(&self) -> &str {
        &self.host
    }
    /// The client's process id on its host.
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// The client's program: the file name of its executable.
    pub fn program(&self) -> &str {
        &self.program
    }
    /// The client's UUID (its tag is the first 16 hex digits).
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
    /// The client's tag.
    pub fn tag(&self) -> ClientTag {
        self.tag
    }
    /// When the client was built, by its machine's clock.
    pub fn started(&self) -> SystemTime {
        self.started
    }
    /// The redlease version that wrote the record.
    pub fn version(&self) -> &str {
        &self.version
    }
    /// The liveness the client declared
    /// ([`LockClientBuilder::liveness`](crate::LockClientBuilder::liveness)):
    /// its locks may be broken once this record is gone. `None` for a client
    /// without liveness, whose locks stay until their own TTL.
    pub fn liveness(&self) -> Option<Duration> {
        self.liveness
    }

    /// The session `fields` describe, if they are a whole record of this format
    /// for `tag`.
    pub(super) fn parse(tag: ClientTag, fields: &HashMap<String, String>) -> Option<Self> {
        let field = |name: &str| fields.get(name).map(String::as_str);
        let version = field("version")?.strip_prefix(FORMAT)?;
        let client_id = field("client_id")?;
        let id = uuid::Uuid::try_parse(client_id).ok()?;
        if ClientTag::of_uuid(&id) != tag {
            return None;
        }
        let started = field("started")?.parse::<u64>().ok()?;
        Some(Self {
            tag,
            host: field("host")?.to_owned(),
            pid: field("pid")?.parse().ok()?,
            program: field("program")?.to_owned(),
            client_id: id.hyphenated().to_string(),
            started: UNIX_EPOCH.checked_add(Duration::from_millis(started))?,
            version: version.to_owned(),
            liveness: match field("liveness") {
                Some(ms) => Some(Duration::from_millis(ms.parse().ok()?)),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's UUID (`write::ClientId` without the import, which would make
    /// the two files import each other).
    struct ClientId(uuid::Uuid);

    impl ClientId {
        fn new() -> Self {
            Self(uuid::Uuid::new_v4())
        }
        fn tag(&self) -> ClientTag {
            ClientTag::of_uuid(&self.0)
        }
        fn hyphenated(&self) -> String {
            self.0.hyphenated().to_string()
        }
    }

    fn record(id: &ClientId) -> HashMap<String, String> {
        let pairs = [
            ("host", "box"),
            ("pid", "42"),
            ("program", "worker"),
            ("started", "1700000000000"),
            ("version", "rl1/0.1.0"),
        ];
        let mut map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        map.insert("client_id".into(), id.hyphenated());
        map
    }

    #[test]
    fn a_whole_record_of_this_format_is_a_session_and_nothing_else_is() {
        let id = ClientId::new();
        let s = Session::parse(id.tag(), &record(&id)).unwrap();
        assert_eq!((s.host(), s.pid(), s.program()), ("box", 42, "worker"));
        assert_eq!(s.client_id(), id.hyphenated());
        assert_eq!(s.version(), "0.1.0");
        let other = ClientId::new();
        assert!(Session::parse(other.tag(), &record(&id)).is_none(), "tag");
        for (field, bad) in [
            ("version", "rl2/9.0.0"),
            ("version", "0.1.0"),
            ("pid", "-1"),
            ("pid", "x"),
            ("started", "soon"),
            ("client_id", "nobody"),
        ] {
            let mut r = record(&id);
            r.insert(field.into(), bad.into());
            assert!(Session::parse(id.tag(), &r).is_none(), "{field}={bad}");
        }
        let mut r = record(&id);
        r.remove("host");
        assert!(Session::parse(id.tag(), &r).is_none(), "missing host");
    }
}
