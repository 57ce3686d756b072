//! The semaphore's side of a permit ticket's adoption: one script that puts
//! ids of the adopter in place of the ticket's, keeping their expiry (the API
//! side is `primitives/semaphore/ticket.rs`; the reply reads as the token's,
//! `token/ticket.rs`); and the check of a permit ticket's value.

use std::sync::LazyLock;

use redis::Script;

use super::{NO_LEASE, push_id, timeouts};
use crate::owner::ClientId;
use crate::scheme::redisson::now_millis;

/// Re-keys a ticket's permits to the adopter's ids, keeping their scores.
///
/// KEYS[1] permits (the count), KEYS[2] timeouts. ARGV[1] now (unix ms),
/// ARGV[2] n, the permits of the hold; ARGV[3..2+n] the ticket's ids, ARGV[3+n..]
/// the adopter's new ids (raw bytes, as the expiry set stores them). Every one
/// of the ticket's ids must be in the set, scored after now and below
/// Redisson's no-lease score; then each is removed and its new id added with
/// its score, and the count is not touched. Returns the milliseconds left
/// until the first of them expires; `-2` an id is gone or past its score (the
/// permit was released, released by id or expired: anyone's next acquire
/// counts it back); `-3` the expiry set is of another type; `-4` an id without
/// lease (left as it is).
///
/// Check and swap are one atomic step: of two adopters of one ticket, the
/// first swaps, and the second finds the ticket's ids gone.
pub(crate) static PERMIT_ADOPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local now, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local scores, first = {{}}, nil
for i = 3, 2 + n do
  local s = redis.pcall('ZSCORE', KEYS[2], ARGV[i])
  if type(s) == 'table' then return -3 end
  if not s or tonumber(s) <= now then return -2 end
  if tonumber(s) >= {NO_LEASE} then return -4 end
  scores[i] = s
  if first == nil or tonumber(s) < first then first = tonumber(s) end
end
for i = 3, 2 + n do
  redis.call('ZADD', KEYS[2], scores[i], ARGV[i + n])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return first - now
",
    ))
});

/// The scripts a permit's adoption may load after `NOSCRIPT`.
pub(crate) static PERMIT_ADOPT_SCRIPTS: [&LazyLock<Script>; 1] = [&PERMIT_ADOPT];

/// The raw bytes of a permit ticket's value: its ids, joined by commas, each
/// an even number of hex digits (the expiry set's member, as Redisson's
/// `hexDump` prints it). `None` for anything else. Ids are not read further:
/// their length and contents are their writer's.
pub(crate) fn permit_ids(value: &str) -> Option<Vec<Vec<u8>>> {
    value.split(',').map(hex_bytes).collect()
}

/// `hex`'s bytes: an even, non-zero number of hex digits.
fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

/// `n` new permit ids of the client `id` (marked when it declared liveness,
/// as its acquires write them), joined by commas: the value of an adopted
/// hold.
pub(crate) fn adopter_ids(id: &ClientId, n: usize) -> String {
    let tag = id.tag();
    let mut ids = String::with_capacity(41 * n);
    for i in 0..n {
        if i > 0 {
            ids.push(',');
        }
        push_id(&mut ids, tag.as_str(), tag.declares_liveness());
    }
    ids
}

/// The swap of `old`'s permits (ids, checked by [`permit_ids`]) in the
/// semaphore `key` for `new`'s, as one `EVALSHA` (its clock read now).
pub(crate) fn permit_adopt_cmd(key: &str, old: &[Vec<u8>], new: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(PERMIT_ADOPT.get_hash())
        .arg(2)
        .arg(key)
        .arg(timeouts(key))
        .arg(now_millis())
        .arg(old.len());
    for id in old.iter().chain(new) {
        cmd.arg(&id[..]);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_are_any_even_length_hex_joined_by_commas() {
        let ids = permit_ids("00ff,0123456789abcdef0123456789ABCDEF0a").unwrap();
        assert_eq!(ids[0], [0, 255]);
        assert_eq!(ids[1].len(), 17);
        for bad in ["", "0", "abc", "zz", "00,", ",00", "00 ff", "0x00"] {
            assert!(permit_ids(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn adopter_ids_are_the_clients_and_new() {
        let id = ClientId::new();
        let ids = adopter_ids(&id, 2);
        let (a, b) = ids.split_once(',').unwrap();
        assert!(a.starts_with(id.tag().as_str()) && a.len() == 32, "{a}");
        assert_ne!(a, b);
        assert_eq!(permit_ids(&ids).unwrap().len(), 2);
    }
}
