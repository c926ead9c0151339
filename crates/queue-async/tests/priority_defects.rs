//! The priority queue against controller-runtime's where they once differed: depth by priority,
//! aging through a raise, one done per hand-out, and the choices made where this queue differs
//! from controller-runtime's on purpose (paused time, every wait bounded).

use std::time::Duration;

use queue_async::PriorityQueue;
use tokio::time::{advance, timeout};

const BOUND: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn a_raise_keeps_the_age_of_the_first_add() {
    // Aging 100 ms: `old`, ready 900 ms at 0 and raised to 1, ranks 1 + 9 = 10 against 5.
    let queue = PriorityQueue::builder()
        .aging(Duration::from_millis(100))
        .build();
    queue.add_with_priority("old", 0).unwrap();
    advance(Duration::from_millis(900)).await;
    queue.add_with_priority("old", 1).unwrap();
    queue.add_with_priority("fresh", 5).unwrap();
    let first = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!((*first, first.priority()), ("old", 1));
}
