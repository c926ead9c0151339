//! Behaviour of the scheduling queue: kube-scheduler's queue tests, expressed generically.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctrlq_queue_async::AddError;
use ctrlq_queue_async::scheduling::{
    ActionType, ClusterEvent, ConfigError, EventPayload, HintError, InFlightEntry, Popped,
    PriorityOrder, QueuedItem, QueueingHint, SchedulingQueue, SchedulingQueueBuilder,
    SchedulingQueueConfig, SubQueue,
};
use support::{BOUND, REAL_BOUND, bounded, paused_runtime};
use tokio::time::{Instant, advance, sleep};
use tokio_test::{assert_pending, assert_ready, task};

const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
const PV_ADD: ClusterEvent = ClusterEvent::new("Pv", ActionType::ADD);
const PV_UPDATE: ClusterEvent = ClusterEvent::new("Pv", ActionType::UPDATE);
const ASSIGNED_ADD: ClusterEvent = ClusterEvent::new("AssignedPod", ActionType::ADD);
const ITEM_UPDATE: ClusterEvent = ClusterEvent::new("Item", ActionType::UPDATE);

type Queue = SchedulingQueue<&'static str, i64>;
type Builder = SchedulingQueueBuilder<&'static str, i64, PriorityOrder>;

fn config() -> SchedulingQueueConfig {
    SchedulingQueueConfig::default().pop_from_backoff(false)
}

fn builder() -> Builder {
    Queue::builder(config())
}

fn queue() -> Queue {
    builder().build().unwrap()
}

fn queue_on(event: ClusterEvent, plugin: &'static str, hint: QueueingHint) -> Queue {
    builder()
        .hint(event, plugin, move |_, _, _| Ok(hint))
        .build()
        .unwrap()
}

/// The scheduler's failure path: pop, record the rejectors, hand it back.
async fn fail(q: &Queue, rejectors: &[&'static str], pending: &[&'static str]) -> &'static str {
    let mut item = bounded(q.pop()).await.expect("open");
    let cycle = q.scheduling_cycle();
    item.set_rejectors(rejectors.iter().copied());
    item.set_pending(pending.iter().copied());
    let key = *item.key();
    q.add_unschedulable_if_not_present(item, cycle)
        .expect("not queued");
    key
}

