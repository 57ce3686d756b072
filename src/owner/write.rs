//! Writing a session record: the client's identity ([`ClientId`]) and the write
//! that keeps its record ([`SessionWrite`]), at `build()` and then every
//! [`SESSION_REFRESH`] with a [`SESSION_TTL`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Liveness;
use super::record::FORMAT;
use super::{ClientTag, LIVENESS_VERSION};

/// How long a record outlives its last refresh.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(10);

/// How often the renewal thread rewrites the record: three tries per TTL.
pub(crate) const SESSION_REFRESH: Duration = Duration::from_secs(3);

/// A client's identity: its UUID and the tag every value it writes carries.
#[derive(Debug, Clone)]
pub(crate) struct ClientId {
    id: uuid::Uuid,
    tag: ClientTag,
    /// Locks of dead liveness sessions this client's waiters broke.
    broken: Arc<AtomicU64>,
}

impl ClientId {
    /// A new client's identity: a random UUID v4.
    pub(crate) fn new() -> Self {
        let id = uuid::Uuid::new_v4();
        Self {
            tag: ClientTag::of_uuid(&id),
            id,
            broken: Arc::default(),
        }
    }
    /// A new identity for a client that declares liveness: a random UUID of
    /// version 8, whose tag says so ([`ClientTag::declares_liveness`]).
    pub(crate) fn new_live() -> Self {
        let id = uuid::Uuid::new_v8(uuid::Uuid::new_v4().into_bytes());
        let tag = ClientTag::of_uuid(&id);
        debug_assert_eq!(tag.0[12], LIVENESS_VERSION);
        Self {
            tag,
            id,
            broken: Arc::default(),
        }
    }

    /// The count of locks of dead liveness sessions this client's waiters broke.
    pub(crate) fn broken(&self) -> &Arc<AtomicU64> {
        &self.broken
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
    /// The liveness session, when the client keeps one: the record is then
    /// written once per epoch and only extended after (see [`Liveness`]).
    live: Option<Arc<Liveness>>,
    /// The epoch whose record was written (0: none yet).
    written: AtomicU64,
    /// The record's fields, for a liveness session's writes.
    fields: Vec<(&'static str, String)>,
    /// With replica confirmation on (`LockClientBuilder::replicas`): how many
    /// replicas must acknowledge a liveness session's write, and how long to
    /// wait, before it counts.
    replicas: Option<(u32, Duration)>,
}

impl SessionWrite {
    /// The record of the client `id`, under `prefix`, started now; with `live`,
    /// a liveness session's record.
    pub(crate) fn new(prefix: &str, id: &ClientId, live: Option<Arc<Liveness>>) -> Self {
        let key = id.tag.session_key(prefix);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut fields = vec![
            ("host", host()),
            ("pid", std::process::id().to_string()),
            ("program", program()),
            ("started", started.to_string()),
            ("version", format!("{FORMAT}{}", env!("CARGO_PKG_VERSION"))),
            ("client_id", id.hyphenated()),
        ];
        let ttl = match &live {
            Some(live) => {
                fields.push(("liveness", live.ttl().as_millis().to_string()));
                live.ttl()
            }
            None => SESSION_TTL,
        };
        let pipe = record_pipe(&key, &fields, ttl);
        Self {
            key,
            pipe,
            warned: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            live,
            written: AtomicU64::new(0),
            fields,
            replicas: None,
        }
    }

    /// Counts a liveness session's write only once `count` replicas
    /// acknowledged it within `timeout` (`WAIT`): a failover to a replica then
    /// cannot end a session its client still counts on.
    pub(crate) fn replicated(mut self, replicas: Option<(u32, Duration)>) -> Self {
        self.replicas = replicas;
        self
    }

    /// The liveness session, if the client keeps one.
    pub(crate) fn liveness(&self) -> Option<&Arc<Liveness>> {
        self.live.as_ref()
    }

    /// How often the record is written (a liveness session's: extended).
    pub(crate) fn refresh_every(&self) -> Duration {
        self.live
            .as_ref()
            .map_or(SESSION_REFRESH, |l| l.refresh_every())
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
        if let Some(live) = &self.live {
            return self.keep(live, con);
        }
        let written = self.pipe.exec(con);
        if written.is_err() {
            let _ = redis::cmd("DEL").arg(&self.key).exec(con);
        }
        written
    }

    /// A liveness session's write: the record once per epoch, with every field
    /// and the liveness as its TTL; then only `PEXPIRE`, which never creates the
    /// key, so that a record found gone stays gone (the epoch is over).
    fn keep(&self, live: &Liveness, con: &mut redis::Connection) -> redis::RedisResult<()> {
        let epoch = live.epoch();
        let sent = Instant::now();
        if self.written.load(Ordering::SeqCst) != epoch {
            let mut pipe = record_pipe(&self.key, &self.fields, live.ttl());
            self.wait(&mut pipe);
            let acked = match pipe.query::<Vec<redis::Value>>(con) {
                Ok(replies) => self.acked(replies.last()),
                Err(e) => {
                    let _ = redis::cmd("DEL").arg(&self.key).exec(con);
                    return Err(e);
                }
            };
            self.written.store(epoch, Ordering::SeqCst);
            if acked {
                live.confirmed(epoch, sent);
            }
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("PEXPIRE")
            .arg(&self.key)
            .arg(live.ttl().as_millis().to_string());
        self.wait(&mut pipe);
        let replies: Vec<redis::Value> = pipe.query(con)?;
        let extended = replies.first().map(redis::from_redis_value_ref::<i64>);
        match extended {
            Some(Ok(1)) if self.acked(replies.last()) => live.confirmed(epoch, sent),
            // Extended, but not on enough replicas in time (or no reply to
            // read): it does not count, and a session never confirmed again
            // lapses.
            Some(Ok(1)) | None => {}
            Some(Ok(_)) => live.found_gone(epoch),
            Some(Err(e)) => return Err(e.into()),
        }
        Ok(())
    }

    /// Appends the `WAIT` for the replicas a write must reach, if any.
    fn wait(&self, pipe: &mut redis::Pipeline) {
        if let Some((count, timeout)) = self.replicas {
            pipe.cmd("WAIT")
                .arg(count)
                .arg(timeout.as_millis().to_string());
        }
    }

    /// Whether `wait`'s reply (the pipeline's last) counts enough replicas;
    /// always, without replica confirmation.
    fn acked(&self, reply: Option<&redis::Value>) -> bool {
        let Some((count, _)) = self.replicas else {
            return true;
        };
        reply
            .and_then(|r| redis::from_redis_value_ref::<i64>(r).ok())
            .is_some_and(|n| u64::try_from(n).unwrap_or(0) >= u64::from(count))
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

/// `HSET` of every field of the record `key` and its `PEXPIRE` of `ttl`.
fn record_pipe(key: &str, fields: &[(&'static str, String)], ttl: Duration) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    let hset = pipe.cmd("HSET").arg(key);
    for (name, value) in fields {
        hset.arg(*name).arg(value);
    }
    pipe.cmd("PEXPIRE")
        .arg(key)
        .arg(ttl.as_millis().to_string());
    pipe
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
