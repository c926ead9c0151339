//! The elector's warnings for persistent lock failures, captured by a subscriber on each test's
//! thread. In a test binary of their own, where every test sets a subscriber: `tracing` caches
//! whether a call site is enabled across the whole process, so a test running beside them on
//! another thread with no subscriber could have the cache say "disabled" for a call site these
//! tests need to see.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

#[path = "support/bounded.rs"]
mod bounded;
use bounded::bounded;

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(2))
        .jitter_seed(7)
}

/// Counts `warn!` events by message, on the current thread.
#[derive(Default, Clone)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().push(m.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Failures warn when they persist, not once per retry: at the 3rd in a row, then every 30th;
/// and once when the store answers again.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn persistent_failures_should_warn_a_few_times_not_per_retry() {
    let warnings = Warnings::default();
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let store = MemoryStore::new();
    store.fail_next("a", 40);
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let out = timeout(
        Duration::from_secs(600),
        e.run(
            CancellationToken::new(),
            |l| async move { l.fencing_token() },
        ),
    )
    .await
    .unwrap();
    assert_eq!(out, Some(0));
    assert_eq!(e.subscribe_status().borrow().lock_errors, 40);
    let w = warnings.0.lock().unwrap().clone();
    assert_eq!(
        w,
        [
            "lock keeps failing",
            "lock keeps failing",
            "lock answers again"
        ],
        "{w:?}"
    );
}

/// Failures below the threshold, and a store that answers from the start, give no warning; the
/// third failure in a row warns, and so does the answer that ends it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn only_failures_that_reach_the_threshold_should_warn() {
    let warnings = Warnings::default();
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let term = || {
        e.run(
            CancellationToken::new(),
            |l| async move { l.fencing_token() },
        )
    };
    assert_eq!(bounded(term()).await, Some(0));
    store.fail_next("a", 2);
    assert_eq!(bounded(term()).await, Some(1));
    assert_eq!(
        warnings.0.lock().unwrap().len(),
        0,
        "nothing to warn of yet"
    );
    store.fail_next("a", 3);
    assert_eq!(bounded(term()).await, Some(2));
    assert_eq!(e.subscribe_status().borrow().lock_errors, 5);
    let w = warnings.0.lock().unwrap().clone();
    assert_eq!(w, ["lock keeps failing", "lock answers again"], "{w:?}");
}
