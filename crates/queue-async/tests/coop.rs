//! Every future a worker awaits takes part in tokio's cooperative budget: a loop whose every
//! `get` (or `pop`, or stream item) is ready still gives its thread back, so other tasks on a
//! current-thread runtime run (an elector's renewals among them).
//!
//! Each test loops on a queue that always has an item ready until a task spawned next to it has
//! run. Without the budget that task never runs; with it, it runs after one budget's worth of
//! items.
//!
//! Each take is bounded in real time (`soon`), so a queue that never hands the item out fails
//! the test instead of hanging it. The bound leaves the budget as it is: tokio's `timeout` polls
//! the take first, and a ready take completes it without the timer being polled at all; a take
//! that yields for the budget has its timer polled outside the budget.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
use ctrlq_queue_async::{PriorityQueue, WorkQueue};
use futures::StreamExt;
use support::soon;

/// The most items a loop may take before another task runs: tokio's budget is 128 units; the
/// rest is slack, as the exact count is tokio's business.
const AT_MOST: usize = 256;

/// A task spawned on the current runtime that records that it ran.
struct OtherTask(Arc<AtomicBool>);

impl OtherTask {
    fn spawn() -> Self {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        Self(ran)
    }

    fn ran(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counts one more ready item taken while the other task has not run; fails past [`AT_MOST`].
fn count(taken: &mut usize) {
    *taken += 1;
    assert!(
        *taken <= AT_MOST,
        "another task on this runtime did not run in {AT_MOST} ready items"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_ready_work_queue_get_gives_the_thread_back() {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.add(1).unwrap();
    let (other, mut taken) = (OtherTask::spawn(), 0);
    while !other.ran() {
        let item = soon(q.get()).await.expect("open");
        item.done();
        q.add(1).unwrap();
        count(&mut taken);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_zero_delay_requeue_loop_gives_the_thread_back() {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.add(1).unwrap();
    let (other, mut taken) = (OtherTask::spawn(), 0);
    while !other.ran() {
        let item = soon(q.get()).await.expect("open");
        let key = *item.key();
        item.done();
        q.add_after(key, Duration::ZERO).unwrap();
        count(&mut taken);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_ready_work_queue_stream_gives_the_thread_back() {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.add(1).unwrap();
    let mut stream = Box::pin(q.stream());
    let (other, mut taken) = (OtherTask::spawn(), 0);
    while !other.ran() {
        let item = soon(stream.next()).await.expect("open");
        item.done();
        q.add(1).unwrap();
        count(&mut taken);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_ready_priority_queue_get_gives_the_thread_back() {
    let q: PriorityQueue<u32> = PriorityQueue::builder().build();
    q.add(1).unwrap();
    let (other, mut taken) = (OtherTask::spawn(), 0);
    while !other.ran() {
        let item = soon(q.get()).await.expect("open");
        item.done();
        q.add(1).unwrap();
        count(&mut taken);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_ready_scheduling_queue_pop_gives_the_thread_back() {
    let q: SchedulingQueue<u32, i64> =
        SchedulingQueue::new(SchedulingQueueConfig::default()).unwrap();
    q.add(1, 0).unwrap();
    let (other, mut taken) = (OtherTask::spawn(), 0);
    while !other.ran() {
        let popped = soon(q.pop()).await.expect("open");
        popped.done();
        q.add(1, 0).unwrap();
        count(&mut taken);
    }
}

/// The budget is spent only by items handed out: a `get` that waits and is then woken by an add
/// still hands the item out in the poll that sees it, and a loop within its budget never yields
/// spuriously.
#[tokio::test(flavor = "current_thread")]
async fn within_the_budget_a_ready_get_does_not_yield() {
    let q: WorkQueue<u32> = WorkQueue::new();
    for k in 0..8 {
        q.add(k).unwrap();
    }
    // A fresh budget (the test body starts with one): eight ready gets complete in one poll each.
    for k in 0..8 {
        let item = tokio_test::task::spawn(q.get()).enter(|cx, fut| fut.poll(cx));
        match item {
            std::task::Poll::Ready(Some(item)) => assert_eq!(*item.key(), k),
            other => panic!(
                "get {k} was not ready: {:?}",
                other.map(|i| i.map(|i| *i.key()))
            ),
        }
    }
}
