//! The `TRACE` events that tell what waiting costs (target `ctrlq_queue_async::wakes`), counted
//! on scenarios whose every step is fixed: one current-thread runtime under paused time, so
//! each count is exact. The counts are process-wide, so the scenarios run one after another in
//! one test.

mod support;

use ctrlq_queue_async::WorkQueue;
use futures::StreamExt;
use support::{bounded, let_run};
use tokio::task::JoinHandle;
use wake_counts::WakeCounts;

/// A subscriber that counts the events by name, and the counts.
mod wake_counts {
    use std::sync::atomic::{AtomicU64, Ordering};

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    const NAMES: [&str; 5] = ["wake", "empty_wake", "park", "hand_out", "contended_lock"];
    static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

    /// The counts since the last [`reset`].
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub(crate) struct WakeCounts {
        pub(crate) wakes: u64,
        pub(crate) empty_wakes: u64,
        pub(crate) parks: u64,
        pub(crate) hand_outs: u64,
        pub(crate) contended_locks: u64,
    }

    /// Counts the queues' events of [`NAMES`]; sees nothing else.
    pub(crate) struct Counter;

    impl Subscriber for Counter {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target() == "ctrlq_queue_async::wakes"
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let name = event.metadata().name();
            if let Some(i) = NAMES.iter().position(|n| *n == name) {
                COUNTS[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    pub(crate) fn reset() {
        for count in &COUNTS {
            count.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot() -> WakeCounts {
        let [wakes, empty_wakes, parks, hand_outs, contended_locks] =
            COUNTS.each_ref().map(|c| c.load(Ordering::Relaxed));
        WakeCounts {
            wakes,
            empty_wakes,
            parks,
            hand_outs,
            contended_locks,
        }
    }
}

fn getter(queue: &WorkQueue<&'static str>) -> JoinHandle<Option<&'static str>> {
    let queue = queue.clone();
    tokio::spawn(async move { queue.get().await.map(|item| *item.key()) })
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn counts_each_wake_park_and_hand_out() {
    let _counting = tracing::subscriber::set_default(wake_counts::Counter);
    // A key already queued: handed out without waiting. Its add woke nobody but still called
    // the `Notify` once.
    wake_counts::reset();
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    drop(bounded(queue.get()).await.unwrap());
    assert_eq!(
        wake_counts::snapshot(),
        WakeCounts {
            wakes: 1,
            hand_outs: 1,
            ..WakeCounts::default()
        }
    );

    // One worker parked in `get`, one add: one wake, one hand-out, no empty wake.
    wake_counts::reset();
    let queue = WorkQueue::new();
    let worker = getter(&queue);
    let_run().await;
    assert_eq!(
        wake_counts::snapshot(),
        WakeCounts {
            parks: 1,
            ..WakeCounts::default()
        }
    );
    queue.add("b").unwrap();
    assert_eq!(bounded(worker).await.unwrap(), Some("b"));
    assert_eq!(
        wake_counts::snapshot(),
        WakeCounts {
            wakes: 1,
            parks: 1,
            hand_outs: 1,
            ..WakeCounts::default()
        }
    );

    // Two workers parked, one add: one of them is handed the key, the other still waits, never
    // woken (the woken worker uses up its wake-up, rather than have it passed on).
    wake_counts::reset();
    let queue = WorkQueue::new();
    let (first, second) = (getter(&queue), getter(&queue));
    let_run().await;
    queue.add("c").unwrap();
    let_run().await;
    let parked = wake_counts::snapshot();
    assert_eq!((parked.wakes, parked.hand_outs), (1, 1), "{parked:?}");
    assert_eq!(first.is_finished() as u8 + second.is_finished() as u8, 1);
    assert_eq!(
        parked,
        WakeCounts {
            wakes: 1,
            empty_wakes: 0,
            parks: 2,
            hand_outs: 1,
            contended_locks: 0,
        }
    );

    // A shutdown wakes the `get`s and the streams: one `Notify` call each.
    queue.shut_down();
    let (a, b) = (
        bounded(first).await.unwrap(),
        bounded(second).await.unwrap(),
    );
    assert_eq!([a, b].iter().flatten().count(), 1);
    let after = wake_counts::snapshot();
    assert_eq!(after.wakes, parked.wakes + 2);
    assert_eq!(after.hand_outs, 1);
    assert_eq!(after.contended_locks, 0);

    // A stream parked while a key is processing: the key's `done`, which queues nothing, wakes
    // nobody; the streams are woken only for a key queued.
    let queue = WorkQueue::new();
    queue.add("d").unwrap();
    let item = bounded(queue.get()).await.unwrap();
    let stream = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(queue.stream());
            stream.next().await.map(|item| *item.key())
        })
    };
    let_run().await;
    wake_counts::reset();
    item.done();
    let_run().await;
    assert!(!stream.is_finished());
    assert_eq!(wake_counts::snapshot(), WakeCounts::default());
    queue.add("e").unwrap();
    assert_eq!(bounded(stream).await.unwrap(), Some("e"));
    let streamed = wake_counts::snapshot();
    assert_eq!(
        (streamed.wakes, streamed.hand_outs),
        (2, 1),
        "the add's call to the getters' `Notify` and its wake of the streams: {streamed:?}"
    );
}
