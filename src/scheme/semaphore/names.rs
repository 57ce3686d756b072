//! The semaphore's names, as Redisson derives them from the semaphore's, and its
//! permit ids as the expiry set stores them.
//!
//! A permit id is a member of the expiry set, raw bytes; the API shows it in hex
//! (Redisson's `hexDump`, which its clients decode with `decodeHexDump`). Two
//! forms:
//! - 16 bytes, 32 hex digits: Redisson's (random), and those of a redlease
//!   client without liveness, `<tag><16 hex random>` (the client's tag, the
//!   first 16 hex digits of its UUID);
//! - 20 bytes, 40 hex digits: those of a redlease client that declared
//!   liveness, `726c383a<tag><16 hex random>`: the mark `rl8:`
//!   ([`PERMIT_MARK`]), the tag, whose session record
//!   (`<prefix>redlease:session:<tag>`) a waiter reads, and 64 random bits.
//!
//! The length is the mark: no writer but a liveness client writes a 20-byte
//! id (Redisson's are 16 random bytes; its scripts read only scores and the ids
//! its own callers pass, so they hold and give back ids of any length), and a
//! waiter breaks only 20-byte ids that open with `rl8:` (`dead.rs`). A 16-byte
//! id never says its writer declared liveness: a Redisson id has a tag's
//! liveness digit by chance one time in 16.

use std::fmt::Write as _;

use redis::RedisResult;

use crate::owner::PERMIT_MARK;
use crate::scheme::redisson::{prefix_name, suffix_name};

/// Redisson's channel prefix (`RedissonPermitExpirableSemaphore.channelName`).
const CHANNEL_PREFIX: &str = "redisson_sc";

/// The length in hex digits of a liveness client's permit id.
const LIVE_ID_LEN: usize = 40;

/// Redisson's `prefixName("redisson_sc", name)`: the name in braces (its own hash
/// tag), or as it is when it holds a `{`.
pub(crate) fn channel(name: &str) -> String {
    prefix_name(CHANNEL_PREFIX, name)
}

/// Redisson's `suffixName(name, "timeout")`: the permits' expiry set.
pub(crate) fn timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// Appends a new permit id of the client tagged `tag` (16 hex digits): the tag
/// and 16 random hex digits, after [`PERMIT_MARK`] when the client declared
/// liveness (`live`).
pub(crate) fn push_id(out: &mut String, tag: &str, live: bool) {
    if live {
        out.push_str(PERMIT_MARK);
    }
    out.push_str(tag);
    let _ = write!(out, "{:016x}", fastrand::u64(..));
}

/// A permit id's bytes, as the expiry set stores them (Redisson's
/// `decodeHexDump`): 16 for 32 hex digits, 20 for a liveness client's 40
/// ([`PERMIT_MARK`] first); an error for anything else.
pub(crate) fn id_bytes(id: &str) -> RedisResult<Vec<u8>> {
    let hex = id.as_bytes();
    let mark = PERMIT_MARK.as_bytes();
    let marked = hex.len() == LIVE_ID_LEN && hex[..mark.len()].eq_ignore_ascii_case(mark);
    let parsed = (id.len() == 32 || marked)
        .then(|| {
            hex.chunks(2)
                .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
                .collect::<Option<Vec<u8>>>()
        })
        .flatten();
    parsed.ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "a permit id is 32 hex digits, or 40 from a client with liveness",
            id.to_owned(),
        ))
    })
}

/// The ids of a hold of several permits (ids joined by commas), as stored.
pub(super) fn split_ids(value: &str) -> RedisResult<Vec<Vec<u8>>> {
    value.split(',').map(id_bytes).collect()
}

/// A stored id in the API's form: its bytes in lowercase hex when it has one
/// of the two forms of [`id_bytes`], else as it is (shown, naming no one).
pub(crate) fn id_hex(id: &[u8]) -> String {
    let hex = to_hex(id);
    match id.len() {
        16 => hex,
        20 if hex.starts_with(PERMIT_MARK) => hex,
        _ => String::from_utf8_lossy(id).into_owned(),
    }
}

/// `bytes` in lowercase hex.
pub(super) fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The value of one hex digit (either case).
fn digit(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_prefix_and_suffix_rules() {
        assert_eq!(channel("jobs"), "redisson_sc:{jobs}");
        assert_eq!(channel("a:{b}"), "redisson_sc:a:{b}");
        assert_eq!(timeouts("jobs"), "{jobs}:timeout");
        assert_eq!(timeouts("a:{b}"), "a:{b}:timeout");
    }

    #[test]
    fn ids_of_both_forms_round_trip_and_nothing_else_parses() {
        for live in [false, true] {
            let mut id = String::new();
            push_id(&mut id, "0123456789ab8def", live);
            let bytes = id_bytes(&id).unwrap();
            assert_eq!(bytes.len(), if live { 20 } else { 16 });
            assert_eq!(id_hex(&bytes), id);
            assert_eq!(live, bytes.starts_with(b"rl8:"));
        }
        let upper = "0123456789ABCDEF0123456789ABCDEF";
        assert_eq!(id_hex(&id_bytes(upper).unwrap()), upper.to_lowercase());
        for bad in [
            "xyz",
            "0123456789abcdef-0123456789abcde",
            "0123456789abcdef0123456789abcdeg",
            // 40 digits without the mark, 36, 48: other lengths are refused.
            "0123456789abcdef0123456789abcdef01234567",
            "726c383a0123456789abcdef0123456789abcd",
            "726c383a0123456789abcdef0123456789abcdef01234567",
        ] {
            assert!(id_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(id_hex(b"20 bytes, no mark!!!"), "20 bytes, no mark!!!");
    }
}
