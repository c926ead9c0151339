//! Which shard a key belongs to: a hash that every replica and every version of this crate
//! computes alike.

use std::borrow::Cow;

/// A key whose shard every replica computes alike from its bytes ([`shard_of`]).
///
/// `std::hash::Hash` is not used: its output depends on the hasher and, for std types, on how
/// the standard library writes them, which no crate promises to keep across Rust versions, and
/// replicas of one controller may run binaries built apart. The bytes here are part of this
/// crate's contract: a string's UTF-8 bytes; an integer's little-endian bytes; a kube-runtime
/// `ObjectRef` (feature `kube`) as `namespace/name` (or `name` when cluster-scoped).
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::{ShardKey, shard_of};
///
/// #[derive(Clone, Debug, PartialEq, Eq, Hash)]
/// struct Pod { namespace: String, name: String }
///
/// impl ShardKey for Pod {
///     fn shard_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
///         format!("{}/{}", self.namespace, self.name).into_bytes().into()
///     }
/// }
///
/// let pod = Pod { namespace: "default".into(), name: "web-0".into() };
/// assert_eq!(shard_of(&pod, 12), shard_of(&"default/web-0".to_owned(), 12));
/// ```
pub trait ShardKey {
    /// The bytes the shard is computed from.
    fn shard_bytes(&self) -> Cow<'_, [u8]>;

    /// The namespace of the object behind the key, for a controller sharded by namespace
    /// ([`Sharding::by_namespace`](super::Sharding::by_namespace)): by default, what
    /// [`shard_bytes`](Self::shard_bytes) holds before its first `/` (so `namespace/name`
    /// keys work as they are), or empty when it holds no `/` (a cluster-scoped object's
    /// namespace, as the API server hashes it). A kube-runtime `ObjectRef` gives its namespace.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::shard::ShardKey;
    ///
    /// assert_eq!("team-a/web".shard_namespace(), "team-a");
    /// assert_eq!("a-node".shard_namespace(), "");
    /// ```
    fn shard_namespace(&self) -> Cow<'_, str> {
        let bytes = self.shard_bytes();
        let namespace = bytes
            .iter()
            .position(|b| *b == b'/')
            .map_or(&[][..], |slash| &bytes[..slash]);
        Cow::Owned(String::from_utf8_lossy(namespace).into_owned())
    }
}

/// The shard of `key` among `shards`: FNV-1a (64-bit) of [`ShardKey::shard_bytes`], through
/// splitmix64's finalizer, scaled to `shards` by its high bits (`h × shards >> 64`); 0 when
/// `shards` is 0. The finalizer matters: FNV-1a's low bits depend only on the low bits of each
/// byte, so a plain remainder would put keys that differ in one letter's high bits (`a` and
/// `q`) in the same shard.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::shard_of;
/// // Part of the contract: these never change.
/// assert_eq!(shard_of(&"default/pod-1".to_owned(), 12), 8);
/// assert_eq!(shard_of(&42u64, 12), 10);
/// ```
#[must_use]
pub fn shard_of<K: ShardKey + ?Sized>(key: &K, shards: u32) -> u32 {
    if shards == 0 {
        return 0;
    }
    let h = mix(fnv1a(&key.shard_bytes()));
    // Below `shards`, a `u32`.
    u32::try_from((u128::from(h) * u128::from(shards)) >> 64).unwrap_or(0)
}

/// splitmix64's finalizer: every output bit depends on every input bit.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a, 64-bit.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl ShardKey for str {
    fn shard_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl ShardKey for String {
    fn shard_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl ShardKey for &str {
    fn shard_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

macro_rules! int_keys {
    ($($t:ty),*) => {$(
        impl ShardKey for $t {
            fn shard_bytes(&self) -> Cow<'_, [u8]> {
                Cow::Owned(self.to_le_bytes().to_vec())
            }
        }
    )*};
}

int_keys!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

#[cfg(feature = "kube")]
impl<K: kube::Resource> ShardKey for kube::runtime::reflector::ObjectRef<K>
where
    K::DynamicType: Clone,
{
    fn shard_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Owned(match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name).into_bytes(),
            None => self.name.clone().into_bytes(),
        })
    }

    fn shard_namespace(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.namespace.as_deref().unwrap_or(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// The contract: these values never change (computed independently of this code).
    #[test]
    fn shards_match_the_reference_values() {
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
        assert_eq!(mix(0xdead_beef), 0x4e06_2702_ec92_9eea);
        for (key, twelve, thousand, most) in [
            ("default/pod-1", 8, 677, 2_911_302_594),
            ("kube-system/coredns", 0, 78, 336_348_975),
            ("a", 0, 10, 46_185_919),
            ("", 11, 957, 4_113_176_040),
        ] {
            assert_eq!(shard_of(key, 12), twelve, "{key:?}");
            assert_eq!(shard_of(key, 1000), thousand, "{key:?}");
            assert_eq!(shard_of(key, u32::MAX), most, "{key:?}");
        }
    }

    #[cfg(feature = "kube")]
    #[test]
    fn an_object_ref_is_its_namespace_and_name() {
        use k8s_openapi::api::core::v1::{Namespace, Pod};
        use kube::runtime::reflector::ObjectRef;
        let pod = ObjectRef::<Pod>::new("web-0").within("default");
        assert_eq!(&*pod.shard_bytes(), b"default/web-0");
        assert_eq!(shard_of(&pod, 1000), shard_of("default/web-0", 1000));
        let ns = ObjectRef::<Namespace>::new("default");
        assert_eq!(&*ns.shard_bytes(), b"default");
        assert_eq!(pod.shard_namespace(), "default");
        assert_eq!(ns.shard_namespace(), "", "cluster-scoped");
    }

    #[test]
    fn a_key_s_namespace_is_what_precedes_its_first_slash() {
        assert_eq!("ns/a/b".to_owned().shard_namespace(), "ns");
        assert_eq!("/a".shard_namespace(), "");
        assert_eq!("".shard_namespace(), "");
        assert_eq!(7u8.shard_namespace(), "");
    }

    #[test]
    fn strings_and_integers_hash_their_bytes() {
        assert_eq!(&*"ab".to_owned().shard_bytes(), b"ab");
        assert_eq!(&*(&"ab").shard_bytes(), b"ab");
        assert_eq!(&*"ab".shard_bytes(), b"ab");
        assert_eq!(&*0x0102u16.shard_bytes(), [2, 1]);
        assert_eq!(&*(-1i32).shard_bytes(), [0xff; 4]);
    }

    #[test]
    fn keys_spread_over_every_shard_and_zero_shards_is_shard_zero() {
        let mut seen = [0u32; 12];
        for i in 0..1200u32 {
            seen[shard_of(&format!("default/pod-{i}"), 12) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (60..=140).contains(&n)), "{seen:?}");
        // One letter apart in a high bit of its byte: FNV-1a alone would agree modulo 8.
        let apart = (b'a'..=b'z')
            .map(|c| shard_of(&format!("default/pod-{}", c as char), 8))
            .collect::<std::collections::BTreeSet<_>>();
        assert!(apart.len() >= 6, "{apart:?}");
        assert_eq!(shard_of("x", 0), 0);
        assert_eq!(shard_of(&"x".to_owned(), 1), 0);
        assert_eq!(shard_of(&"x", 7), shard_of("x", 7));
    }
}
