//! Shards a Kubernetes API server can filter by: server-side sharded list and watch
//! (KEP-5866, kube-apiserver's alpha feature gate `ShardedListAndWatch`).
//!
//! The server hashes one field of each object, `object.metadata.namespace` or
//! `object.metadata.uid` ([`ShardField`]), with 64-bit FNV-1a over its UTF-8 bytes
//! ([`field_hash`]), and returns only the items and watch events whose hash falls in one of the
//! ranges of the request's `shardSelector` ([`ShardSelector`]). Shard `i` of `n` is the range
//! of hashes `h` with `⌊h × n / 2⁶⁴⌋ = i` ([`HashRange::of_shard`], [`shard_of_hash`]), so the
//! ranges of all `n` shards tile the hash space and a replica's selector is the union of the
//! ranges of the shards it holds, adjacent ones merged.
//!
//! # Examples
//!
//! ```
//! use ctrlq_controller::shard::{ShardField, ShardSelector, field_hash, shard_of_hash};
//!
//! let selector = ShardSelector::for_shards(ShardField::Namespace, [0, 1], 4).unwrap();
//! assert_eq!(
//!     selector.to_string(),
//!     "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')"
//! );
//! // The server keeps exactly the objects whose namespace hashes into shards 0 and 1.
//! let team = field_hash("team-a");
//! assert_eq!(selector.matches_hash(team), shard_of_hash(team, 4) < 2);
//! ```

use std::fmt;

/// The field of an object a server-side shard hashes: the server supports these two.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::ShardField;
///
/// assert_eq!(ShardField::Namespace.path(), "object.metadata.namespace");
/// assert_eq!(ShardField::Uid.path(), "object.metadata.uid");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardField {
    /// `metadata.namespace` (empty for a cluster-scoped object): every object of a namespace is
    /// in one shard, so a key (`namespace/name`) tells its shard, before and after the object
    /// behind it is deleted and created again.
    ///
    /// **Namespaces named alike share a shard.** FNV-1a multiplies by a prime of 2⁴⁰ + 435 after
    /// each byte, so a byte `k` places from the end moves the hash's high bits only through
    /// `k` multiplications: names that differ only in their last characters (`team-1` …
    /// `team-9`, `ns-00` … `ns-49`) hash within a sliver of the space and fall in one shard
    /// whatever the shard count, because a shard is a contiguous range of the high bits. Shard
    /// by namespace only where namespace names differ early (or use [`Uid`](Self::Uid)).
    Namespace,
    /// `metadata.uid`: spreads objects evenly however few namespaces hold them, but a name
    /// deleted and created again gets a new uid, and so, possibly, another shard.
    Uid,
}

/// A range of field hashes, `[start, end)`, with `end` at most 2⁶⁴.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::HashRange;
///
/// let last = HashRange::of_shard(2, 3).unwrap();
/// assert_eq!(last.start(), 0xaaaa_aaaa_aaaa_aaab);
/// assert_eq!(last.end(), 1 << 64);
/// assert!(last.contains(u64::MAX));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashRange {
    start: u64,
    end: u128,
}

/// What keeps a [`ShardSelector`] from being made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardSelectorError {
    /// No shard was given. A request without a selector lists every object, so an empty set
    /// of shards has no selector: watch nothing instead.
    #[error("no shard held: a shard selector needs at least one shard")]
    NoShards,
    /// A shard is not below the shard count (or the count is zero).
    #[error("shard {shard} is not among {shards} shards")]
    OutOfRange {
        /// The shard given.
        shard: u32,
        /// The shard count.
        shards: u32,
    },
}

/// The `shardSelector` of a list or watch request: the union of hash ranges of one field.
/// Its [`Display`](fmt::Display) is the wire form, which the server parses and echoes back in a
/// list's `metadata.shardInfo.selector` when it applied it.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::{ShardField, ShardSelector, ShardSelectorError};
///
/// let selector = ShardSelector::for_shards(ShardField::Uid, [3, 0], 4).unwrap();
/// assert_eq!(
///     selector.to_string(),
///     "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
///      shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
/// );
/// assert_eq!(
///     ShardSelector::for_shards(ShardField::Uid, [], 4),
///     Err(ShardSelectorError::NoShards)
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<HashRange>,
}

