//! Writing a session record: the client's identity ([`ClientId`]) and the write
//! that keeps its record ([`SessionWrite`]), at `build()` and then every
//! [`SESSION_REFRESH`] with a [`SESSION_TTL`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ClientTag;
use super::record::FORMAT;

/// How long a record outlives its last refresh.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(10);

/// How often the renewal thread rewrites the record: three tries per TTL.
pub(crate) const SESSION_REFRESH: Duration = Duration::from_secs(3);

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
        if self.ended() {
            return self.delete().exec(con);
        }
        let written = self.pipe.exec(con);
        if written.is_err() {
            let _ = redis::cmd("DEL").arg(&self.key).exec(con);
        }
        written
    }

    /// Whether the client stopped: the next write is the record's delete.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// The record's delete, as a command to send without reading its reply.
    pub(crate) fn delete(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&self.key);
        cmd
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
pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The file name of this process's executable (its first argument's otherwise).
pub(crate) fn program() -> String {
    let path = std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(Into::into));
    path.and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned())
}
