//! What [`LockClient::inspect`](crate::LockClient::inspect) and
//! [`LockClient::held`](crate::LockClient::held) return: a lock as Redis shows it,
//! its holders and their owners; a lease this client holds.
//!
//! Layout: this file is [`LockInfo`], [`Holder`], [`Waiter`] and [`HeldLock`], and
//! [`LockInfo::read`] over any connection; `snapshot.rs` the one script that reads
//! every format (the key, its fence counter, a semaphore's permits, a read-write
//! lock's writer mark, a fair lock's queue) and how its reply is read.

mod snapshot;

use std::time::{Duration, Instant, SystemTime};

pub use crate::format::LockFormat;
use redis::{ConnectionLike, RedisResult};

use crate::error::Result;
use crate::lease::LeaseState;
use crate::owner::{ClientTag, Owner};
use crate::scheme::{Keys, TimestampUnit};

pub(crate) use snapshot::snapshot;

/// The most permit ids of one semaphore that [`LockInfo::holders`] lists, and
/// the most waiters of a fair lock's queue that [`LockInfo::queue`] lists.
pub const MAX_PERMITS: usize = 1000;

/// A lock key as Redis shows it, from [`LockInfo::read`] or
/// [`LockClient::inspect`](crate::LockClient::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    key: String,
    fence_key: String,
    channels: [String; 2],
    format: LockFormat,
    redis_type: String,
    value: Option<String>,
    unit: Option<TimestampUnit>,
    ttl: Option<Duration>,
    fence: Option<u64>,
    waited: bool,
    kept: bool,
    mode: Option<String>,
    free: Option<i64>,
    held: u64,
    expired: u64,
    holders: Vec<Holder>,
    queued: u64,
    queue: Vec<Waiter>,
}

impl LockInfo {
    /// Reads the lock `name` under `prefix` on `conn`, a plain connection to
    /// the server (or cluster node) that holds it, as
    /// [`LockClient::inspect`](crate::LockClient::inspect) does but without a
    /// client: one atomic script for the key, its fence counter, a semaphore's
    /// permits and a fair lock's queue, then one `HGETALL` of the session record
    /// of each holder whose value names a redlease client
    /// ([`Owner::lookup`]), on the same connection.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for an empty name,
    /// [`Error::Redis`](crate::Error::Redis) when a call failed.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// use redlease::LockInfo;
    /// let mut conn = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
    /// let info = LockInfo::read(&mut conn, "lock:", "invoice:42")?;
    /// println!("{:?}, {} queued", info.format(), info.queued());
    /// for holder in info.holders() {
    ///     println!("{} held by {:?}", holder.value(), holder.owner().session());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn read(conn: &mut dyn ConnectionLike, prefix: &str, name: &str) -> Result<Self> {
        Self::read_with(conn, prefix, name, |c, tag| Owner::lookup(c, prefix, tag))
    }

    /// [`read`](Self::read), with the owners looked up by `lookup` (given
    /// `conn` and each holder's tag) rather than on `conn`: for a session
    /// record that lives elsewhere, such as on another master of a cluster.
    ///
    /// # Errors
    /// As [`read`](Self::read); a failed `lookup` is
    /// [`Error::Redis`](crate::Error::Redis).
    pub fn read_with(
        conn: &mut dyn ConnectionLike,
        prefix: &str,
        name: &str,
        mut lookup: impl FnMut(&mut dyn ConnectionLike, ClientTag) -> RedisResult<Owner>,
    ) -> Result<Self> {
        let keys = Keys::plain(prefix, name)?;
        let info = snapshot(conn, &keys.lock, &keys.fence())?;
        Ok(info.resolve(|tag| lookup(&mut *conn, tag))?)
    }

    /// The key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// How the key is stored.
    pub fn format(&self) -> LockFormat {
        self.format
    }
    /// The key's Redis type (`none`, `string`, `hash`, `list`, …): what a key of
    /// no lock format holds.
    pub fn redis_type(&self) -> &str {
        &self.redis_type
    }
    /// The key's value when it is a string (a token, a timestamp, a semaphore's
    /// count, or a string of no lock format).
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }
    /// A legacy timestamp's unit, as its magnitude suggests (the value does not
    /// say): seconds from 2001 (10 digits), milliseconds from 1973 (12 to 14);
    /// `None` for other formats.
    pub fn timestamp_unit(&self) -> Option<TimestampUnit> {
        self.unit
    }
    /// Time left on the key; `None` when it is free or never expires by itself.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
    /// The prefix's fence counter: the last fence given out under it (absent
    /// until a fenced lock was taken).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }
    /// The name of that fence counter (`<prefix>redlease:fence`; in a cluster,
    /// with the key's slot).
    pub fn fence_key(&self) -> &str {
        &self.fence_key
    }
    /// The channels a release of this key publishes its wake-up on: the token
    /// scheme's (`{<key>}:released`) and Redisson's
    /// (`redisson_lock__channel:{<key>}`), for a tool that deletes the key by
    /// force and must wake its waiters.
    pub fn release_channels(&self) -> [&str; 2] {
        [&self.channels[0], &self.channels[1]]
    }
    /// Whether a redlease caller waits for its release, as far as Redis can tell:
    /// a waiting caller marks a redlease token with a `+`, a waiting writer a
    /// read-write lock with its mark (`{name}:redlease:write_wait`). A fair
    /// lock's waiters are in [`queue`](Self::queue).
    pub fn waited(&self) -> bool {
        self.waited
    }
    /// Whether the lock is kept for its minimum hold: its holder released it
    /// before its [`min_hold`](crate::LockOptions::min_hold) ended, and the key
    /// (a redlease token marked `~`) stays until it expires, in
    /// [`ttl`](Self::ttl). Nobody holds it and nobody can take it meanwhile.
    pub fn kept(&self) -> bool {
        self.kept
    }
    /// A read-write lock's mode, `read` or `write`; `None` for other formats.
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
    }
    /// A semaphore's free permits (negative after its total was lowered below
    /// the permits held); `None` for other formats.
    pub fn free_permits(&self) -> Option<i64> {
        self.free
    }
    /// A semaphore's permits held (in its expiry set), expired ones included;
    /// 0 for other formats.
    pub fn permits_held(&self) -> u64 {
        self.held
    }
    /// Of [`permits_held`](Self::permits_held), those past their lease by this
    /// machine's clock: the next call on the semaphore gives them back.
    pub fn permits_expired(&self) -> u64 {
        self.expired
    }
    /// Who holds it: one holder for a token or timestamp, one per owner field of a
    /// reentrant or read-write hash (sorted by field), one per permit of a
    /// semaphore (the first [`MAX_PERMITS`] ids, soonest to expire first); none
    /// when it is free.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }
    /// How many callers wait in the queue of a fair lock of that name
    /// (`redisson_lock_queue:{<key>}`, Redisson's `RFairLock` layout).
    pub fn queued(&self) -> u64 {
        self.queued
    }
    /// The first [`MAX_PERMITS`] of them, oldest first, each with its timeout.
    pub fn queue(&self) -> &[Waiter] {
        &self.queue
    }
}

