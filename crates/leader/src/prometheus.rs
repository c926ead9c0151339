//! client-go's leader-election metrics in a `prometheus-client` registry, under the names and
//! help texts Kubernetes dashboards already read (feature `prometheus`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `leader_election_master_status` | gauge: 1 leading, 0 not | `name` |
//! | `leader_election_slowpath_total` | counter: renews that needed a get | `name` |
//! | `leader_election_lock_errors_total` | counter: failed lock operations (ours) | `name` |
//!
//! `name` is the election's [`name`](crate::LeaderElectionConfig::name). The help texts are
//! client-go's, verbatim (no period added).
//!
//! # Serving
//!
//! `prometheus_client::encoding::text::encode` renders the registry in the OpenMetrics text
//! format, ending with `# EOF`: serve it with the content type [`CONTENT_TYPE`],
//! `application/openmetrics-text; version=1.0.0; charset=utf-8`. These metrics have no
//! histogram; a registry that also holds the queue's or the controller's is rendered with
//! `ctrlq_queue_async::prometheus::encode`, which writes histogram bounds as Go's client does.
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

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

// client-go's help texts, verbatim, and ours in the same style: the collector writes them as
// they are (a registry's `register` would add a period to each).
const MASTER_STATUS_HELP: &str = "Gauge of if the reporting system is master of the relevant \
     lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the \
     lease. Please make sure to group by name.";
const SLOWPATH_HELP: &str = "Total number of slow path exercised in renewing leader leases. \
     'name' is the string used to identify the lease. Please make sure to group by name.";
const LOCK_ERRORS_HELP: &str = "Total number of failed lock operations (the store \
     unreachable, timed out or refusing). 'name' is the string used to identify the lease.";

/// The content type of the exposition `prometheus_client::encoding::text::encode` writes:
/// OpenMetrics text 1.0.0, in UTF-8.
///
/// # Examples
///
/// ```
/// // The header an HTTP handler serving the exposition sets.
/// let header = ("content-type", ctrlq_leader::prometheus::CONTENT_TYPE);
/// assert!(header.1.starts_with("application/openmetrics-text; version=1.0.0"));
/// ```
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

impl Collector for LeaderMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // Counters are named without `_total` here: the encoder appends it to their samples.
        let families: [(&str, &str, &dyn EncodeMetric); 3] = [
            (
                "leader_election_master_status",
                MASTER_STATUS_HELP,
                &self.master_status,
            ),
            ("leader_election_slowpath", SLOWPATH_HELP, &self.slowpath),
            (
                "leader_election_lock_errors",
                LOCK_ERRORS_HELP,
                &self.lock_errors,
            ),
        ];
        for (name, help, family) in families {
            family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)?;
        }
        Ok(())
    }
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
        // Clones share their series.
        registry.register_collector(Box::new(me.clone()));
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
