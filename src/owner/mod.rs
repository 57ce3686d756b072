//! Owners: which client a lock's value names, and what that client's session
//! record in Redis says about it.
//!
//! Every value redlease writes carries its client's tag, the first 16 hex digits
//! of the client's UUID: a token `rl2:<tag>:<counter>` (older versions wrote
//! `rl1:<tag><16 hex random>`, still read), a Redisson field
//! `<client uuid>:<thread>`, a permit id `<tag><16 hex random>`. The client keeps
//! one session record, `<prefix>redlease:session:<tag>` (`record`), so a reader
//! finds a holder's owner with one `HGETALL`, and a lock costs nothing more.
//!
//! Layout: this file is [`ClientTag`], [`Owner`] and the token's identity format
//! (`TOKEN_PREFIX`, `TOKEN_LEN`), which the token scheme writes and every reader
//! parses; `record.rs` reads a session record ([`Session`]); `write.rs` writes it
//! (`ClientId`, `SessionWrite`); `liveness.rs` is a liveness session as its
//! leases see it (`Liveness`: how long the record is known to live, its epoch).

use std::collections::HashMap;
use std::fmt;

mod liveness;
mod record;
mod write;

pub(crate) use liveness::{Liveness, SESSION_WAKE, SessionHold};
pub use record::Session;
pub(crate) use write::{ClientId, SessionWrite, host, program};

/// The prefix of a redlease token, `rl2:<tag>:<counter>`: the client's tag (16
/// lowercase hex digits) and a counter in base 36 (`0-9a-z`) that never repeats in
/// the writer's process. Only values of this shape (or of [`TOKEN_PREFIX_V1`]'s)
/// are marked: a value another client wrote must stay byte for byte as it is, or
/// that client's compare-and-delete would no longer find it.
pub(crate) const TOKEN_PREFIX: &str = "rl2:";

/// The prefix of the tokens older redlease versions wrote: `rl1:` and 32 hex
/// digits (the tag and 64 random bits). Still read (owners) and marked, so that
/// the values of older clients are understood during a rolling upgrade.
pub(crate) const TOKEN_PREFIX_V1: &str = "rl1:";
/// What a release inside a minimum hold appends to its token (`<token>~`): the
/// key is kept until the hold ends, its holder done with it.
pub(crate) const KEPT_MARK: char = '~';

/// The length of an older redlease token: [`TOKEN_PREFIX_V1`] and 32 hex digits.
pub(crate) const TOKEN_LEN_V1: usize = TOKEN_PREFIX_V1.len() + 32;

/// The tag of a redlease client: the first 16 hex digits of its UUID, which every
/// value it writes carries, and which names its session record.
///
/// # Examples
/// ```
/// use redlease::ClientTag;
/// let tag = ClientTag::of_token("rl2:0123456789abcdef:1z").unwrap();
/// assert_eq!(tag.as_str(), "0123456789abcdef");
/// // The tokens of older redlease versions name their client too.
/// let old = ClientTag::of_token("rl1:0123456789abcdef0123456789abcdef").unwrap();
/// assert_eq!(old, tag);
/// assert_eq!(tag.session_key("lock:"), "lock:redlease:session:0123456789abcdef");
/// // redis-py's tokens and timestamps name no redlease client.
/// assert!(ClientTag::of_token("0123456789abcdef0123456789abcdef").is_none());
/// assert!(ClientTag::of_token("1700000000000").is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientTag([u8; 16]);

impl ClientTag {
    /// The tag in a token lock's value (with or without a waiter's `+` mark, or
    /// the `~` of a lock kept for its minimum hold):
    /// `rl2:`, the tag's 16 lowercase hex digits, `:` and a counter in base 36
    /// (`0-9a-z`), or an older redlease version's `rl1:` and 32 hex digits whose
    /// first 16 are the tag. `None` for any other value: another client's token
    /// (redis-py, redsync), a timestamp.
    pub fn of_token(value: &str) -> Option<Self> {
        let value = value.strip_suffix(['+', KEPT_MARK]).unwrap_or(value);
        if let Some(rest) = value.strip_prefix(TOKEN_PREFIX) {
            let (tag, counter) = rest.split_once(':')?;
            let base36 = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase();
            if counter.is_empty() || !counter.bytes().all(base36) {
                return None;
            }
            return Self::of_hex(tag);
        }
        let old = value.strip_prefix(TOKEN_PREFIX_V1)?;
        (old.len() == 32 && is_hex(old.as_bytes()))
            .then(|| Self::of_hex(&old[..16]))
            .flatten()
    }

    /// The tag in a Redisson owner field, `<client uuid>:<thread id>` (a
    /// read-write lock's writer: `<client uuid>:<thread id>:write`): the UUID's
    /// first 16 hex digits. Redisson's own (Java) clients write fields of this
    /// shape too; they keep no session record, so their owner reads as gone.
    pub fn of_field(field: &str) -> Option<Self> {
        let field = field.strip_suffix(":write").unwrap_or(field);
        let (id, thread) = field.rsplit_once(':')?;
        if thread.is_empty() || !thread.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let id = uuid::Uuid::try_parse(id).ok()?;
        Some(Self::of_uuid(&id))
    }