fn sorted(mut keys: Vec<&'static str>) -> Vec<&'static str> {
    keys.sort_unstable();
    keys
}

// ===== add and pop =====

#[tokio::test(start_paused = true)]
async fn pop_should_follow_priority_then_timestamp() {
    let q = queue();
    q.add("ns2/mpp", 500).unwrap();
    q.add("ns1/up", 0).unwrap();
    q.add("ns1/hpp", 1000).unwrap();
    let mut popped = Vec::new();
    for _ in 0..3 {
        popped.push(*bounded(q.pop()).await.unwrap().key());
    }
    assert_eq!(popped, ["ns1/hpp", "ns2/mpp", "ns1/up"]);
    assert_eq!(q.scheduling_cycle(), 3);

    // Equal priority: earlier timestamp first, whatever the insertion order.
    let q = queue();
    q.add("first", 5).unwrap();
    advance(Duration::from_secs(1)).await;
    q.add("second", 5).unwrap();
    q.update("first", 5, &[]);
    assert_eq!(*bounded(q.pop()).await.unwrap().key(), "first");
}

#[tokio::test(start_paused = true)]
async fn pop_should_wait_until_an_add() {
    let q = queue();
    let mut pop = task::spawn(q.pop());
    assert_pending!(pop.poll());
    q.add("a", 1).unwrap();
    assert!(pop.is_woken());
    let item = assert_ready!(pop.poll()).unwrap();
    assert_eq!((*item.key(), item.attempts()), ("a", 1));
    assert_eq!(item.initial_attempt(), Some(item.timestamp()));
}

#[tokio::test(start_paused = true)]
async fn the_initial_attempt_should_survive_a_re_add_and_a_requeue() {
    let q = queue();
    let t0 = Instant::now();
    q.add("a", 1).unwrap();
    q.add("b", 1).unwrap();
    advance(Duration::from_secs(1)).await;
    q.add("a", 0).unwrap(); // a re-add: a new timestamp, the same initial attempt
    let b = bounded(q.pop()).await.unwrap();
    let a = bounded(q.pop()).await.unwrap();
    assert_eq!(*a.key(), "a");
    assert_eq!(
        (a.timestamp(), a.initial_attempt()),
        (t0 + Duration::from_secs(1), Some(t0))
    );
    assert_eq!((b.timestamp(), b.initial_attempt()), (t0, Some(t0)));
    q.done(a.key());
    advance(Duration::from_secs(1)).await;
    q.add_unschedulable_if_not_present(b, q.scheduling_cycle())
        .unwrap(); // an error: backoff
    advance(Duration::from_secs(1)).await;
    let b = bounded(q.pop()).await.unwrap();
    assert_eq!(b.timestamp(), t0 + Duration::from_secs(2), "requeued");
    assert_eq!(b.initial_attempt(), Some(t0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_pop_should_not_lose_the_item() {
    let q = queue();
    let mut pop = task::spawn(q.pop());
    assert_pending!(pop.poll());
    q.add("a", 1).unwrap();
    drop(pop);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
    assert_eq!(*bounded(q.pop()).await.unwrap().key(), "a");
}

#[tokio::test(start_paused = true)]
async fn shut_down_should_unblock_pop_and_end_every_flight() {
    let q = queue();
    q.add("a", 1).unwrap();
    q.add("b", 1).unwrap();
    let _a = bounded(q.pop()).await.unwrap();
    let mut pop = task::spawn(q.pop());
    let _b = assert_ready!(pop.poll()).unwrap();
    let mut blocked = task::spawn(q.pop());
    assert_pending!(blocked.poll());
    q.shut_down();
    assert!(assert_ready!(blocked.poll()).is_none());
    assert!(bounded(q.pop()).await.is_none());
    assert!(q.in_flight().is_empty() && q.in_flight_events().is_empty());
    assert!(q.is_shutting_down());
}

/// kube-scheduler's `TestPriorityQueue_Pop`: with pop-from-backoff, `pop` takes an item that
/// was rejected and moved to backoff before its backoff ends, never one that failed with an
/// error; without it, neither.
#[tokio::test(start_paused = true)]
async fn pop_should_take_the_backoff_head_only_with_pop_from_backoff() {
    for on in [true, false] {
        let q = Queue::builder(SchedulingQueueConfig::default().pop_from_backoff(on))
            .hint(NODE_ADD, "plugin", |_, _, _| Ok(QueueingHint::Queue))
            .build()
            .unwrap();
        q.add("hpp", 1000).unwrap();
        q.add("hpp2", 1000).unwrap();
        q.add("up", 0).unwrap();
        let mut hpp = bounded(q.pop()).await.unwrap();
        let hpp2 = bounded(q.pop()).await.unwrap();
        let mut up = bounded(q.pop()).await.unwrap();
        up.set_rejectors(["plugin"]);
        q.add_unschedulable_if_not_present(up, q.scheduling_cycle())
            .unwrap();
        q.move_all(&NODE_ADD); // seen in flight: hpp's rejection goes to backoff
        hpp.set_rejectors(["plugin"]);
        q.add_unschedulable_if_not_present(hpp, 0).unwrap();
        q.add_unschedulable_if_not_present(hpp2, 0).unwrap(); // an error
        q.add("mpp", 500).unwrap();
        assert_eq!(sorted(q.pending().backoff), ["hpp", "hpp2", "up"]);

        let mut popped = Vec::new();
        while let Some(item) = q.try_pop() {
            popped.push(*item.key());
            q.done(item.key());
        }
        let expected: &[&str] = if on { &["mpp", "hpp", "up"] } else { &["mpp"] };
        assert_eq!(popped, expected, "pop_from_backoff = {on}");
        assert!(
            q.pending().backoff.contains(&"hpp2"),
            "an error is never popped early"
        );
    }
}

/// With pop-from-backoff on (the default), an item that failed with an error waits out its
/// backoff: an idle queue does not retry errors at once.
#[tokio::test(start_paused = true)]
async fn an_error_should_wait_out_its_backoff_even_with_pop_from_backoff() {
    let q = Queue::new(SchedulingQueueConfig::default()).unwrap();
    q.add("a", 1).unwrap();
    let start = Instant::now();
    let item = bounded(q.pop()).await.unwrap();
    q.add_unschedulable_if_not_present(item, q.scheduling_cycle())
        .unwrap(); // no rejectors: an error
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    assert!(q.try_pop().is_none(), "popped before its backoff ended");
    let item = tokio::time::timeout(Duration::from_secs(5), q.pop())
        .await
        .expect("popped once its backoff ended")
        .unwrap();
    assert_eq!(item.attempts(), 2);
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// A popped item dropped without `done` or a hand-back ends its flight: the key is not wedged.
#[tokio::test(start_paused = true)]
async fn a_popped_item_dropped_without_done_should_not_wedge_its_key() {
    let q = queue();
    q.add("a", 1).unwrap();
    let item = bounded(q.pop()).await.unwrap();
    drop(item);
    assert!(!q.is_in_flight(&"a"));
    q.add("a", 2).unwrap();
    let item = tokio::time::timeout(Duration::from_secs(60), q.pop())
        .await
        .expect("the key is popped again")
        .unwrap();
    assert_eq!((*item.key(), *item.data(), item.attempts()), ("a", 2, 2));
}

/// A scheduler that panics while holding a popped item has failed: the item goes back to the
/// queue as an error, and is popped again once its backoff ends.
#[tokio::test(start_paused = true)]
async fn a_popped_item_dropped_by_a_panic_should_come_back_after_its_error_backoff() {
    let q = queue();
    q.add("a", 1).unwrap();
    let worker = q.clone();
    let panicked = tokio::spawn(async move {
        // `bounded`, spelled out: its body cannot be named in a spawned task here (a `&str`
        // key's `Hash` is not general enough across its lifetimes).
        let mut item = tokio::time::timeout(BOUND, worker.pop())
            .await
            .expect("done within the bound")
            .unwrap();
        item.set_rejectors(["stale"]); // the previous attempt's verdict does not count
        panic!("the scheduler failed");
    })
    .await;
    assert!(panicked.is_err());
    assert!(q.in_flight().is_empty());
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    let start = Instant::now();
    let item = tokio::time::timeout(Duration::from_secs(5), q.pop())
        .await
        .expect("popped after its backoff")
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!((item.attempts(), item.consecutive_errors()), (2, 1));
    assert!(item.rejectors().is_empty());
}

/// A guard whose flight was ended by the queue's `done` of its key neither ends a later flight
/// of that key nor queues its item again.
#[tokio::test(start_paused = true)]
async fn a_stale_guard_should_not_touch_a_later_flight_of_its_key() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 1).unwrap();
    let old = bounded(q.pop()).await.unwrap();
    q.done(old.key());
    q.add("a", 2).unwrap();
    let new = bounded(q.pop()).await.unwrap();
    drop(old);
    assert!(q.is_in_flight(&"a") && q.is_empty(), "the new flight stays");
    q.move_all(&NODE_ADD);
    assert_eq!(
        q.in_flight_events().len(),
        2,
        "the new flight records events"
    );
    assert_eq!(*new.done().data(), 2);
    assert!(q.in_flight().is_empty() && q.is_empty());
}

/// `done` on the guard ends the flight and hands the item back to the caller.
#[tokio::test(start_paused = true)]
async fn done_on_a_popped_item_should_end_its_flight_and_return_it() {
    let q = queue();
    q.add("a", 7).unwrap();
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(item.cycle(), q.scheduling_cycle());
    let (key, data) = item.done().into_parts();
    assert_eq!((key, data), ("a", 7));
    assert!(q.in_flight().is_empty() && q.is_empty());
    q.add("a", 8).unwrap();
    assert_eq!(*bounded(q.pop()).await.unwrap().data(), 8);
}

// ===== add_unschedulable_if_not_present =====

#[tokio::test(start_paused = true)]
async fn a_rejected_item_without_helpful_events_should_wait_in_unschedulable() {
    let q = queue_on(NODE_ADD, "fit", QueueingHint::Queue);
    q.add("up", 0).unwrap();
    assert_eq!(fail(&q, &["fit"], &[]).await, "up");
    q.add("hpp", 1000).unwrap();
    assert_eq!(q.where_is(&"up"), Some(SubQueue::Unschedulable));
    assert_eq!(*bounded(q.pop()).await.unwrap().key(), "hpp");
    assert_eq!(q.num_unschedulable(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_should_back_off_and_count_apart_from_rejections() {
    let q = queue();
    q.add("a", 0).unwrap();
    fail(&q, &[], &[]).await;
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    q.activate(["a"]);
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(
        (item.consecutive_errors(), item.unschedulable_count()),
        (1, 0)
    );
    q.add_unschedulable_if_not_present(item, 2).unwrap();
    q.activate(["a"]);
    let mut item = bounded(q.pop()).await.unwrap();
    assert_eq!(item.consecutive_errors(), 2);
    item.set_rejectors(["fit"]);
    q.add_unschedulable_if_not_present(item, 3).unwrap();
    q.activate(["a"]);
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(
        (item.consecutive_errors(), item.unschedulable_count()),
        (0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_wildcard_seen_in_flight_should_send_failures_to_backoff() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    for (i, key) in ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"]
        .iter()
        .enumerate()
    {
        q.add(key, i as i64).unwrap();
    }
    let mut items = Vec::new();
    for _ in 0..9 {
        items.push(bounded(q.pop()).await.unwrap());
    }
    q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
    let old_cycle = q.scheduling_cycle();
    assert_eq!(*bounded(q.pop()).await.unwrap().done().key(), "p0");
    for mut item in items {
        item.set_rejectors(["plugin"]);
        q.add_unschedulable_if_not_present(item, old_cycle).unwrap();
    }
    assert_eq!(q.pending().backoff.len(), 9);
}

#[tokio::test(start_paused = true)]
async fn an_item_not_in_flight_should_follow_the_move_request_cycle() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    q.add("b", 0).unwrap();
    let mut a = bounded(q.pop()).await.unwrap();
    q.done(a.key()); // flight over: the cycle rule decides
    a.set_rejectors(["plugin"]);
    let cycle = q.scheduling_cycle();
    q.add_unschedulable_if_not_present(a, cycle).unwrap();
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Unschedulable));

    let mut b = bounded(q.pop()).await.unwrap();
    q.done(b.key());
    let cycle = q.scheduling_cycle();
    q.move_all(&NODE_ADD); // a move request in this cycle
    b.set_rejectors(["plugin"]);
    q.add_unschedulable_if_not_present(b, cycle).unwrap();
    assert_eq!(q.where_is(&"b"), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn add_unschedulable_of_a_queued_key_should_fail_and_change_nothing() {
    let q = queue();
    q.add("a", 1).unwrap();
    let item = bounded(q.pop()).await.unwrap();
    q.add("a", 2).unwrap();
    let err = q.add_unschedulable_if_not_present(item, 1).unwrap_err();
    assert_eq!(*err.into_inner().data(), 1);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
    assert!(q.in_flight().is_empty(), "the flight still ends");
    assert_eq!(bounded(q.pop()).await.unwrap().data(), &2);
}

// ===== move_all and hints =====

#[tokio::test(start_paused = true)]
async fn move_all_should_route_by_hint_and_backoff() {
    // Pending plugin answering Queue: active at once.
    let q = queue_on(NODE_ADD, "foo", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    fail(&q, &[], &["foo"]).await;
    assert_eq!(q.move_all(&NODE_ADD), 1);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(
        item.pending(),
        ["foo"],
        "the sets survive the pop for logging"
    );

    // Rejector answering Queue: backoff while backing off, active after.
    for (wait, want) in [(0, SubQueue::Backoff), (2, SubQueue::Active)] {
        let q = queue_on(NODE_ADD, "foo", QueueingHint::Queue);
        q.add("a", 0).unwrap();
        fail(&q, &["foo"], &[]).await;
        advance(Duration::from_secs(wait)).await;
        q.move_all(&NODE_ADD);
        assert_eq!(q.where_is(&"a"), Some(want), "after {wait} s");
    }

    // Skip: stays.
    let q = queue_on(NODE_ADD, "foo", QueueingHint::Skip);
    q.add("a", 0).unwrap();
    fail(&q, &["foo"], &[]).await;
    assert_eq!(q.move_all(&NODE_ADD), 0);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Unschedulable));
}

/// The payload of a node event in the payload tests: how much room the node has.
#[derive(Debug)]
struct Node {
    room: i64,
}

/// A queue whose "fit" hint asks whether the event's node has room for the item's data; an
/// event without a node fails the hint (which counts as `Queue`).
fn fit_queue() -> Queue {
    builder()
        .hint(NODE_ADD, "fit", |item, _, payload| {
            let node = payload
                .get::<Node>()
                .ok_or_else(|| HintError::new("no node"))?;
            Ok(if node.room >= *item.data() {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            })
        })
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hint_should_decide_by_the_event_payload() {
    let q = fit_queue();
    q.add("big", 8).unwrap();
    q.add("small", 2).unwrap();
    assert_eq!(fail(&q, &["fit"], &[]).await, "big");
    assert_eq!(fail(&q, &["fit"], &[]).await, "small");
    assert_eq!(
        q.move_all_with(&NODE_ADD, EventPayload::new(Node { room: 5 })),
        1
    );
    assert_eq!(q.where_is(&"small"), Some(SubQueue::Backoff));
    assert_eq!(q.where_is(&"big"), Some(SubQueue::Unschedulable));
    assert_eq!(
        q.move_matching_with(&NODE_ADD, EventPayload::new(Node { room: 3 }), |_| true),
        0,
        "too small a node for the big item"
    );
    assert_eq!(
        q.move_matching_with(&NODE_ADD, EventPayload::new(Node { room: 9 }), |_| true),
        1
    );
    assert_eq!(q.where_is(&"big"), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn a_payload_seen_in_flight_should_be_replayed_to_the_hint() {
    let q = fit_queue();
    q.add("big", 8).unwrap();
    q.add("small", 2).unwrap();
    let big = bounded(q.pop()).await.unwrap();
    let small = bounded(q.pop()).await.unwrap();
    q.move_all_with(&NODE_ADD, EventPayload::new(Node { room: 5 }));
    for mut item in [big, small] {
        item.set_rejectors(["fit"]);
        q.add_unschedulable_if_not_present(item, 0).unwrap();
    }
    assert_eq!(q.where_is(&"small"), Some(SubQueue::Backoff));
    assert_eq!(q.where_is(&"big"), Some(SubQueue::Unschedulable));
}

#[test]
fn a_payload_should_give_its_value_only_as_its_own_type() {
    let payload = EventPayload::new(Node { room: 4 });
    assert_eq!(payload.get::<Node>().map(|n| n.room), Some(4));
    assert!(payload.get::<i64>().is_none());
    assert!(payload.clone().get::<Node>().is_some());
    assert!(EventPayload::none().get::<Node>().is_none());
    assert!(EventPayload::default().is_none() && !payload.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_wildcard_should_move_without_asking_hints() {
    let q = builder()
        .hint(NODE_ADD, "foo", |_, _, _| {
            Err(HintError::new("must not be called"))
        })
        .build()
        .unwrap();
    q.add("a", 0).unwrap();
    fail(&q, &["foo"], &[]).await;
    q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn move_matching_should_apply_the_pre_check_and_skip_events_of_no_interest() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    for (key, prio) in [("p0", 0), ("p1", 1), ("p2", 2), ("p3", 3), ("p4", 4)] {
        q.add(key, prio).unwrap();
        fail(&q, &["plugin"], &[]).await;
    }
    let moved = q.move_matching(&PV_ADD, |_| panic!("no plugin cares about PV_ADD"));
    assert_eq!(moved, 0);
    assert_eq!(
        q.move_matching(&NODE_ADD, |i| *i.data() >= 2 && i.data() % 2 == 0),
        2
    );
    assert_eq!(sorted(q.pending().backoff), ["p2", "p4"]);
    assert_eq!(q.move_matching(&NODE_ADD, |i| *i.data() >= 2), 1);
    assert_eq!(sorted(q.pending().backoff), ["p2", "p3", "p4"]);
    assert_eq!(q.move_all(&NODE_ADD), 2);
    assert_eq!(q.pending().backoff.len(), 5);
}

#[tokio::test(start_paused = true)]
async fn hints_should_be_asked_in_order_and_the_strongest_answer_wins() {
    let calls = Arc::new(AtomicUsize::new(0));
    let hint = |answer: Result<QueueingHint, HintError>| {
        let calls = calls.clone();
        move |_: &QueuedItem<&'static str, i64>, _: &ClusterEvent, _: &EventPayload| {
            calls.fetch_add(1, Ordering::SeqCst);
            answer.clone()
        }
    };
    let q = builder()
        .hint(NODE_ADD, "p1", hint(Ok(QueueingHint::Queue)))
        .hint(NODE_ADD, "p2", hint(Ok(QueueingHint::Queue)))
        .hint(NODE_ADD, "p3", hint(Ok(QueueingHint::Queue)))
        .hint(NODE_ADD, "p4", hint(Err(HintError::new("boom"))))
        .hint(PV_ADD, "p1", hint(Ok(QueueingHint::Skip)))
        .hint(PV_ADD, "p2", hint(Ok(QueueingHint::Skip)))
        .hint(PV_ADD, "p3", hint(Ok(QueueingHint::Queue)))
        .build()
        .unwrap();
    let run = |rejectors: &'static [&'static str], pending: &'static [&'static str], event| {
        let q = q.clone();
        let calls = calls.clone();
        async move {
            calls.store(0, Ordering::SeqCst);
            q.add("a", 0).unwrap();
            fail(&q, rejectors, pending).await;
            q.move_all(&event);
            let at = q.where_is(&"a");
            q.delete(&"a");
            (at, calls.load(Ordering::SeqCst))
        }
    };
    // A pending plugin's Queue skips the backoff; p3 is never asked.
    assert_eq!(
        run(&["p1", "p3"], &["p2"], NODE_ADD).await,
        (Some(SubQueue::Active), 2)
    );
    // Skip then Queue from rejectors: after backoff.
    assert_eq!(
        run(&["p1", "p2"], &[], NODE_ADD).await,
        (Some(SubQueue::Backoff), 1)
    );
    // Skip, Skip; p3's Queue does not count (not a rejector).
    assert_eq!(
        run(&["p1", "p2"], &[], PV_ADD).await,
        (Some(SubQueue::Unschedulable), 2)
    );
    // A failing hint counts as Queue.
    assert_eq!(
        run(&["p4"], &[], NODE_ADD).await,
        (Some(SubQueue::Backoff), 1)
    );
}

// ===== backoff and flushes =====

#[tokio::test(start_paused = true)]
async fn backoff_should_double_from_1_s_to_the_10_s_cap() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    for (i, secs) in [1u64, 2, 4, 8, 10, 10, 10].into_iter().enumerate() {
        let mut item = bounded(q.pop()).await.unwrap();
        assert_eq!(item.attempts(), i as u32 + 1);
        item.set_rejectors(["plugin"]);
        q.add_unschedulable_if_not_present(item, q.scheduling_cycle())
            .unwrap();
        let start = Instant::now();
        q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
        assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
        assert_eq!(
            q.flush_backoff_completed(start + Duration::from_secs(1) - Duration::from_nanos(1)),
            0
        );
        assert_eq!(
            q.flush_backoff_completed(start + Duration::from_secs(secs) - Duration::from_nanos(1)),
            0
        );
        assert_eq!(
            q.flush_backoff_completed(start + Duration::from_secs(secs)),
            1,
            "attempt {i}"
        );
        assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
    }
}

#[tokio::test(start_paused = true)]
async fn the_background_flush_should_move_backoff_items_at_their_exact_expiry() {
    let q = queue();
    q.add("a", 0).unwrap();
    let start = Instant::now();
    fail(&q, &[], &[]).await; // error: backoff 1 s
    let mut pop = task::spawn(q.pop());
    assert_pending!(pop.poll());
    sleep(Duration::from_millis(999)).await;
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    assert_pending!(pop.poll());
    let item = bounded(pop).await.unwrap(); // the paused clock jumps to the flush at the expiry
    assert_eq!(*item.key(), "a");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn an_earlier_backoff_should_rearm_the_timer() {
    let q = queue();
    q.add("slow", 0).unwrap();
    for _ in 0..3 {
        fail(&q, &[], &[]).await;
        q.activate(["slow"]);
    }
    fail(&q, &[], &[]).await; // 4th error: 8 s
    q.add("fast", 0).unwrap();
    fail(&q, &[], &[]).await; // 1 s
    let start = Instant::now();
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(
        (*item.key(), start.elapsed()),
        ("fast", Duration::from_secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn leftover_flush_should_move_items_older_than_the_maximum_only() {
    let q = queue();
    q.add("a", 0).unwrap();
    let mut item = bounded(q.pop()).await.unwrap();
    item.set_rejectors(["plugin"]);
    q.add_unschedulable_if_not_present(item, 1).unwrap();
    let queued = Instant::now();
    let five_min = Duration::from_secs(300);
    assert_eq!(
        q.flush_unschedulable_leftover(queued + five_min),
        0,
        "= 5 min stays"
    );
    assert_eq!(
        q.flush_unschedulable_leftover(queued + five_min + Duration::from_nanos(1)),
        1
    );
    // Its 1 s backoff is long over: straight to active.
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
}

/// The default `max_in_unschedulable`, kube-scheduler's.
const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[tokio::test(start_paused = true)]
async fn an_unschedulable_item_should_leave_at_its_own_deadline() {
    let q = queue();
    q.add("a", 0).unwrap();
    fail(&q, &["plugin"], &[]).await;
    sleep(MAX_IN_UNSCHEDULABLE).await;
    assert_eq!(
        q.where_is(&"a"),
        Some(SubQueue::Unschedulable),
        "= 5 min stays"
    );
    // Due 1 ns after 5 min, so at the next 1 ms timer tick; 2 ms lets the flush task run first.
    sleep(Duration::from_millis(2)).await;
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Active));
    let item = bounded(q.pop()).await.unwrap();
    assert_eq!(item.attempts(), 2);
}

/// A queue whose flush task runs with nothing left to time: an item went through backoff
/// (after an error, so never through unschedulable) and out.
async fn idle_queue_with_a_flush_task() -> Queue {
    let q = queue();
    q.add("b", 0).unwrap();
    fail(&q, &[], &[]).await;
    assert_eq!(q.where_is(&"b"), Some(SubQueue::Backoff));
    assert_eq!(key_popped_within(&q, Duration::from_secs(2)).await, "b");
    q
}

#[tokio::test(start_paused = true)]
async fn an_idle_queue_should_set_no_timer() {
    let q = idle_queue_with_a_flush_task().await;
    assert_eq!(q.next_timed_move(), None, "nothing timed: no timer");
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(q.next_timed_move(), None, "and none set since");
}

#[tokio::test(start_paused = true)]
async fn the_clock_should_jump_straight_to_an_unschedulable_deadline() {
    let q = idle_queue_with_a_flush_task().await;
    q.add("a", 0).unwrap();
    fail(&q, &["plugin"], &[]).await;
    let t0 = Instant::now();
    assert_eq!(
        q.next_timed_move(),
        Some(t0 + MAX_IN_UNSCHEDULABLE + Duration::from_nanos(1)),
        "the item's own deadline, not a periodic sweep"
    );
    let item = tokio::time::timeout(MAX_IN_UNSCHEDULABLE + Duration::from_secs(1), q.pop())
        .await
        .expect("out of unschedulable once 5 min have passed")
        .expect("open");
    assert_eq!(*item.key(), "a");
    assert_eq!(
        t0.elapsed(),
        MAX_IN_UNSCHEDULABLE + Duration::from_millis(1),
        "at the first timer tick past the deadline"
    );
    assert_eq!(q.next_timed_move(), None, "nothing left to time");
}

#[tokio::test(start_paused = true)]
async fn recently_tried_items_should_go_behind_their_peers() {
    let q = queue();
    for key in ["p1", "p2", "p3"] {
        q.add(key, 1000).unwrap();
        advance(Duration::from_micros(1)).await;
    }
    fail(&q, &["plugin"], &[]).await;
    advance(Duration::from_secs(10)).await;
    q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
    let mut order = Vec::new();
    while let Some(item) = q.try_pop() {
        order.push(*item.key());
    }
    assert_eq!(order, ["p2", "p3", "p1"]);
}

// ===== update, delete, activate, pending =====

#[tokio::test(start_paused = true)]
async fn update_should_act_by_sub_queue() {
    let q = queue_on(ITEM_UPDATE, "queue", QueueingHint::Queue);
    // Not queued: added.
    assert_eq!(q.update("new", 1, &[ITEM_UPDATE]), None);
    assert_eq!(q.where_is(&"new"), Some(SubQueue::Active));
    // Active: replaced and re-ordered.
    q.add("low", 1).unwrap();
    q.update("low", 5, &[]);
    assert_eq!(bounded(q.pop()).await.unwrap().data(), &5);
    // Backoff: replaced in place.
    q.add("b", 0).unwrap();
    q.activate(["new"]); // no-op, it is active
    let mut b = bounded(q.pop()).await.unwrap();
    while *b.key() != "b" {
        b = bounded(q.pop()).await.unwrap();
    }
    b.set_rejectors([]);
    q.add_unschedulable_if_not_present(b, q.scheduling_cycle())
        .unwrap();
    q.update("b", 7, &[]);
    assert_eq!(q.where_is(&"b"), Some(SubQueue::Backoff));
    // Unschedulable: the event is judged (Queue -> backoff while backing off, later active).
    for (wait, want) in [(0, SubQueue::Backoff), (10, SubQueue::Active)] {
        let q = queue_on(ITEM_UPDATE, "queue", QueueingHint::Queue);
        q.add("u", 0).unwrap();
        fail(&q, &["queue"], &[]).await;
        advance(Duration::from_secs(wait)).await;
        q.update("u", 3, &[ITEM_UPDATE]);
        assert_eq!(q.where_is(&"u"), Some(want));
    }
    let q = queue_on(ITEM_UPDATE, "skip", QueueingHint::Skip);
    q.add("u", 0).unwrap();
    fail(&q, &["skip"], &[]).await;
    q.update("u", 3, &[ITEM_UPDATE]);
    assert_eq!(q.where_is(&"u"), Some(SubQueue::Unschedulable));
}

#[tokio::test(start_paused = true)]
async fn update_in_flight_should_record_the_event_and_hand_the_data_back() {
    let q = queue_on(ITEM_UPDATE, "fake", QueueingHint::Queue);
    q.add("p", 0).unwrap();
    let mut item = bounded(q.pop()).await.unwrap();
    assert_eq!(q.update("p", 9, &[ITEM_UPDATE]), Some(9));
    assert_eq!(q.where_is(&"p"), None);
    *item.data_mut() = 9;
    item.set_rejectors(["fake"]);
    q.add_unschedulable_if_not_present(item, q.scheduling_cycle())
        .unwrap();
    assert_eq!(q.where_is(&"p"), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn delete_should_remove_from_each_sub_queue() {
    let q = queue();
    for (key, prio) in [("backoff", 3), ("unsched", 2), ("active", 1), ("keep", 0)] {
        q.add(key, prio).unwrap();
    }
    fail(&q, &[], &[]).await;
    fail(&q, &["x"], &[]).await;
    assert_eq!(q.where_is(&"backoff"), Some(SubQueue::Backoff));
    assert_eq!(q.where_is(&"unsched"), Some(SubQueue::Unschedulable));
    assert_eq!(q.delete(&"active"), Some(1));
    assert_eq!(q.delete(&"backoff"), Some(3));
    assert_eq!(q.delete(&"unsched"), Some(2));
    assert_eq!(q.delete(&"missing"), None);
    assert_eq!(q.pending().active, ["keep"]);
    assert!(q.pending().backoff.is_empty() && q.pending().unschedulable.is_empty());
}

#[tokio::test(start_paused = true)]
async fn activate_should_move_known_items_and_mark_in_flight_ones() {
    let q = queue();
    q.add("active", 0).unwrap();
    assert_eq!(q.activate(["active", "unknown"]), 0);
    assert_eq!(q.pending().active.len(), 1);
    let a = bounded(q.pop()).await.unwrap(); // in flight
    assert_eq!(q.activate(["other"]), 0);
    assert_eq!(
        q.in_flight_events().len(),
        1,
        "another key's activation is not recorded"
    );
    q.activate(["active"]);
    assert_eq!(
        q.in_flight_events(),
        [
            InFlightEntry::Item("active"),
            InFlightEntry::Event(ClusterEvent::FORCE_ACTIVATE, Some("active"))
        ]
    );
    let mut a = a;
    a.set_rejectors(["x"]);
    q.add_unschedulable_if_not_present(a, q.scheduling_cycle())
        .unwrap();
    assert_eq!(
        q.where_is(&"active"),
        Some(SubQueue::Backoff),
        "the targeted wildcard applies"
    );

    q.add("u", 5).unwrap();
    fail(&q, &["x"], &[]).await;
    assert_eq!(q.where_is(&"u"), Some(SubQueue::Unschedulable));
    assert_eq!(q.activate(["u", "active"]), 2);
    assert_eq!(sorted(q.pending().active), ["active", "u"]);
}

#[tokio::test(start_paused = true)]
async fn pending_should_list_every_item_with_the_summary() {
    let q = queue();
    q.add("up", 0).unwrap();
    q.add("hpp", 1000).unwrap();
    let hpp = bounded(q.pop()).await.unwrap();
    let up = bounded(q.pop()).await.unwrap();
    q.add("mpp", 500).unwrap();
    for mut item in [up, hpp] {
        item.set_rejectors(["plugin"]);
        q.add_unschedulable_if_not_present(item, q.scheduling_cycle())
            .unwrap();
    }
    let p = q.pending();
    assert_eq!(p.to_string(), "activeQ:1; backoffQ:0; unschedulablePods:2");
    assert_eq!(sorted(p.unschedulable), ["hpp", "up"]);
    q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
    assert_eq!(
        q.pending().to_string(),
        "activeQ:1; backoffQ:2; unschedulablePods:0"
    );
    assert_eq!(q.len(), 3);
}

// ===== in-flight events =====

#[tokio::test(start_paused = true)]
async fn in_flight_events_should_be_recorded_only_when_interesting_and_in_flight() {
    let q = queue_on(PV_ADD, "foo", QueueingHint::Queue);
    q.add("p1", 0).unwrap();
    q.move_all(&PV_ADD); // nothing in flight
    let _p1 = bounded(q.pop()).await.unwrap();
    q.move_all(&PV_ADD);
    q.move_all(&PV_UPDATE); // nobody registered
    assert_eq!(
        q.in_flight_events(),
        [
            InFlightEntry::Item("p1"),
            InFlightEntry::Event(PV_ADD, None)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn done_should_prune_the_head_and_keep_events_in_the_middle() {
    let q = builder()
        .hint(PV_ADD, "foo", |_, _, _| Ok(QueueingHint::Queue))
        .hint(NODE_ADD, "foo", |_, _, _| Ok(QueueingHint::Queue))
        .hint(ASSIGNED_ADD, "foo", |_, _, _| Ok(QueueingHint::Queue))
        .build()
        .unwrap();
    for (k, p) in [("p1", 3), ("p2", 2), ("p3", 1)] {
        q.add(k, p).unwrap();
    }
    let p1 = bounded(q.pop()).await.unwrap();
    q.move_all(&PV_ADD);
    let p2 = bounded(q.pop()).await.unwrap();
    q.move_all(&NODE_ADD);
    let _p3 = bounded(q.pop()).await.unwrap();
    q.move_all(&ASSIGNED_ADD);
    q.add_unschedulable_if_not_present(p2, 0).unwrap(); // no rejectors: backoff
    assert_eq!(q.pending().backoff, ["p2"]);
    assert_eq!(
        q.in_flight_events(),
        [
            InFlightEntry::Item("p1"),
            InFlightEntry::Event(PV_ADD, None),
            InFlightEntry::Event(NODE_ADD, None),
            InFlightEntry::Item("p3"),
            InFlightEntry::Event(ASSIGNED_ADD, None),
        ]
    );
    q.done(p1.key());
    assert_eq!(
        q.in_flight_events(),
        [
            InFlightEntry::Item("p3"),
            InFlightEntry::Event(ASSIGNED_ADD, None)
        ]
    );
    q.done(&"p3");
    q.done(&"unknown");
    assert!(q.in_flight_events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn events_during_the_flight_should_decide_where_a_failure_goes() {
    let q = builder()
        .hint(ASSIGNED_ADD, "pending", |_, _, _| Ok(QueueingHint::Queue))
        .build()
        .unwrap();
    q.add("p1", 2).unwrap();
    q.add("p2", 1).unwrap();
    let p1 = bounded(q.pop()).await.unwrap();
    q.move_all(&NODE_ADD); // no interest: dropped
    let mut p2 = bounded(q.pop()).await.unwrap();
    q.move_all(&ASSIGNED_ADD);
    q.add_unschedulable_if_not_present(p1, 0).unwrap();
    p2.set_pending(["pending"]);
    q.add_unschedulable_if_not_present(p2, 0).unwrap();
    assert_eq!(q.pending().backoff, ["p1"]);
    assert_eq!(q.pending().active, ["p2"]);
    assert!(q.in_flight().is_empty() && q.in_flight_events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn pop_should_discard_a_duplicate_of_an_item_in_flight() {
    let q = queue();
    q.add("p1", 3).unwrap();
    q.add("p3", 1).unwrap();
    let p1 = bounded(q.pop()).await.unwrap();
    q.add("p1", 3).unwrap(); // re-added while in flight
    let p3 = bounded(q.pop()).await.unwrap();
    assert_eq!(*p3.key(), "p3");
    assert!(q.pending().active.is_empty());
    assert_eq!(sorted(q.in_flight()), ["p1", "p3"]);
    q.add_unschedulable_if_not_present(p1, 1).unwrap();
    assert_eq!(q.where_is(&"p1"), Some(SubQueue::Backoff));
}

// ===== gates =====

fn gated_queue() -> Queue {
    builder()
        .gate(
            "allow",
            [ITEM_UPDATE],
            |item: &QueuedItem<&'static str, i64>| *item.data() > 0,
        )
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn gated_items_should_wait_for_an_event_their_gate_registered() {
    let q = gated_queue();
    q.add("g", 0).unwrap();
    assert_eq!(q.where_is(&"g"), Some(SubQueue::Unschedulable));
    q.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT);
    assert_eq!(
        q.where_is(&"g"),
        Some(SubQueue::Unschedulable),
        "a wildcard does not ungate"
    );
    q.update("g", 0, &[ITEM_UPDATE]);
    assert_eq!(
        q.where_is(&"g"),
        Some(SubQueue::Unschedulable),
        "still refused"
    );
    advance(Duration::from_secs(60)).await;
    q.update("g", 1, &[ITEM_UPDATE]);
    assert_eq!(q.where_is(&"g"), Some(SubQueue::Active));
    let item = bounded(q.pop()).await.unwrap();
    assert!(!item.is_gated());
    assert_eq!(item.rejectors(), ["allow"]);
    assert_eq!(item.attempts(), 1);
    assert_eq!(
        item.initial_attempt(),
        Some(Instant::now()),
        "set on entry to active, not while gated"
    );
}

#[tokio::test(start_paused = true)]
async fn the_leftover_flush_should_release_a_gated_item_whose_gate_now_passes() {
    let flag = Arc::new(AtomicUsize::new(0));
    let open = flag.clone();
    let q = builder()
        .gate(
            "ext",
            [ITEM_UPDATE],
            move |_: &QueuedItem<&'static str, i64>| open.load(Ordering::SeqCst) == 1,
        )
        .build()
        .unwrap();
    q.add("g", 0).unwrap();
    let t0 = Instant::now();
    let six = Duration::from_secs(360);
    assert_eq!(
        q.flush_unschedulable_leftover(t0 + six),
        0,
        "gate still refuses"
    );
    flag.store(1, Ordering::SeqCst);
    assert_eq!(
        q.flush_unschedulable_leftover(t0 + six + Duration::from_secs(1)),
        0,
        "at most once per 5 min"
    );
    assert_eq!(q.flush_unschedulable_leftover(t0 + six + six), 1);
    assert_eq!(q.where_is(&"g"), Some(SubQueue::Active));
}

#[tokio::test(start_paused = true)]
async fn a_gated_item_should_be_asked_again_at_its_own_deadline() {
    let (asked, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (count, flag) = (asked.clone(), open.clone());
    let q = builder()
        .gate(
            "ext",
            [ITEM_UPDATE],
            move |_: &QueuedItem<&'static str, i64>| {
                count.fetch_add(1, Ordering::SeqCst);
                flag.load(Ordering::SeqCst) == 1
            },
        )
        .build()
        .unwrap();
    q.add("g", 0).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    sleep(MAX_IN_UNSCHEDULABLE).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1, "= 5 min: not yet");
    sleep(Duration::from_millis(2)).await;
    assert_eq!(asked.load(Ordering::SeqCst), 2, "asked again past 5 min");
    assert_eq!(q.where_is(&"g"), Some(SubQueue::Unschedulable));

    // The next evaluation is due 5 min after the last one, not after the queueing.
    open.store(1, Ordering::SeqCst);
    sleep(MAX_IN_UNSCHEDULABLE - Duration::from_millis(1)).await;
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(q.where_is(&"g"), Some(SubQueue::Unschedulable));
    let item = tokio::time::timeout(Duration::from_secs(1), q.pop())
        .await
        .expect("released at its next deadline")
        .expect("open");
    assert_eq!(*item.key(), "g");
    assert_eq!(asked.load(Ordering::SeqCst), 3);
}

// ===== background task and auto traits =====

/// Puts `key` in backoff: added, popped, failed, then moved by an event its hint queues.
async fn into_backoff(q: &Queue, key: &'static str) {
    q.add(key, 0).unwrap();
    fail(q, &["plugin"], &[]).await;
    q.move_all(&NODE_ADD);
    assert_eq!(q.where_is(&key), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn the_flush_task_should_start_on_need_and_end_on_close_and_on_the_last_drop() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let base = metrics.num_alive_tasks();
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    let a = bounded(q.pop()).await.unwrap();
    q.done(a.key());
    assert_eq!(
        metrics.num_alive_tasks(),
        base,
        "nothing to flush yet: no task"
    );
    into_backoff(&q, "b").await;
    assert_eq!(metrics.num_alive_tasks(), base + 1);
    into_backoff(&q, "c").await;
    assert_eq!(metrics.num_alive_tasks(), base + 1, "one task");
    q.shut_down();
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(metrics.num_alive_tasks(), base);

    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    into_backoff(&q, "a").await;
    let q2 = q.clone();
    drop(q);
    tokio::task::yield_now().await;
    assert_eq!(metrics.num_alive_tasks(), base + 1, "a handle remains");
    drop(q2);
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(metrics.num_alive_tasks(), base);
}

/// The key `pop` returns within `within` (virtual time), which only a flush can provide here.
async fn key_popped_within(q: &Queue, within: Duration) -> &'static str {
    let item = tokio::time::timeout(within, q.pop())
        .await
        .expect("a flush freed an item in time")
        .expect("open");
    *item.done().key()
}

#[test]
fn a_queue_built_outside_a_runtime_should_flush_inside_one() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    paused_runtime().block_on(async {
        into_backoff(&q, "a").await;
        let start = Instant::now();
        // Only the flush task takes it out of backoff, at its 1 s expiry.
        assert_eq!(key_popped_within(&q, Duration::from_secs(60)).await, "a");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    });
}

#[test]
fn items_sent_to_backoff_outside_a_runtime_should_flush_once_a_pop_waits() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    let rt = paused_runtime();
    let mut item = rt.block_on(async {
        q.add("a", 0).unwrap();
        bounded(q.pop()).await.expect("open")
    });
    // Back on a plain thread: fail it and move it to backoff with no runtime to time it.
    item.set_rejectors(["plugin"]);
    let cycle = q.scheduling_cycle();
    q.add_unschedulable_if_not_present(item, cycle).unwrap();
    q.move_all(&NODE_ADD);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    rt.block_on(async {
        // The waiting pop starts the task, which moves the item at its expiry.
        assert_eq!(key_popped_within(&q, Duration::from_secs(60)).await, "a");
    });
}

/// With no runtime anywhere until then, the first waiting `pop` starts the timer task, and the
/// backoff is the task's to end, at its expiry: the pop does not end it at once.
#[test]
fn a_pop_that_starts_the_timer_task_should_leave_the_backoff_to_it() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    q.add("a", 0).unwrap();
    // Polled with no runtime: the queue stays unbound and no task can start.
    let std::task::Poll::Ready(Some(mut item)) = tokio_test::task::spawn(q.pop()).poll() else {
        panic!("\"a\" is active");
    };
    item.set_rejectors(["plugin"]);
    let cycle = q.scheduling_cycle();
    q.add_unschedulable_if_not_present(item, cycle).unwrap();
    q.move_all(&NODE_ADD);
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    paused_runtime().block_on(async {
        let mut pop = tokio_test::task::spawn(q.pop());
        assert!(pop.poll().is_pending(), "its backoff has not ended");
        assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
        let item = tokio::time::timeout(Duration::from_secs(60), pop)
            .await
            .expect("the task ends the backoff")
            .expect("open");
        assert_eq!(*item.done().key(), "a");
    });
}

/// A queue's timers belong to its runtime: once that runtime has shut down, nothing moves an
/// item at its deadline any more; a call that makes the move still does.
#[test]
fn a_queue_outliving_its_runtime_should_move_nothing_by_itself() {
    let q = queue_on(NODE_ADD, "plugin", QueueingHint::Queue);
    paused_runtime().block_on(into_backoff(&q, "a"));
    paused_runtime().block_on(async {
        let still = tokio::time::timeout(Duration::from_secs(60), q.pop()).await;
        assert!(still.is_err(), "no timer of this runtime ends its backoff");
        assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
        let later = Instant::now() + Duration::from_secs(3600);
        assert_eq!(q.flush_backoff_completed(later), 1);
        assert_eq!(key_popped_within(&q, Duration::from_secs(1)).await, "a");
    });
}

#[test]
fn handles_and_futures_should_be_send_sync_unpin() {
    fn send_sync<X: Send + Sync>() {}
    fn send<X: Send>() {}
    fn unpin<X: Unpin>() {}
    send_sync::<Queue>();
    unpin::<Queue>();
    send_sync::<QueuedItem<String, Vec<u8>>>();
    send_sync::<Popped<String, Vec<u8>>>();
    unpin::<Popped<String, Vec<u8>>>();
    send::<ctrlq_queue_async::futures::Pop<'static, &'static str, i64, PriorityOrder>>();
    send_sync::<ctrlq_queue_async::scheduling::AlreadyQueuedError<String, i64>>();
}

#[tokio::test(start_paused = true)]
async fn a_targeted_wildcard_should_affect_only_its_target() {
    let q = queue();
    q.add("a", 2).unwrap();
    q.add("b", 1).unwrap();
    let mut a = bounded(q.pop()).await.unwrap();
    let mut b = bounded(q.pop()).await.unwrap();
    q.activate(["a"]); // both in flight: recorded for "a" only
    a.set_rejectors(["x"]);
    b.set_rejectors(["x"]);
    q.add_unschedulable_if_not_present(b, q.scheduling_cycle())
        .unwrap();
    q.add_unschedulable_if_not_present(a, q.scheduling_cycle())
        .unwrap();
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    assert_eq!(q.where_is(&"b"), Some(SubQueue::Unschedulable));
}

/// Reproducer shape of kube-scheduler's `TestConcurrentUpdateAndPop`: no deadlock, and the only
/// item is handed out whole every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_update_and_pop_should_not_deadlock() {
    let q = queue();
    q.add("pod", 0).unwrap();
    let popper = tokio::spawn({
        let q = q.clone();
        async move {
            for _ in 0..2_000 {
                // `soon`'s body cannot be named in a spawned task here (a `&str` key's `Hash`
                // is not general enough across its lifetimes), so the same bound, spelled out.
                let item = tokio::time::timeout(REAL_BOUND, q.pop())
                    .await
                    .expect("done within the real-time bound")
                    .expect("open");
                assert_eq!(*item.key(), "pod");
                q.done(item.key());
                q.add("pod", 0).unwrap();
            }
        }
    });
    let updater = tokio::spawn({
        let q = q.clone();
        async move {
            for i in 0..2_000 {
                let _ = q.update("pod", i % 7, &[ITEM_UPDATE]);
                tokio::task::yield_now().await;
            }
        }
    });
    popper.await.unwrap();
    updater.await.unwrap();
    assert_eq!(q.len(), 1);
    q.shut_down();
}

// ===== a panicking hint =====

#[tokio::test(start_paused = true)]
async fn move_should_lose_no_item_when_a_hint_panics_midway() {
    // When the hint panics, some items have moved, one is being judged, and some are not
    // scanned yet.
    const N: u32 = 700;
    const PANIC_AT: usize = 400;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let q = SchedulingQueue::<u32, i64>::builder(config())
        .hint(NODE_ADD, "fit", move |_, _, _| {
            let call = counter.fetch_add(1, Ordering::Relaxed);
            assert_ne!(call, PANIC_AT, "a buggy hint");
            Ok(QueueingHint::Queue)
        })
        .build()
        .unwrap();
    for k in 0..N {
        q.add(k, 0).unwrap();
        let mut item = bounded(q.pop()).await.expect("open");
        item.set_rejectors(["fit"]);
        let cycle = q.scheduling_cycle();
        q.add_unschedulable_if_not_present(item, cycle)
            .expect("not queued");
    }

    let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.move_all(&NODE_ADD)));
    assert!(moved.is_err(), "the hint's panic reaches the caller");
    let p = q.pending();
    let mut seen = std::collections::HashSet::new();
    for k in p.active.iter().chain(&p.backoff).chain(&p.unschedulable) {
        assert!(seen.insert(*k), "item {k} is in two sub-queues");
    }
    assert_eq!(seen.len(), N as usize, "every item is in a sub-queue");
    assert_eq!(
        p.backoff.len(),
        PANIC_AT,
        "the items hinted before the panic moved"
    );

    // The queue still works: the next event moves the rest.
    assert_eq!(q.move_all(&NODE_ADD), N as usize - PANIC_AT);
    assert_eq!(q.num_unschedulable(), 0);
}

/// Pops the head and hands it back, failed with an error, from a plain thread (outside any
/// runtime).
async fn fail_on_a_plain_thread(q: &Queue) {
    let item = bounded(q.pop()).await.expect("open");
    let cycle = q.scheduling_cycle();
    let handle = q.clone();
    std::thread::spawn(move || handle.add_unschedulable_if_not_present(item, cycle))
        .join()
        .expect("a plain thread may requeue")
        .expect("not queued");
}

/// A failed item handed back from a plain thread (outside any runtime) is timestamped by the
/// queue's runtime clock: under paused time, the real clock has nothing to do with it.
#[tokio::test(start_paused = true)]
async fn a_requeue_from_a_plain_thread_should_read_the_queue_runtime_clock() {
    let q = queue();
    q.add("a", 0).unwrap();
    // Put the paused clock an hour ahead of the real one: a timestamp read from the real clock
    // would make the 1 s backoff long over, and the item would come back at once.
    advance(Duration::from_secs(3600)).await;
    fail_on_a_plain_thread(&q).await;
    let start = Instant::now();
    assert_eq!(key_popped_within(&q, Duration::from_secs(2)).await, "a");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "the error's 1 s backoff, by the paused clock"
    );
}

/// The first item to need the flush loop, handed back from a plain thread, starts the loop on
/// the queue's runtime: its backoff ends on time with nobody calling from inside the runtime.
#[tokio::test(start_paused = true)]
async fn a_requeue_from_a_plain_thread_should_start_the_flush_on_the_queue_runtime() {
    let q = queue();
    q.add("a", 0).unwrap();
    fail_on_a_plain_thread(&q).await;
    assert_eq!(q.where_is(&"a"), Some(SubQueue::Backoff));
    sleep(Duration::from_millis(1001)).await;
    assert_eq!(
        q.where_is(&"a"),
        Some(SubQueue::Active),
        "the flush loop moved it at its 1 s expiry"
    );
}

#[tokio::test(start_paused = true)]
async fn an_add_after_shutdown_should_be_refused_with_the_item_back() {
    let q = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    q.add("a", 1).unwrap();
    q.shut_down();
    let refused = q.add("b", 2).unwrap_err();
    assert_eq!(refused, AddError::ShutDown(("b", 2)));
    assert!(bounded(q.pop()).await.is_none());
}

// ===== configuration =====

#[test]
fn a_bad_config_should_be_refused_with_the_rule_it_breaks() {
    let secs = Duration::from_secs;
    let default = SchedulingQueueConfig::default;
    let cases = [
        (
            default().initial_backoff(Duration::ZERO),
            ConfigError::ZeroInitialBackoff,
        ),
        (
            default().initial_backoff(secs(20)).max_backoff(secs(10)),
            ConfigError::InitialAboveMax {
                initial: secs(20),
                max: secs(10),
            },
        ),
        (
            default().max_in_unschedulable(Duration::ZERO),
            ConfigError::ZeroMaxInUnschedulable,
        ),
    ];
    for (config, want) in cases {
        assert_eq!(Queue::new(config).unwrap_err(), want, "{config:?}");
        assert_eq!(Queue::builder(config).build().unwrap_err(), want);
    }
    // Go's defaults, and a zero max backoff (backoff off), are accepted.
    assert!(Queue::new(default()).is_ok());
    assert!(Queue::new(default().max_backoff(Duration::ZERO)).is_ok());
}