/// One holder of a lock: the value it wrote, and its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    value: String,
    holds: u64,
    owner: Owner,
    until: Option<SystemTime>,
}

impl Holder {
    /// Its value: a token, a timestamp, a Redisson owner field (a writer's ends
    /// in `:write`), a semaphore's permit id (32 hex digits).
    pub fn value(&self) -> &str {
        &self.value
    }
    /// How many times it holds the lock (a reentrant or read-write hold count; 1
    /// otherwise).
    pub fn holds(&self) -> u64 {
        self.holds
    }
    /// Its owner, as its client's session record says.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
    /// When a semaphore permit's lease ends (its score in the expiry set);
    /// `None` for other formats.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.until
    }
    /// Whether a semaphore permit is past its lease by this machine's clock.
    pub fn is_expired(&self) -> bool {
        self.until.is_some_and(|t| t <= SystemTime::now())
    }
}

/// A caller queued for a fair lock, from [`LockInfo::queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    id: String,
    timeout: Option<SystemTime>,
}

impl Waiter {
    /// Its owner id, `<client uuid>:<thread id>` (Redisson's layout).
    pub fn id(&self) -> &str {
        &self.id
    }
    /// When it leaves the queue unless it polls again (its score in the fair
    /// lock's timeout set); `None` when the set has no entry for it.
    pub fn timeout(&self) -> Option<SystemTime> {
        self.timeout
    }
}

/// A lease this client holds, from [`LockClient::held`](crate::LockClient::held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    key: String,
    name: String,
    value: String,
    valid_for: Duration,
}

impl HeldLock {
    /// The key, with the client's prefix.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The lock's name, as it was locked (without the prefix).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The value it stored.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// How long the lease stays valid without another renewal.
    pub fn valid_for(&self) -> Duration {
        self.valid_for
    }

    pub(crate) fn of(state: &LeaseState) -> Self {
        let keys = state.keys();
        Self {
            name: keys.lock[keys.prefix..].to_owned(),
            key: keys.lock,
            value: state.held.lock().value.clone(),
            valid_for: state
                .valid_until()
                .saturating_duration_since(Instant::now()),
        }
    }
}

impl LockInfo {
    /// Looks up the owner of each holder whose value names a redlease client.
    pub(crate) fn resolve<E>(
        mut self,
        mut lookup: impl FnMut(ClientTag) -> Result<Owner, E>,
    ) -> Result<Self, E> {
        for holder in &mut self.holders {
            if let Some(tag) = holder.owner.tag() {
                holder.owner = lookup(tag)?;
            }
        }
        Ok(self)
    }
}
