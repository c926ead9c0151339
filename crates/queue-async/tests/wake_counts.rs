//! The `wake-counts` feature's counters on scenarios whose every step is fixed: one
//! current-thread runtime under paused time, so each count is exact. The counters are
//! process-wide, so the scenarios run one after another in one test.

mod support;

use ctrlq_queue_async::WorkQueue;
use ctrlq_queue_async::wake_counts::{self, WakeCounts};
use futures::StreamExt;
use support::bounded;
use tokio::task::JoinHandle;

/// Lets every spawned task run until it waits.
async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

fn getter(queue: &WorkQueue<&'static str>) -> JoinHandle<Option<&'static str>> {
    let queue = queue.clone();
    tokio::spawn(async move { queue.get().await.map(|item| *item.key()) })
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn counts_each_wake_park_and_hand_out() {
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
    settle().await;
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
    settle().await;
    queue.add("c").unwrap();
    settle().await;
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
    settle().await;
    wake_counts::reset();
    item.done();
    settle().await;
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
