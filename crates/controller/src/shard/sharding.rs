//! [`Sharding`]: how a controller's replicas split its keys.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Weak};

use ctrlq_leader::{ConfigError, LeaderElectionConfig, LeaderElector, Lock};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::key::{ShardKey, shard_of};
use super::server::{field_hash, shard_of_hash};

/// The shards of a [`Controller`](crate::Controller), this replica's identity, and the locks
/// its shard and member records are held through: given to
/// [`Controller::sharded`](crate::Controller::sharded). See the [module docs](super).
///
/// `locks` makes the lock on one record by name (`{prefix}{name}-shard-{i}`,
/// `{prefix}{name}-member-{id}`) for this replica: a `LeaseLock` in the controller's namespace
/// (label it, so that listing the members reads only this controller's Leases), an `EtcdLock`
/// whose key is the name, or a `MemoryStore::named_lock`. The name must reach the store as is:
/// members are listed by that name's prefix.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::shard::{Sharding, ShardingError};
/// use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
/// let store = MemoryStore::new();
/// let s = store.clone();
/// let sharding = Sharding::new(12, "replica-a", move |name: &str| s.named_lock(name, "replica-a"),
///     LeaderElectionConfig::default()).unwrap();
/// assert_eq!(sharding.shards(), 12);
/// let zero = Sharding::new(0, "replica-a", move |name: &str| store.named_lock(name, "replica-a"),
///     LeaderElectionConfig::default());
/// assert!(matches!(zero, Err(ShardingError::ZeroShards)));
/// ```
pub struct Sharding<L> {
    pub(crate) shards: u32,
    pub(crate) identity: String,
    pub(crate) prefix: String,
    pub(crate) locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
    pub(crate) config: LeaderElectionConfig,
    pub(crate) held: watch::Sender<BTreeSet<u32>>,
    /// Keys go to shards by their namespace's hash, as the API server's shard selector
    /// divides objects ([`by_namespace`](Self::by_namespace)).
    pub(crate) by_namespace: bool,
    /// The watches that follow the shards this replica leads (`Watch::for_shards`).
    pub(crate) followers: Mutex<Vec<Weak<dyn ShardFollower>>>,
}

/// What follows the shards a replica leads: a watch that lists and watches only those.
pub(crate) trait ShardFollower: Send + Sync {
    /// The replica leads `shard` now: watch it. The future is ready once the shard's objects
    /// are listed (a watch that fails keeps it pending while it retries), with whether the
    /// list held objects of other shards: the server ignored the shard selector.
    fn gain(&self, shard: u32) -> BoxFuture<'static, bool>;
    /// The replica's term on `shard` has ended: stop watching it and forget its objects.
    fn lose(&self, shard: u32);
}

/// A [`Sharding`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// Zero shards: no key would have a shard.
    #[error("a sharded controller needs at least one shard")]
    ZeroShards,
    /// The replica's identity is empty.
    #[error("the replica identity is empty")]
    EmptyIdentity,
    /// A watch that follows the held shards needs the keys sharded as the API server divides
    /// objects: by namespace ([`Sharding::by_namespace`]).
    #[error("a watch of the held shards needs keys sharded by namespace (Sharding::by_namespace)")]
    NotByNamespace,
    /// The elector configuration (or a lock's request timeout against it) is invalid.
    #[error("invalid election settings: {0}")]
    Config(#[from] ConfigError),
}

impl<L: Lock> Sharding<L> {
    /// `shards` shards for the replica `identity`, its records held through the locks `locks`
    /// makes, each shard's elector (and the membership timing) on `config`. Each shard's elector
    /// releases its lease once a handed-back shard has drained, whatever `config` says about
    /// [`release_on_cancel`](LeaderElectionConfig::release_on_cancel).
    ///
    /// # Errors
    ///
    /// [`ShardingError::ZeroShards`], [`ShardingError::EmptyIdentity`], or the
    /// [`ConfigError`] the elector would refuse `config` (or the locks' request timeout) with.
    pub fn new(
        shards: u32,
        identity: impl Into<String>,
        locks: impl Fn(&str) -> L + Send + Sync + 'static,
        config: LeaderElectionConfig,
    ) -> Result<Self, ShardingError> {
        let identity = identity.into();
        if shards == 0 {
            return Err(ShardingError::ZeroShards);
        }
        if identity.is_empty() {
            return Err(ShardingError::EmptyIdentity);
        }
        let config = config.release_on_cancel(true);
        // The shard electors' rules, checked once on a lock the factory makes.
        LeaderElector::new(locks("validate"), config.clone())?;
        Ok(Self {
            shards,
            identity,
            prefix: String::new(),
            locks: Arc::new(locks),
            config,
            held: watch::Sender::new(BTreeSet::new()),
            by_namespace: false,
            followers: Mutex::new(Vec::new()),
        })
    }

