//! The assignment every member of a group computes from the same round view:
//! who should hold each partition. A pure function, so that members reading the
//! same membership and ownership agree without talking to each other.
//!
//! - **Quotas.** With N members and M partitions each gets ⌊M/N⌋, and M mod N of
//!   them one more: those that score highest on a fixed key. Not those holding
//!   most now: while partitions are in transit (released, not yet taken) the
//!   loads change from round to round, and quotas that followed them would move
//!   partitions that need not move.
//! - **Sticky.** A member keeps what it holds up to its quota, the partitions it
//!   scores highest on first (rendezvous hashing).
//! - **Rendezvous.** Every other partition (free, held by nobody known, or over
//!   its owner's quota) goes to the member under quota that scores highest on it,
//!   so a join or a leave moves about M/N partitions and no more.
//! - **Damped.** Of the partitions that would move from one live member to
//!   another, only the first `max_moves` (by number) move this round.

/// A stable 64-bit score of `partition` for `member` (FNV-1a, then a
/// splitmix64 finish): the same in every process and every build.
pub(crate) fn score(member: &str, partition: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain(partition.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Each partition's target member (an index into `members`, sorted by id), from
/// its present owner among `members` (`None`: free, or held by no live member
/// known). Empty when `members` is.
pub(crate) fn assign(members: &[String], owner: &[Option<usize>], max_moves: usize) -> Vec<usize> {
    let n = members.len();
    let m = owner.len();
    if n == 0 {
        return Vec::new();
    }
    let mut by_score: Vec<usize> = (0..n).collect();
    by_score.sort_by_key(|&j| (std::cmp::Reverse(score(&members[j], u32::MAX)), j));
    let mut quota = vec![m / n; n];
    for &j in by_score.iter().take(m % n) {
        quota[j] += 1;
    }
    let mut target: Vec<Option<usize>> = vec![None; m];
    let mut count = vec![0usize; n];
    for (j, name) in members.iter().enumerate() {
        let mut mine: Vec<usize> = (0..m).filter(|&p| owner[p] == Some(j)).collect();
        mine.sort_by_key(|&p| std::cmp::Reverse(score(name, part(p))));
        for p in mine.into_iter().take(quota[j]) {
            target[p] = Some(j);
            count[j] += 1;
        }
    }
    for (p, slot) in target.iter_mut().enumerate() {
        if slot.is_some() {
            continue;
        }
        let best = (0..n)
            .filter(|&j| count[j] < quota[j])
            .max_by_key(|&j| (score(&members[j], part(p)), std::cmp::Reverse(j)));
        if let Some(j) = best {
            *slot = Some(j);
            count[j] += 1;
        }
    }
    let mut moves = 0;
    target
        .into_iter()
        .enumerate()
        .map(|(p, t)| match (owner[p], t) {
            (Some(a), Some(b)) if a != b => {
                moves += 1;
                if moves > max_moves { a } else { b }
            }
            (_, t) => t.unwrap_or(0),
        })
        .collect()
}

fn part(p: usize) -> u32 {
    u32::try_from(p).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i:02}")).collect()
    }

    /// 64 partitions assigned to eight members, as the owners they now are, and
    /// the members with a ninth (`m99`) joined.
    fn eight_then_a_ninth() -> (Vec<usize>, Vec<Option<usize>>, Vec<String>) {
        let eight = ids(8);
        let before = assign(&eight, &[None; 64], usize::MAX);
        let owner: Vec<Option<usize>> = before.iter().map(|&j| Some(j)).collect();
        let mut nine = eight;
        nine.push("m99".into());
        (before, owner, nine)
    }

    fn loads(target: &[usize], n: usize) -> Vec<usize> {
        let mut l = vec![0; n];
        for &j in target {
            l[j] += 1;
        }
        l
    }

    #[test]
    fn a_fresh_group_is_balanced_within_one() {
        for n in 1..=10 {
            let t = assign(&ids(n), &[None; 64], usize::MAX);
            let l = loads(&t, n);
            assert!(
                l.iter().max().unwrap() - l.iter().min().unwrap() <= 1,
                "{l:?}"
            );
        }
    }

    #[test]
    fn a_join_moves_only_what_the_new_member_needs() {
        let (before, owner, nine) = eight_then_a_ninth();
        let after = assign(&nine, &owner, usize::MAX);
        let moved = (0..64).filter(|&p| after[p] != before[p]).count();
        assert!(moved <= 64_usize.div_ceil(9) + 1, "moved {moved}");
        let l = loads(&after, 9);
        assert!(
            l.iter().max().unwrap() - l.iter().min().unwrap() <= 1,
            "{l:?}"
        );
        // Every move goes to the new member.
        assert!((0..64).all(|p| after[p] == before[p] || after[p] == 8));
    }

    #[test]
    fn a_leave_moves_only_the_leavers_partitions() {
        let nine = ids(9);
        let before = assign(&nine, &[None; 64], usize::MAX);
        // m04 leaves: its partitions are free, the others keep theirs.
        let eight: Vec<String> = nine.iter().filter(|i| *i != "m04").cloned().collect();
        let owner: Vec<Option<usize>> = before
            .iter()
            .map(|&j| match j {
                4 => None,
                j if j > 4 => Some(j - 1),
                j => Some(j),
            })
            .collect();
        let after = assign(&eight, &owner, usize::MAX);
        for p in 0..64 {
            if let Some(o) = owner[p] {
                assert_eq!(after[p], o, "partition {p} moved");
            }
        }
        assert_eq!(loads(&after, 8), [8; 8]);
    }

    #[test]
    fn moves_per_round_are_bounded_and_free_ones_are_not_moves() {
        let (before, owner, nine) = eight_then_a_ninth();
        let after = assign(&nine, &owner, 2);
        assert_eq!((0..64).filter(|&p| after[p] != before[p]).count(), 2);
        // Same inputs, same answer: members agree.
        assert_eq!(after, assign(&nine, &owner, 2));
    }

    #[test]
    fn scores_are_stable_across_builds() {
        // Members on other versions must agree: the value is pinned.
        assert_eq!(score("a", 0), 3_469_425_430_991_769_543);
        assert_ne!(score("a", 0), score("a", 1));
        assert_ne!(score("a", 0), score("b", 0));
    }
}
