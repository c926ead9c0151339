//! The reconcile span, alone in its test binary: tracing caches whether a callsite is wanted
//! across the process, and a test in the same process running on another thread without this
//! subscriber can get the callsite cached as unwanted before this test's subscriber is set.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::{Action, Context, Controller};
use support::bounded;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(3600);

/// Records the `key` field of every span named `reconcile`, and which of them were entered.
#[derive(Default)]
struct ReconcileSpans {
    keys: Mutex<Vec<String>>,
    entered: Mutex<Vec<u64>>,
    next_id: std::sync::atomic::AtomicU64,
}

struct KeyField(String);

impl tracing::field::Visit for KeyField {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "key" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for ReconcileSpans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = 1 + self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if span.metadata().name() == "reconcile" {
            let mut key = KeyField(String::new());
            span.record(&mut key);
            self.keys.lock().unwrap().push(key.0);
        }
        tracing::span::Id::from_u64(id)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, span: &tracing::span::Id) {
        self.entered.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, _: &tracing::span::Id) {}
}

/// For a subscriber that wants debug spans, every reconcile runs inside a `reconcile` span that
/// carries its key (the runner builds the span only when one is wanted).
#[tokio::test(start_paused = true)]
async fn every_reconcile_runs_in_a_span_carrying_its_key() {
    let spans = Arc::new(ReconcileSpans::default());
    let _guard = tracing::subscriber::set_default(spans.clone());
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, _ctx: Context| async {
            Ok::<_, Infallible>(Action::Done)
        })
        .source(|| futures::stream::iter([7, 8, 9]))
        .workers(2)
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    bounded(LIMIT, run).await.unwrap();
    let mut keys = spans.keys.lock().unwrap().clone();
    keys.sort_unstable();
    assert_eq!(keys, ["7", "8", "9"], "one reconcile span per key");
    assert!(
        spans.entered.lock().unwrap().len() >= 3,
        "the spans were entered while the reconciles ran"
    );
}
