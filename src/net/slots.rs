//! Redis Cluster's key slots: which slot a key hashes to, a short tag for every
//! slot (so a key of redlease's own can be put in any slot), and the sink where
//! connections drop the redirections (`MOVED`) the servers answer.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The slot Redis Cluster stores `key` in: CRC16 (XMODEM) of the key's hash tag
/// (the bytes between the first `{` and the next `}`, when not empty), else of
/// the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// What Redis Cluster hashes of `key`: its tag, if it has one.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// A number whose decimal digits hash to `slot`: `{n}` puts a key in that slot.
/// The smallest such number, found once for all slots (every slot has one below
/// 100,000; the table is 64 KiB).
pub(crate) fn tag(slot: u16) -> u32 {
    static TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut left = tags.len();
        let mut n = 0u32;
        while left > 0 {
            let s = usize::from(self::slot(n.to_string().as_bytes()));
            if tags[s] == u32::MAX {
                tags[s] = n;
                left -= 1;
            }
            n += 1;
        }
        tags.into_boxed_slice()
    });
    TAGS[usize::from(slot % SLOTS)]
}

/// Where the connections of a cluster's nodes note what they learn about the slot
/// map: a slot's new owner (`MOVED`), or that a node failed and the map should be
/// asked for again. The topology looks at it before it routes a call. It also
/// tells the connections whether releases publish sharded (`SPUBLISH`).
#[derive(Debug, Default)]
pub(crate) struct Redirects {
    pending: AtomicBool,
    sharded: AtomicBool,
    noted: Mutex<Noted>,
}

/// What the connections noted since the topology last looked.
#[derive(Debug, Default)]
pub(crate) struct Noted {
    /// `(slot, "host:port")` of each `MOVED` answer.
    pub(crate) moved: Vec<(u16, String)>,
    /// Whether a node failed (no answer, refused): the whole map is asked again.
    pub(crate) refresh: bool,
}

impl Redirects {
    /// Whether releases publish with `SPUBLISH` (the cluster has sharded pub/sub).
    pub(crate) fn sharded(&self) -> bool {
        self.sharded.load(Ordering::Relaxed)
    }

    /// Sets what [`sharded`](Self::sharded) says.
    pub(crate) fn set_sharded(&self, sharded: bool) {
        self.sharded.store(sharded, Ordering::Relaxed);
    }

    /// Notes a `MOVED slot host:port` answer (an error reply's code and detail).
    pub(crate) fn moved(&self, detail: &str) {
        let mut parts = detail.split_ascii_whitespace();
        let slot = parts.next().and_then(|s| s.parse::<u16>().ok());
        if let (Some(slot), Some(addr)) = (slot, parts.next()) {
            self.moved_to(slot, addr);
        }
    }

    /// Notes that `slot` is now served by the master at `addr`.
    fn moved_to(&self, slot: u16, addr: &str) {
        self.noted.lock().moved.push((slot, addr.to_owned()));
        self.pending.store(true, Ordering::Release);
    }

    /// Notes that a node failed: the map should be asked for again.
    pub(crate) fn refresh(&self) {
        self.noted.lock().refresh = true;
        self.pending.store(true, Ordering::Release);
    }

    /// What was noted since the last call, if anything (one atomic load when
    /// nothing was).
    pub(crate) fn take(&self) -> Option<Noted> {
        // A load first: most calls find nothing, and need not write the line.
        if !self.pending.load(Ordering::Acquire) || !self.pending.swap(false, Ordering::AcqRel) {
            return None;
        }
        Some(std::mem::take(&mut *self.noted.lock()))
    }

    /// Notes what a Redis error says about the map: `MOVED`, or a failed node.
    pub(crate) fn note(&self, e: &redis::RedisError) {
        if e.kind() == redis::ServerErrorKind::Moved.into() {
            if let Some((addr, slot)) = e.redirect_node() {
                self.moved_to(slot, addr);
            }
        } else if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.kind() == redis::ServerErrorKind::ClusterDown.into()
        {
            self.refresh();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for s in [0, 1, 866, 5460, 5461, 10922, 16383] {
            assert_eq!(slot(format!("x{{{}}}", tag(s)).as_bytes()), s);
        }
        assert!((0..SLOTS).all(|s| slot(tag(s).to_string().as_bytes()) == s));
    }

    #[test]
    fn redirects_are_taken_once() {
        let r = Redirects::default();
        assert!(r.take().is_none());
        r.moved("3999 127.0.0.1:6381");
        r.moved("garbage");
        let noted = r.take().unwrap();
        assert_eq!(noted.moved, vec![(3999, "127.0.0.1:6381".to_owned())]);
        assert!(!noted.refresh);
        assert!(r.take().is_none());
    }
}