    /// The tag in a semaphore permit id: `<tag><16 hex random>` (32 hex
    /// digits) for a client without liveness, `726c383a<tag><16 hex random>`
    /// (40 hex digits: the mark `rl8:`, then as before) for a client that
    /// declared it. A 32-digit id whose tag would declare liveness (13th digit
    /// `8`) names no redlease client: such a client marks its ids, and a
    /// Redisson id has that digit by chance.
    ///
    /// # Examples
    /// ```
    /// use redlease::ClientTag;
    /// let plain = ClientTag::of_permit("0123456789ab4def0123456789abcdef").unwrap();
    /// assert!(!plain.declares_liveness());
    /// let live = ClientTag::of_permit("726c383a0123456789ab8def0123456789abcdef").unwrap();
    /// assert!(live.declares_liveness());
    /// assert!(ClientTag::of_permit("0123456789ab8def0123456789abcdef").is_none());
    /// ```
    pub fn of_permit(id: &str) -> Option<Self> {
        if !is_hex(id.as_bytes()) {
            return None;
        }
        match id.len() {
            32 => Self::of_hex(&id[..16]).filter(|t| !t.declares_liveness()),
            40 if id.starts_with(PERMIT_MARK) => {
                Self::of_hex(&id[8..24]).filter(ClientTag::declares_liveness)
            }
            _ => None,
        }
    }

    /// The tag that is `hex`, exactly 16 lowercase hex digits.
    pub(crate) fn of_hex(hex: &str) -> Option<Self> {
        let tag: [u8; 16] = hex.as_bytes().try_into().ok()?;
        is_hex(&tag).then_some(Self(tag))
    }

    /// The tag of the client whose UUID is `id`.
    pub(crate) fn of_uuid(id: &uuid::Uuid) -> Self {
        let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
        id.simple().encode_lower(&mut buf);
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&buf[..16]);
        Self(tag)
    }

    /// Whether the client declared liveness
    /// ([`LockClientBuilder::liveness`](crate::LockClientBuilder::liveness)): its
    /// locks live only while its session record does, and another redlease client
    /// may break them once the record is gone. Such a client's UUID is a version 8
    /// UUID (RFC 9562), so its tag's 13th digit is `8`; every other writer's is
    /// not: older redlease versions and Redisson's Java clients use version 4
    /// UUIDs, and other clients' values carry no tag at all.
    ///
    /// # Examples
    /// ```
    /// use redlease::ClientTag;
    /// let live = ClientTag::of_token("rl2:0123456789ab8def:1z").unwrap();
    /// assert!(live.declares_liveness());
    /// let plain = ClientTag::of_token("rl2:0123456789ab4def:1z").unwrap();
    /// assert!(!plain.declares_liveness());
    /// ```
    pub fn declares_liveness(&self) -> bool {
        self.0[12] == LIVENESS_VERSION
    }

    /// The 16 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        // Only ever built from lowercase hex digits.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The key of this client's session record under `prefix`:
    /// `<prefix>redlease:session:<tag>`.
    pub fn session_key(&self, prefix: &str) -> String {
        format!("{prefix}{SESSION}{}", self.as_str())
    }
}

impl fmt::Debug for ClientTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientTag({})", self.as_str())
    }
}

impl fmt::Display for ClientTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What opens the permit ids of a client that declared liveness, in hex: the
/// bytes `rl8:`. Such an id is 20 bytes (the mark, the tag's 8 bytes, 8 random
/// bytes) where Redisson's and other redlease clients' are 16, so no id of
/// another writer can be taken for one (see `scheme/semaphore/names.rs`).
pub(crate) const PERMIT_MARK: &str = "726c383a";

/// The UUID version digit of a client that declared liveness (see
/// [`ClientTag::declares_liveness`]).
pub(crate) const LIVENESS_VERSION: u8 = b'8';

/// Whether `bytes` are lowercase hex digits.
fn is_hex(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The session keys' names after the key prefix.
pub(crate) const SESSION: &str = "redlease:session:";

/// Who holds a lock, as far as Redis can tell.
///
/// A session that expired means the owner is gone (its process died, or it lost
/// Redis for longer than the record's 10 s TTL), not that the lock is free: the
/// lock's own TTL decides that.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Owner {
    /// The value names a redlease client whose session record is there: it lives.
    Alive(Session),
    /// The value names a redlease client with no session record (any more): its
    /// process is gone, or it could not write the record (a Redis user without
    /// `HSET`), or it is a client that keeps none (Redisson's Java clients).
    Gone(ClientTag),
    /// The value names a redlease client, but its record is of another version or
    /// garbled: the owner is unknown, never guessed.
    Unknown(ClientTag),
    /// The value names no redlease client: another client's token (redis-py,
    /// redsync), a legacy timestamp.
    None,
}