/// 64-bit FNV-1a of `value`'s UTF-8 bytes: the hash the server computes of a shard field.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::field_hash;
///
/// assert_eq!(field_hash(""), 0xcbf2_9ce4_8422_2325); // FNV-1a's offset basis
/// ```
#[must_use]
pub fn field_hash(value: &str) -> u64 {
    super::key::fnv1a(value.as_bytes())
}

/// The shard among `shards` whose [`HashRange`] holds `hash`: `⌊hash × shards / 2⁶⁴⌋`; 0 when
/// `shards` is 0.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::shard_of_hash;
///
/// assert_eq!(shard_of_hash(0x7fff_ffff_ffff_ffff, 2), 0);
/// assert_eq!(shard_of_hash(0x8000_0000_0000_0000, 2), 1);
/// ```
#[must_use]
pub fn shard_of_hash(hash: u64, shards: u32) -> u32 {
    // Below `shards`, so a `u32`.
    u32::try_from((u128::from(hash) * u128::from(shards)) >> 64).unwrap_or(0)
}

// ===== impl ShardField =====

impl ShardField {
    /// The field path the server's selector names.
    #[must_use]
    pub fn path(self) -> &'static str {
        match self {
            Self::Namespace => "object.metadata.namespace",
            Self::Uid => "object.metadata.uid",
        }
    }
}

// ===== impl HashRange =====

impl HashRange {
    /// The hashes of shard `shard` among `shards`: `[⌈shard × 2⁶⁴ / shards⌉, ⌈(shard + 1) ×
    /// 2⁶⁴ / shards⌉)`, exactly the hashes [`shard_of_hash`] puts in it; `None` unless `shard
    /// < shards`.
    #[must_use]
    pub fn of_shard(shard: u32, shards: u32) -> Option<Self> {
        (shard < shards).then(|| Self {
            start: u64::try_from(boundary(shard, shards)).unwrap_or(u64::MAX),
            end: boundary(shard + 1, shards),
        })
    }

