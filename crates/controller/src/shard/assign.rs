//! Which member owns which shard: rendezvous hashing (highest random weight) with bounded load.

use super::key::{fnv1a, mix};

/// The owner of every shard among `members`, by index (`owners[shard]` is an index into
/// `members`); empty when there is no member.
///
/// Each shard ranks the members by a weight drawn from the pair (shard, member) and goes to the
/// first of them that has room, shards taken in index order. With `n = q·m + r`, a member has
/// room below `q` shards, or at `q` while fewer than `r` members hold `q + 1`: so every member
/// ends with ⌊n/m⌋ or ⌈n/m⌉ (bounded load), every member computes the same answer from the same
/// member set, and a member joining or leaving moves few shards, mostly those whose first
/// choice changed.
pub(crate) fn assign(members: &[String], shards: u32) -> Vec<usize> {
    if members.is_empty() {
        return Vec::new();
    }
    let m = members.len();
    let n = shards as usize;
    let (q, r) = (n / m, n % m);
    let mut load = vec![0usize; m];
    let mut at_ceiling = 0;
    (0..shards)
        .map(|shard| {
            let mut ranked: Vec<usize> = (0..m).collect();
            ranked.sort_by_key(|&i| std::cmp::Reverse((weight(shard, &members[i]), i)));
            let owner = ranked
                .into_iter()
                .find(|&i| load[i] < q || (load[i] == q && at_ceiling < r))
                .unwrap_or_default();
            if load[owner] == q {
                at_ceiling += 1;
            }
            load[owner] += 1;
            owner
        })
        .collect()
}

/// The shards `member` owns among `members`.
pub(crate) fn shards_of(members: &[String], shards: u32, member: &str) -> Vec<u32> {
    let Some(me) = members.iter().position(|m| m == member) else {
        return Vec::new();
    };
    assign(members, shards)
        .into_iter()
        .zip(0..)
        .filter_map(|(owner, shard)| (owner == me).then_some(shard))
        .collect()
}

/// The rendezvous weight of (shard, member): FNV-1a of the member's bytes and the shard's,
/// through a 64-bit finalizer so that near inputs give far weights.
fn weight(shard: u32, member: &str) -> u64 {
    let mut bytes = member.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(&shard.to_le_bytes());
    mix(fnv1a(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{FileFailurePersistence, RngSeed};

    fn names(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    fn loads(members: &[String], shards: u32) -> Vec<usize> {
        let mut loads = vec![0; members.len()];
        for owner in assign(members, shards) {
            loads[owner] += 1;
        }
        loads
    }

    /// Shards whose owner (by name) differs between two member sets.
    fn moved(before: &[String], after: &[String], shards: u32) -> usize {
        let a = assign(before, shards);
        let b = assign(after, shards);
        a.iter()
            .zip(&b)
            .filter(|(x, y)| before[**x] != after[**y])
            .count()
    }

    #[test]
    fn twelve_shards_settle_evenly() {
        assert_eq!(loads(&names(&["a", "b", "c"]), 12), [4, 4, 4]);
        assert_eq!(loads(&names(&["a", "b"]), 12), [6, 6]);
        let mut five = loads(&names(&["a", "b", "c", "d", "e"]), 12);
        five.sort_unstable();
        assert_eq!(five, [2, 2, 2, 3, 3]);
        assert!(assign(&[], 12).is_empty());
        assert_eq!(shards_of(&names(&["a"]), 3, "a"), [0, 1, 2]);
        assert!(shards_of(&names(&["a"]), 3, "z").is_empty());
    }

    #[test]
    fn a_member_leaving_moves_only_its_shards_and_a_join_moves_few() {
        let three = names(&["a", "b", "c"]);
        let two = names(&["a", "b"]);
        // c's 4 shards move; bounded load may move a few more to keep 6/6.
        let leaving = moved(&three, &two, 12);
        assert!((4..=6).contains(&leaving), "{leaving}");
        let five = names(&["a", "b", "c", "d", "e"]);
        let joining = moved(&three, &five, 12);
        // The two new members take 4 or 5 shards; rendezvous keeps the moves near that.
        assert!((4..=7).contains(&joining), "{joining}");
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
            rng_seed: RngSeed::Fixed(11),
            ..ProptestConfig::default()
        })]
        #[test]
        fn every_member_holds_the_floor_or_the_ceiling(
            n in 1u32..64,
            ids in proptest::collection::btree_set("[a-z]{1,6}", 1..10),
        ) {
            let members: Vec<String> = ids.into_iter().collect();
            let m = members.len();
            let loads = loads(&members, n);
            prop_assert_eq!(loads.iter().sum::<usize>(), n as usize);
            let (lo, hi) = (n as usize / m, (n as usize).div_ceil(m));
            prop_assert!(loads.iter().all(|&l| l <= hi), "{:?}", loads);
            prop_assert!(loads.iter().all(|&l| l >= lo), "{:?}", loads);
            // Order of the member list does not matter beyond names.
            let mut reversed = members.clone();
            reversed.reverse();
            let a: Vec<&String> = assign(&members, n).into_iter().map(|i| &members[i]).collect();
            let b: Vec<&String> = assign(&reversed, n).into_iter().map(|i| &reversed[i]).collect();
            prop_assert_eq!(a, b);
        }
    }
}