    /// Puts `prefix` before every record name (for example a path for etcd keys).
    #[must_use]
    pub fn record_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Shards keys by the namespace of their objects ([`ShardKey::shard_namespace`]) as the
    /// API server's shard selector divides objects: shard `i` holds the keys whose namespace's
    /// [`field_hash`](super::field_hash) is in [`HashRange::of_shard`](super::HashRange::of_shard)`(i, n)`,
    /// the objects `ShardSelector::for_shards(ShardField::Namespace, [i], n)` selects. So a
    /// replica can watch only the namespaces of the shards it holds, as they move
    /// ([`Watch::for_shards`](crate::kube::Watch::for_shards), feature `kube`).
    ///
    /// Namespace, not uid: a key's shard must follow from the key alone, or the object deleted
    /// and created again under the same `namespace/name` (with a new uid) could land in a shard
    /// another replica holds while this one still reconciles the old object, and one key would
    /// be in two reconciles at once. The cost: a namespace is never split, so the shards are only
    /// as even as the namespaces are many, alike in size, and named apart early: names that differ
    /// only in their last characters (`team-1` … `team-9`) fall in one shard under the server's
    /// hash ([`ShardField::Namespace`](super::ShardField::Namespace)).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::shard::{ShardField, ShardSelector, Sharding, field_hash, shard_of_hash};
    /// use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let sharding = Sharding::new(4, "replica-a", move |name: &str| store.named_lock(name, "replica-a"),
    ///     LeaderElectionConfig::default()).unwrap().by_namespace();
    /// let shard = sharding.shard_of_key("team-a/web");
    /// assert_eq!(shard, sharding.shard_of_key("team-a/db"));
    /// assert_eq!(shard, shard_of_hash(field_hash("team-a"), 4));
    /// let mine = ShardSelector::for_shards(ShardField::Namespace, [shard], 4).unwrap();
    /// assert!(mine.matches_value("team-a"));
    /// ```
    #[must_use]
    pub fn by_namespace(mut self) -> Self {
        self.by_namespace = true;
        self
    }

    /// The shard the runner sends `key` to: [`shard_of`](super::shard_of) by default, the shard
    /// of its namespace once [`by_namespace`](Self::by_namespace).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::shard::{Sharding, shard_of};
    /// use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let sharding = Sharding::new(12, "replica-a", move |name: &str| store.named_lock(name, "replica-a"),
    ///     LeaderElectionConfig::default()).unwrap();
    /// assert_eq!(sharding.shard_of_key("default/pod-1"), shard_of("default/pod-1", 12));
    /// ```
    #[must_use]
    pub fn shard_of_key<K: ShardKey + ?Sized>(&self, key: &K) -> u32 {
        key_shard(self.by_namespace, self.shards)(key)
    }

    /// The shard count.
    #[must_use]
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// This replica's identity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A watch of the shards this replica leads now.
    #[must_use]
    pub fn subscribe_held(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.held.subscribe()
    }
}

impl<L> Sharding<L> {
    /// Has `follower` watch the shards this replica leads from now on.
    pub(crate) fn follow(&self, follower: Weak<dyn ShardFollower>) {
        self.followers.lock().push(follower);
    }

    /// Tells the followers that this replica leads `shard`; ready once each has listed it, with
    /// whether any list was not filtered by the server.
    pub(crate) async fn gain(&self, shard: u32) -> bool {
        let listed: Vec<_> = self
            .followers
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|f| f.gain(shard))
            .collect();
        let unfiltered = futures::future::join_all(listed).await;
        unfiltered.into_iter().any(|u| u)
    }

    /// Tells the followers that this replica's term on `shard` has ended.
    pub(crate) fn lose(&self, shard: u32) {
        let followers: Vec<_> = self
            .followers
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for follower in followers {
            follower.lose(shard);
        }
    }
}

/// The runner's shard function for `shards` shards, by namespace or by the whole key.
pub(crate) fn key_shard<K: ShardKey + ?Sized>(
    by_namespace: bool,
    shards: u32,
) -> impl Fn(&K) -> u32 {
    move |key: &K| {
        if by_namespace {
            shard_of_hash(field_hash(&key.shard_namespace()), shards)
        } else {
            shard_of(key, shards)
        }
    }
}

impl<L> fmt::Debug for Sharding<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("shards", &self.shards)
            .field("identity", &self.identity)
            .field("prefix", &self.prefix)
            .field("by_namespace", &self.by_namespace)
            .field("held", &*self.held.borrow())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{field_hash, shard_of, shard_of_hash};
    use ctrlq_leader::MemoryStore;

    fn sharding(shards: u32) -> Sharding<ctrlq_leader::MemoryLock> {
        let store = MemoryStore::new();
        let locks = move |name: &str| store.named_lock(name, "a");
        Sharding::new(shards, "a", locks, LeaderElectionConfig::default()).unwrap()
    }

    #[test]
    fn a_key_goes_to_its_namespace_s_shard_once_by_namespace() {
        let (by_key, by_namespace) = (sharding(64), sharding(64).by_namespace());
        for key in ["0-team/a", "1-team/b", "2-team/c", "7-team/web"] {
            assert_eq!(by_key.shard_of_key(key), shard_of(key, 64), "{key}");
            let namespace = key.split('/').next().unwrap();
            assert_eq!(
                by_namespace.shard_of_key(key),
                shard_of_hash(field_hash(namespace), 64),
                "{key}"
            );
        }
        assert!(format!("{by_namespace:?}").contains("by_namespace: true"));
        assert!(format!("{by_key:?}").contains("shards: 64"));
    }
}