    /// The first hash in the range.
    #[must_use]
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The first hash past the range (2⁶⁴ for the last shard).
    #[must_use]
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` is in the range.
    #[must_use]
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }
}

/// `⌈i × 2⁶⁴ / n⌉` for `0 < n` and `i ≤ n`.
fn boundary(i: u32, n: u32) -> u128 {
    (u128::from(i) << 64).div_ceil(u128::from(n))
}

// ===== impl ShardSelector =====

impl ShardSelector {
    /// The selector of the objects whose `field` hashes into any of `shards`' given shards.
    ///
    /// # Errors
    ///
    /// [`ShardSelectorError::NoShards`] when `held` is empty; [`ShardSelectorError::OutOfRange`]
    /// when a shard is not below `shards`.
    pub fn for_shards(
        field: ShardField,
        held: impl IntoIterator<Item = u32>,
        shards: u32,
    ) -> Result<Self, ShardSelectorError> {
        let mut held: Vec<u32> = held.into_iter().collect();
        held.sort_unstable();
        held.dedup();
        let mut ranges: Vec<HashRange> = Vec::with_capacity(held.len());
        for shard in held {
            let range = HashRange::of_shard(shard, shards)
                .ok_or(ShardSelectorError::OutOfRange { shard, shards })?;
            match ranges.last_mut() {
                Some(last) if last.end == u128::from(range.start) => last.end = range.end,
                _ => ranges.push(range),
            }
        }
        if ranges.is_empty() {
            return Err(ShardSelectorError::NoShards);
        }
        Ok(Self { field, ranges })
    }

    /// The field the selector hashes.
    #[must_use]
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// Its ranges, in order, none adjacent to the next.
    #[must_use]
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// Whether a field whose hash is `hash` is selected.
    #[must_use]
    pub fn matches_hash(&self, hash: u64) -> bool {
        self.ranges.iter().any(|range| range.contains(hash))
    }

    /// Whether an object whose field reads `value` is selected.
    #[must_use]
    pub fn matches_value(&self, value: &str) -> bool {
        self.matches_hash(field_hash(value))
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '0x{:016x}', '0x{:016x}')",
                self.field.path(),
                range.start,
                range.end
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_wire_form_has_sixteen_digits_and_two_to_the_64_as_the_last_end() {
        let all = ShardSelector::for_shards(ShardField::Namespace, [0], 1).unwrap();
        assert_eq!(
            all.to_string(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"
        );
        let middle = ShardSelector::for_shards(ShardField::Uid, [1], 3).unwrap();
        assert_eq!(
            middle.to_string(),
            "shardRange(object.metadata.uid, '0x5555555555555556', '0xaaaaaaaaaaaaaaab')"
        );
    }

    #[test]
    fn adjacent_shards_merge_and_gaps_split() {
        let s = ShardSelector::for_shards(ShardField::Uid, [5, 1, 2, 7, 2], 8).unwrap();
        let bounds: Vec<(u64, u128)> = s.ranges().iter().map(|r| (r.start(), r.end())).collect();
        assert_eq!(
            bounds,
            [(1 << 61, 3 << 61), (5 << 61, 6 << 61), (7 << 61, 1 << 64),]
        );
        assert_eq!(s.field(), ShardField::Uid);
    }

    #[test]
    fn a_range_holds_its_start_and_not_its_end() {
        let (low, high) = (
            HashRange::of_shard(0, 2).unwrap(),
            HashRange::of_shard(1, 2).unwrap(),
        );
        assert!(low.contains(0) && low.contains((1 << 63) - 1) && !low.contains(1 << 63));
        assert!(high.contains(1 << 63) && high.contains(u64::MAX) && !high.contains(0));
    }

    #[test]
    fn bad_shards_are_typed_errors() {
        assert_eq!(
            ShardSelector::for_shards(ShardField::Uid, [4], 4),
            Err(ShardSelectorError::OutOfRange {
                shard: 4,
                shards: 4
            })
        );
        assert_eq!(
            ShardSelector::for_shards(ShardField::Uid, [0], 0),
            Err(ShardSelectorError::OutOfRange {
                shard: 0,
                shards: 0
            })
        );
        assert_eq!(
            ShardSelector::for_shards(ShardField::Uid, Vec::new(), 4),
            Err(ShardSelectorError::NoShards)
        );
        assert_eq!(HashRange::of_shard(0, 0), None);
        assert_eq!(shard_of_hash(u64::MAX, 0), 0);
    }

    /// The server's hash: Go's `hash/fnv` New64a over the field's bytes (published vectors).
    #[test]
    fn the_field_hash_is_fnv1a_64() {
        assert_eq!(field_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(field_hash("foobar"), 0x8594_4171_f739_67e8);
    }

    /// The documented weakness of namespace shards: names one character apart at their end
    /// fall in one shard, names apart early spread.
    #[test]
    fn namespaces_apart_only_at_their_end_share_a_shard() {
        for shards in [2, 4, 16, 256] {
            let alike: BTreeSet<u32> = (0..50)
                .map(|i| shard_of_hash(field_hash(&format!("ns-{i:02}")), shards))
                .collect();
            assert_eq!(alike.len(), 1, "{shards} shards: {alike:?}");
        }
        let apart: BTreeSet<u32> = (0..50)
            .map(|i| shard_of_hash(field_hash(&format!("{i:02}-ns")), 4))
            .collect();
        assert_eq!(apart.len(), 4, "{apart:?}");
    }

    proptest! {
        /// Every hash is in exactly one shard's range, the one `shard_of_hash` names, and a
        /// selector of some shards selects exactly the hashes of those shards.
        #[test]
        fn ranges_tile_the_hash_space_as_shard_of_hash_divides_it(
            hash in prop_oneof![any::<u64>(), Just(0u64), Just(u64::MAX)],
            shards in 1u32..=1024,
            held in proptest::collection::vec(0u32..1024, 1..8),
        ) {
            let shard = shard_of_hash(hash, shards);
            prop_assert!(shard < shards);
            for other in [0, shard.saturating_sub(1), shard, shard + 1, shards - 1] {
                if let Some(range) = HashRange::of_shard(other, shards) {
                    prop_assert_eq!(range.contains(hash), other == shard);
                }
            }
            let held: Vec<u32> = held.into_iter().map(|s| s % shards).collect();
            let selector = ShardSelector::for_shards(ShardField::Uid, held.clone(), shards).unwrap();
            prop_assert_eq!(selector.matches_hash(hash), held.contains(&shard));
        }
    }
}