impl Owner {
    /// The owner that the record `fields` (an `HGETALL` reply, empty when the key
    /// is absent) says `tag` is.
    ///
    /// # Examples
    /// ```
    /// use std::collections::HashMap;
    /// use redlease::{ClientTag, Owner};
    /// let tag = ClientTag::of_permit("0123456789abcdef0123456789abcdef").unwrap();
    /// assert_eq!(Owner::from_record(tag, &HashMap::new()), Owner::Gone(tag));
    /// let garbled = HashMap::from([("pid".to_owned(), "x".to_owned())]);
    /// assert_eq!(Owner::from_record(tag, &garbled), Owner::Unknown(tag));
    /// ```
    pub fn from_record(tag: ClientTag, fields: &HashMap<String, String>) -> Self {
        if fields.is_empty() {
            return Owner::Gone(tag);
        }
        Session::parse(tag, fields).map_or(Owner::Unknown(tag), Owner::Alive)
    }

    /// Looks up the owner of `tag` under `prefix`: one `HGETALL` of its session
    /// record on `conn`. Any scheme's value resolves this way once its tag is read
    /// ([`ClientTag::of_token`], [`of_field`](ClientTag::of_field),
    /// [`of_permit`](ClientTag::of_permit)).
    ///
    /// # Errors
    /// The error of the `HGETALL` when the server failed. A record that is not a
    /// hash, or that the user may not read, is [`Owner::Unknown`], not an error.
    pub fn lookup(
        conn: &mut dyn redis::ConnectionLike,
        prefix: &str,
        tag: ClientTag,
    ) -> redis::RedisResult<Self> {
        let reply = redis::cmd("HGETALL")
            .arg(tag.session_key(prefix))
            .query::<HashMap<String, String>>(conn);
        match reply {
            Ok(fields) => Ok(Self::from_record(tag, &fields)),
            Err(e) if matches!(e.code(), Some("WRONGTYPE" | "NOPERM")) => Ok(Owner::Unknown(tag)),
            Err(e) => Err(e),
        }
    }

    /// The session, when the owner is alive.
    pub fn session(&self) -> Option<&Session> {
        match self {
            Owner::Alive(s) => Some(s),
            _ => None,
        }
    }

    /// The client tag the value names, if any.
    pub fn tag(&self) -> Option<ClientTag> {
        match self {
            Owner::Alive(s) => Some(s.tag()),
            Owner::Gone(t) | Owner::Unknown(t) => Some(*t),
            Owner::None => None,
        }
    }

    /// Whether the owner's session record exists (and can be read).
    pub fn is_alive(&self) -> bool {
        matches!(self, Owner::Alive(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_from_each_format_and_nothing_else() {
        let hex = "0123456789abcdef0123456789abcdef";
        let want = "0123456789abcdef";
        let tokens = [
            format!("rl1:{hex}"),
            format!("rl1:{hex}+"),
            format!("rl2:{want}:1"),
            format!("rl2:{want}:0z9+"),
            format!("rl2:{want}:3w5e11264sgsf"),
        ];
        for v in tokens {
            assert_eq!(ClientTag::of_token(&v).unwrap().as_str(), want, "{v}");
        }
        assert_eq!(ClientTag::of_permit(hex).unwrap().as_str(), want);
        let id = uuid::Uuid::parse_str("01234567-89ab-cdef-0123-456789abcdef").unwrap();
        let field = format!("{id}:7");
        assert_eq!(ClientTag::of_field(&field).unwrap().as_str(), want);
        let writer = format!("{field}:write");
        assert_eq!(ClientTag::of_field(&writer).unwrap().as_str(), want);
        assert_eq!(ClientTag::of_uuid(&id).as_str(), want);
        for bad in [
            hex,
            "rl1:0123",
            "rl1:0123456789ABCDEF0123456789abcdef",
            "rl1:0123456789abcdef0123456789abcdeg",
            "rl2:0123456789abcdef",
            "rl2:0123456789abcdef:",
            "rl2:0123456789abcdef:1++",
            "rl2:0123456789abcdef:1A",
            "rl2:0123456789abcdef:1:2",
            "rl2:0123456789abcde:12",
            "rl2:0123456789ABCDEF:12",
            "rl2:0123456789abcdef0:1",
            "rl2::1",
            "1700000000000",
            "",
        ] {
            assert!(ClientTag::of_token(bad).is_none(), "{bad}");
        }
        let no_thread = format!("{id}:write");
        for bad in [field.trim_end_matches('7'), "x:1", hex, "a:b:c", &no_thread] {
            assert!(ClientTag::of_field(bad).is_none(), "{bad}");
        }
        assert!(ClientTag::of_permit(&hex[1..]).is_none());
        let live = format!("{PERMIT_MARK}0123456789ab8def0123456789abcdef");
        assert_eq!(
            ClientTag::of_permit(&live).unwrap().as_str(),
            "0123456789ab8def"
        );
        for bad in [
            &live[2..],
            &format!("{PERMIT_MARK}0123456789ab4def0123456789abcdef"),
            &format!("726c383b{}", &live[8..]),
            "0123456789ab8def0123456789abcdef",
        ] {
            assert!(ClientTag::of_permit(bad).is_none(), "{bad}");
        }
    }
}
