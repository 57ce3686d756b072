//! The session record: one small hash per client, `<prefix>redlease:session:<tag>`,
//! written at `build()` and refreshed by the renewal thread with a 10 s TTL.
//!
//! Fields: `host`, `pid`, `program`, `started` (unix ms), `version`
//! (`rl1/<crate version>`: the record's format, then the writer's version) and
//! `client_id` (the client's UUID). A reader accepts a record only in format `rl1`
//! whose `client_id` has the tag it looked up, with every field readable.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ClientTag;

/// The record format a reader understands; the `version` field starts with it.
const FORMAT: &str = "rl1/";

/// How long a record outlives its last refresh.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(10);

/// How often the renewal thread rewrites the record: three tries per TTL.
pub(crate) const SESSION_REFRESH: Duration = Duration::from_secs(3);

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
        })
    }
}

/// A client's identity: its UUID and the tag every value it writes carries.
#[derive(Debug, Clone)]
pub(crate) struct ClientId {
    id: uuid::Uuid,
    tag: ClientTag,
}

impl ClientId {
    /// A new client's identity: a random UUID v4.
    pub(crate) fn new() -> Self {
        let id = uuid::Uuid::new_v4();
        Self {
            tag: ClientTag::of_uuid(&id),
            id,
        }
    }
    /// The tag.
    pub(crate) fn tag(&self) -> ClientTag {
        self.tag
    }
    /// The UUID, hyphenated: the first half of a Redisson owner field.
    pub(crate) fn hyphenated(&self) -> String {
        self.id.hyphenated().to_string()
    }
}

/// The write that keeps a client's session record, sent at `build()` and then
/// every [`SESSION_REFRESH`] by the renewal thread: `HSET` of every field and
/// `PEXPIRE`, pipelined (one write, two replies). Not `MULTI`: a user may lack it.
/// Not a script: a renewal is the only `EVALSHA` a client sends on its own.
/// When the pair fails (an ACL without `PEXPIRE`), a `DEL` follows, so that no
/// record is left without a TTL to outlive its client.
#[derive(Debug)]
pub(crate) struct SessionWrite {
    pub(crate) key: String,
    /// `HSET` and `PEXPIRE` of the record.
    pipe: redis::Pipeline,
    /// Set by the first failure: later ones are logged at debug level only.
    warned: AtomicBool,
    /// Set when the client stops: the next write deletes the record instead.
    ended: AtomicBool,
}

impl SessionWrite {
    /// The record of the client `id`, under `prefix`, started now.
    pub(crate) fn new(prefix: &str, id: &ClientId) -> Self {
        let key = id.tag.session_key(prefix);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let fields = [
            ("host", host()),
            ("pid", std::process::id().to_string()),
            ("program", program()),
            ("started", started.to_string()),
            ("version", format!("{FORMAT}{}", env!("CARGO_PKG_VERSION"))),
            ("client_id", id.hyphenated()),
        ];
        let mut pipe = redis::pipe();
        let hset = pipe.cmd("HSET").arg(&key);
        for (name, value) in fields {
            hset.arg(name).arg(value);
        }
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(SESSION_TTL.as_millis().to_string());
        Self {
            key,
            pipe,
            warned: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }

    /// The client stops: from now on a write deletes the record, so its locks'
    /// owner shows gone at once rather than within the TTL.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    /// Writes the record on `con` (deletes it once the client [ended](Self::end)).
    pub(crate) fn send(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        if self.ended.load(Ordering::Relaxed) {
            return redis::cmd("DEL").arg(&self.key).exec(con);
        }
        let written = self.pipe.exec(con);
        if written.is_err() {
            let _ = redis::cmd("DEL").arg(&self.key).exec(con);
        }
        written
    }

    /// Logs a failed write: a warning the first time (owners of this client's
    /// locks then read as gone), debug after.
    pub(crate) fn failed(&self, err: &dyn std::fmt::Display) {
        if self.warned.swap(true, Ordering::Relaxed) {
            log::debug!("session record `{}` not written: {err}", self.key);
        } else {
            log::warn!(
                "session record `{}` not written ({err}): this client's locks show no \
                 owner until it is (the redis user needs HSET and PEXPIRE on it)",
                self.key
            );
        }
    }
}

/// This machine's host name, as Linux keeps it; `$HOSTNAME` elsewhere.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The file name of this process's executable (its first argument's otherwise).
fn program() -> String {
    let path = std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(Into::into));
    path.and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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
