//! client-go's leader-election metrics in a `prometheus-client` registry, under the names and
//! help texts Kubernetes dashboards already read (feature `prometheus`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `leader_election_master_status` | gauge: 1 leading, 0 not | `name` |
//! | `leader_election_slowpath_total` | counter: renews that needed a get | `name` |
//! | `leader_election_lock_errors_total` | counter: failed lock operations (ours) | `name` |
//!
//! `name` is the election's [`name`](crate::LeaderElectionConfig::name).
//!
//! # Examples
//!
//! ```
//! use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
//! use prometheus_client::registry::Registry;
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let mut registry = Registry::default();
//! let metrics = ctrlq_leader::prometheus::LeaderMetrics::register(&mut registry);
//! let config = LeaderElectionConfig::default().name("my-controller");
//! let elector = LeaderElector::new(MemoryStore::new().lock("a"), config)
//!     .unwrap()
//!     .metrics(metrics);
//! let encode = |registry: &Registry| {
//!     let mut text = String::new();
//!     prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
//!     text
//! };
//! elector
//!     .run(CancellationToken::new(), |_| async {
//!         assert!(encode(&registry).contains(r#"leader_election_master_status{name="my-controller"} 1"#));
//!     })
//!     .await;
//! assert!(encode(&registry).contains(r#"leader_election_master_status{name="my-controller"} 0"#));
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The metric families, registered once; every elector given them reports under its own `name`
/// label. [`register`](Self::register) returns them in an `Arc`, as every crate's metrics do.
#[derive(Clone)]
pub struct LeaderMetrics {
    master_status: Family<Labels, Gauge>,
    slowpath: Family<Labels, Counter>,
    lock_errors: Family<Labels, Counter>,
}

impl fmt::Debug for LeaderMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderMetrics").finish_non_exhaustive()
    }
}

fn labels(name: &str) -> Labels {
    vec![("name".to_owned(), name.to_owned())]
}

impl LeaderMetrics {
    /// Registers the families in `registry` and returns the handle to give electors
    /// ([`LeaderElector::metrics`](crate::LeaderElector::metrics)). Register once per
    /// registry: the names are fixed.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// let metrics = ctrlq_leader::prometheus::LeaderMetrics::register(&mut registry);
    /// # drop(metrics);
    /// ```
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let me = Self {
            master_status: Family::default(),
            slowpath: Family::default(),
            lock_errors: Family::default(),
        };
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
             backup, 1 indicates master. 'name' is the string used to identify the lease. \
             Please make sure to group by name.",
            me.master_status.clone(),
        );
        registry.register(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases. 'name' is the \
             string used to identify the lease. Please make sure to group by name.",
            me.slowpath.clone(),
        );
        registry.register(
            "leader_election_lock_errors",
            "Total number of failed lock operations (the store unreachable, timed out or \
             refusing). 'name' is the string used to identify the lease.",
            me.lock_errors.clone(),
        );
        Arc::new(me)
    }

    pub(crate) fn set_leading(&self, name: &str, leading: bool) {
        self.master_status
            .get_or_create(&labels(name))
            .set(i64::from(leading));
    }

    pub(crate) fn slow_path(&self, name: &str) {
        self.slowpath.get_or_create(&labels(name)).inc();
    }

    pub(crate) fn lock_error(&self, name: &str) {
        self.lock_errors.get_or_create(&labels(name)).inc();
    }
}
