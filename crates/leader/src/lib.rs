//! Async lease-based leader election over a pluggable lock.
//!
//! A port of client-go's `tools/leaderelection` to tokio: a [`LeaderElector`] acquires and renews
//! a [`LeaderRecord`] through a [`Lock`] (get, create, compare-and-set update), judges expiry only
//! by when it last saw the record change on its own monotonic clock, and hands the leading work a
//! [`Leadership`]: a cancellation token that fires before another candidate could take the lease
//! over, and a fencing token. [`LeaderElector::run_until_cancelled`] stands again after each
//! term until shutdown, and [`LeaderElector::subscribe_leadership`] reports every transition
//! ([`LeadershipEvent`]) with its instant and fencing token, none lost.
//!
//! # Locks
//!
//! Every lock of the workspace's crates is `parking_lot`'s `Mutex`, one family for all: it does
//! not poison, so a panic in a caller's code while a lock is held (a hook, a hint, a lock
//! backend) cannot wedge what the lock guards, which is consistent between transitions; and its
//! guard is not `Send`, so a lock held across an `.await` does not compile in a spawned task.
//!
//! # Examples
//!
//! ```
//! use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let store = MemoryStore::new();
//! let elector = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
//! let out = elector
//!     .run(CancellationToken::new(), |leadership| async move { leadership.fencing_token() })
//!     .await;
//! assert_eq!(out, Some(0));
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod elector;
mod error;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
mod etcd;
mod events;
mod jitter;
mod leadership;
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
mod lease;
mod lock;
mod memory;
mod multi;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
mod record;
mod status;

pub use config::{DEFAULT_GRACE_PERIOD, ElectionTiming, LeaderElectionConfig};
pub use elector::LeaderElector;
pub use error::{ConfigError, DEFAULT_REQUEST_TIMEOUT, HealthError, LockError, RequestTimedOut};
#[cfg(feature = "etcd")]
pub use etcd::EtcdLock;
pub use events::{LeadershipEvent, LeadershipEvents};
pub use leadership::{Leadership, LeadershipEnd};
#[cfg(feature = "kube")]
pub use lease::{DEFAULT_FIELD_MANAGER, DEFAULT_USER_AGENT, LeaseLock, lease_record};
pub use lock::Lock;
pub use memory::{MemoryLock, MemoryStore};
pub use multi::{MultiLock, UNKNOWN_LEADER};
pub use record::{LeaderRecord, Versioned};
pub use status::ElectorStatus;
