//! [`Sharding`]: how a controller's replicas split its keys.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use ctrlq_leader::{ConfigError, LeaderElectionConfig, LeaderElector, Lock};
use tokio::sync::watch;

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
        })
    }

    /// Puts `prefix` before every record name (for example a path for etcd keys).
    #[must_use]
    pub fn record_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
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

impl<L> fmt::Debug for Sharding<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("shards", &self.shards)
            .field("identity", &self.identity)
            .field("prefix", &self.prefix)
            .field("held", &*self.held.borrow())
            .finish_non_exhaustive()
    }
}
