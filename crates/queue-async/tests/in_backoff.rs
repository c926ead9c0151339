//! What an add does to a key in failure backoff (`InBackoff`), on both queues, under paused
//! time with the default limiter (5 ms, doubling).

use std::time::Duration;

use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{InBackoff, PriorityQueue, WorkQueue};
use tokio::time::advance;

fn work(choice: InBackoff) -> WorkQueue<&'static str> {
    WorkQueue::builder().in_backoff(choice).build()
}

/// `RunNow` (the default): an add ends the backoff at once.
#[tokio::test(start_paused = true)]
async fn run_now_ends_the_backoff() {
    for queue in [WorkQueue::new(), work(InBackoff::RunNow)] {
        queue.add_rate_limited("a").unwrap();
        queue.add("a").unwrap();
        assert_eq!((queue.len(), queue.waiting_len()), (1, 0));
        assert_eq!(queue.num_requeues(&"a"), 1, "an add resets nothing");
    }
}

/// `WaitOut`: a key waiting out a rate-limited add keeps waiting when added, and comes once,
/// at its deadline; a key waiting out a plain delay is added at once, as ever.
#[tokio::test(start_paused = true)]
async fn wait_out_keeps_a_backoff_but_not_a_plain_delay() {
    let queue = work(InBackoff::WaitOut);
    queue.add_rate_limited("a").unwrap();
    queue.add("a").unwrap();
    queue.add_all(["a", "a"]).unwrap();
    assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    advance(Duration::from_millis(4)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 0, "not before its backoff ends");
    advance(Duration::from_millis(1)).await;
    queue.settle().await;
    assert_eq!((queue.len(), queue.waiting_len()), (1, 0));
    assert_eq!(queue.num_requeues(&"a"), 1);

    queue.add_after("b", Duration::from_secs(60)).unwrap();
    queue.add("b").unwrap();
    assert_eq!(queue.len(), 2, "a plain delay is no backoff");
}

/// `WaitOut`, a key processed after a failure: an add meanwhile is held. If the processing
/// fails again, the new backoff brings the key back (once, at its end); if it succeeds, the
/// held add queues the key at once.
#[tokio::test(start_paused = true)]
async fn wait_out_holds_an_add_to_a_key_being_retried() {
    let queue = work(InBackoff::WaitOut);
    queue.add_rate_limited("a").unwrap();
    advance(Duration::from_millis(5)).await;
    let item = queue.get().await.unwrap();
    queue.add("a").unwrap();
    assert_eq!(queue.len(), 0);
    item.requeue_rate_limited().unwrap(); // fails again: 10 ms
    assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    advance(Duration::from_millis(10)).await;
    let item = queue.get().await.unwrap();
    assert_eq!(queue.num_requeues(&"a"), 2);
    queue.add("a").unwrap();
    item.forget(); // succeeds: failures forgotten, the held add queued now
    assert_eq!((queue.len(), queue.waiting_len()), (1, 0));
    assert_eq!(queue.num_requeues(&"a"), 0);
    let item = queue.get().await.unwrap();
    queue.add("a").unwrap();
    assert_eq!(
        queue.len(),
        0,
        "no failures: re-added while processing, as ever"
    );
    drop(item);
    assert_eq!(queue.len(), 1);
}

/// A priority queue: the add that waits out the backoff raises the key's priority, and the
/// key is handed out at it.
#[tokio::test(start_paused = true)]
async fn wait_out_raises_the_waiting_key() {
    let queue: PriorityQueue<&str> = PriorityQueue::builder()
        .in_backoff(InBackoff::WaitOut)
        .build();
    let low = AddOptions::default().priority(-100).rate_limited(true);
    queue.add_with("a", low).unwrap();
    queue.add_with_priority("a", 5).unwrap();
    assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    let item = queue.get().await.unwrap();
    assert_eq!((*item.key(), item.priority()), ("a", 5));
    // A shutdown drops a held add with the rest.
    queue.add_with_priority("a", 0).unwrap();
    queue.shut_down();
    item.requeue_rate_limited().unwrap_err();
    assert_eq!(queue.len(), 0);
}

/// `WaitOut` holds an add only for a key waiting out a backoff or processed after a failure:
/// a key that is neither, though its failures are still counted (processed and done without
/// `forget`), is queued by an add at once.
#[tokio::test(start_paused = true)]
async fn wait_out_lets_an_add_through_to_an_idle_key_with_failures() {
    let queue = work(InBackoff::WaitOut);
    queue.add_rate_limited("a").unwrap();
    advance(Duration::from_millis(5)).await;
    drop(queue.get().await.unwrap()); // done, its failure still counted
    assert_eq!(queue.num_requeues(&"a"), 1);
    queue.add("a").unwrap();
    assert_eq!((queue.len(), queue.waiting_len()), (1, 0));
}

/// `WaitOut`: a plain delayed add of a key processed after a failure keeps the add held
/// before it, which the end of the processing makes at once (only a new backoff ends a hold).
#[tokio::test(start_paused = true)]
async fn wait_out_keeps_a_hold_through_a_plain_delayed_add() {
    let queue = work(InBackoff::WaitOut);
    queue.add_rate_limited("a").unwrap();
    advance(Duration::from_millis(5)).await;
    let item = queue.get().await.unwrap();
    queue.add("a").unwrap(); // held
    queue.add_after("a", Duration::from_secs(60)).unwrap();
    drop(item); // done without a new backoff: the held add is made
    assert_eq!(queue.len(), 1, "queued at once, not in a minute");
}

/// `WaitOut`: a wait that is a backoff stays one when a plain delayed add merges into it, so a
/// later add still waits it out.
#[tokio::test(start_paused = true)]
async fn wait_out_a_backoff_stays_one_through_a_plain_delayed_add() {
    let queue = work(InBackoff::WaitOut);
    queue.add_rate_limited("a").unwrap();
    queue.add_after("a", Duration::from_secs(1)).unwrap(); // later: the backoff's deadline stays
    queue.add("a").unwrap();
    assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
}

/// `add_all_with_priority` queues each key at its own priority.
#[tokio::test(start_paused = true)]
async fn add_all_with_priority_queues_each_key_at_its_own() {
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    queue
        .add_all_with_priority([("a", -100), ("b", 5), ("c", 0)])
        .unwrap();
    let mut order = Vec::new();
    for _ in 0..3 {
        let got = tokio::time::timeout(Duration::from_secs(1), queue.get()).await;
        let item = got.expect("every key queued").unwrap();
        order.push((*item.key(), item.priority()));
    }
    assert_eq!(order, [("b", 5), ("c", 0), ("a", -100)]);
}
