//! client-go's leader-election metrics through prometheus-client (feature `prometheus`).

use std::time::Duration;

use ctrlq_leader::prometheus::LeaderMetrics;
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

#[path = "support/bounded.rs"]
mod bounded;
use bounded::bounded;

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

#[tokio::test(start_paused = true)]
async fn metrics_should_report_status_slow_path_and_lock_errors_per_name() {
    let mut registry = Registry::default();
    let metrics = LeaderMetrics::register(&mut registry);
    let store = MemoryStore::new();
    let config = LeaderElectionConfig::default().name("ctl").jitter_seed(1);
    let e = LeaderElector::new(store.lock("a"), config)
        .unwrap()
        .metrics(metrics.clone());
    assert!(encode(&registry).contains(r#"leader_election_master_status{name="ctl"} 0"#));
    store.fail_next("a", 2);
    let (s, r) = (store.clone(), &registry);
    bounded(e.run(CancellationToken::new(), |_| async move {
        assert!(encode(r).contains(r#"leader_election_master_status{name="ctl"} 1"#));
        // one renew loses a race: it takes the slow path.
        s.lose_next_update("a", 1);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }))
    .await;
    let text = encode(&registry);
    assert!(
        text.contains(r#"leader_election_master_status{name="ctl"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"leader_election_slowpath_total{name="ctl"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"leader_election_lock_errors_total{name="ctl"} 2"#),
        "{text}"
    );
    assert_eq!(e.subscribe_status().borrow().slow_path_renews, 1);
    assert_eq!(e.subscribe_status().borrow().lock_errors, 2);
}

/// Every HELP line is client-go's text exactly (no period added to it, nor to ours), and the
/// exposition is OpenMetrics text, ending with `# EOF`.
#[tokio::test(start_paused = true)]
async fn help_lines_are_client_gos_texts_exactly() {
    let mut registry = Registry::default();
    let metrics = LeaderMetrics::register(&mut registry);
    // Every series exists: a term, a slow-path renew and a lock error.
    let store = MemoryStore::new();
    let config = LeaderElectionConfig::default().name("ctl").jitter_seed(1);
    let e = LeaderElector::new(store.lock("a"), config)
        .unwrap()
        .metrics(metrics);
    store.fail_next("a", 1);
    let s = store.clone();
    bounded(e.run(CancellationToken::new(), |_| async move {
        s.lose_next_update("a", 1);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }))
    .await;
    let text = encode(&registry);
    assert!(
        text.contains(r#"leader_election_slowpath_total{name="ctl"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"leader_election_lock_errors_total{name="ctl"} 1"#),
        "{text}"
    );
    let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
    assert_eq!(
        help,
        [
            "# HELP leader_election_master_status Gauge of if the reporting system is master of \
             the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string \
             used to identify the lease. Please make sure to group by name.",
            "# HELP leader_election_slowpath Total number of slow path exercised in renewing \
             leader leases. 'name' is the string used to identify the lease. Please make sure \
             to group by name.",
            "# HELP leader_election_lock_errors Total number of failed lock operations (the \
             store unreachable, timed out or refusing). 'name' is the string used to identify \
             the lease.",
        ],
        "{text}"
    );
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert_eq!(
        ctrlq_leader::prometheus::CONTENT_TYPE,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
}
