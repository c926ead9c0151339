//! Property test of the scheduling queue against a simple model: random operations, and after
//! every step each queued key is in exactly one sub-queue, the queued and in-flight sets match
//! the model, pops respect the active order, and an item whose last attempt failed with an
//! error is never popped from backoff. Popped items are also dropped without a verdict; at the
//! end every key is still either popped again once its backoff ends or held by its gate: none
//! is lost or wedged in flight. Seeded; 10,000 cases.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ctrlq_queue_async::scheduling::{
    ActionType, ClusterEvent, Popped, QueuedItem, QueueingHint, SchedulingQueue,
    SchedulingQueueConfig,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
const ITEM_UPDATE: ClusterEvent = ClusterEvent::new("Item", ActionType::UPDATE);
const EVENTS: [ClusterEvent; 3] = [NODE_ADD, ITEM_UPDATE, ClusterEvent::UNSCHEDULABLE_TIMEOUT];
const PLUGINS: [&str; 3] = ["queue", "skip", "pend"];

type Queue = SchedulingQueue<u8, i64>;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, i64),
    Pop,
    Fail(usize, Option<usize>, bool),
    Done(usize),
    Drop(usize),
    Delete(u8),
    Update(u8, i64, bool),
    Activate(u8),
    Move(usize),
    Advance(u64),
    Leftover(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let (k, p) = (0u8..8, -2i64..4);
    prop_oneof![
        4 => (k.clone(), p.clone()).prop_map(|(k, p)| Op::Add(k, p)),
        4 => Just(Op::Pop),
        3 => (0usize..4, proptest::option::of(0usize..3), any::<bool>())
            .prop_map(|(i, r, pend)| Op::Fail(i, r, pend)),
        1 => (0usize..4).prop_map(Op::Done),
        2 => (0usize..4).prop_map(Op::Drop),
        1 => k.clone().prop_map(Op::Delete),
        2 => (k.clone(), p, any::<bool>()).prop_map(|(k, p, e)| Op::Update(k, p, e)),
        1 => k.prop_map(Op::Activate),
        2 => (0usize..3).prop_map(Op::Move),
        2 => (0u64..12_000).prop_map(Op::Advance),
        1 => (0u64..8).prop_map(Op::Leftover),
    ]
}

fn new_queue(pop_from_backoff: bool) -> Queue {
    SchedulingQueue::builder(SchedulingQueueConfig::default().pop_from_backoff(pop_from_backoff))
        .hint(NODE_ADD, "queue", |_, _, _| Ok(QueueingHint::Queue))
        .hint(NODE_ADD, "skip", |_, _, _| Ok(QueueingHint::Skip))
        .hint(ITEM_UPDATE, "pend", |_, _, _| Ok(QueueingHint::Queue))
        .gate("gate", [ITEM_UPDATE], |item: &QueuedItem<u8, i64>| {
            *item.data() > -2
        })
        .build()
        .unwrap()
}

/// The model: which keys are queued, which are in flight (and the popped items held), and which
/// failed with an error last.
struct Model {
    queued: BTreeSet<u8>,
    in_flight: BTreeSet<u8>,
    held: Vec<Popped<u8, i64>>,
    data: BTreeMap<u8, i64>,
    errored: BTreeSet<u8>,
}

fn step(q: &Queue, m: &mut Model, op: Op) -> Result<(), TestCaseError> {
    match op {
        // Re-adding a key in flight queues a copy `pop` discards; the model leaves that out.
        Op::Add(k, _) if m.in_flight.contains(&k) => {}
        Op::Add(k, p) => {
            q.add(k, p).unwrap();
            m.queued.insert(k);
            m.data.insert(k, p);
        }
        Op::Pop => pop(q, m)?,
        Op::Fail(i, rejector, pending) if i < m.held.len() => {
            let mut item = m.held.remove(i);
            item.set_rejectors(rejector.map(|r| PLUGINS[r]));
            item.set_pending(pending.then_some("pend"));
            let key = *item.key();
            let cycle = q.scheduling_cycle();
            prop_assert!(q.add_unschedulable_if_not_present(item, cycle).is_ok());
            m.in_flight.remove(&key);
            m.queued.insert(key);
            if rejector.is_none() && !pending {
                m.errored.insert(key);
            } else {
                m.errored.remove(&key);
            }
        }
        Op::Drop(i) if i < m.held.len() => {
            // No verdict: handed back as an error, since nothing re-queued the key meanwhile.
            let key = *m.held.remove(i).key();
            m.in_flight.remove(&key);
            m.queued.insert(key);
            m.errored.insert(key);
        }
        Op::Done(i) if i < m.held.len() => {
            let item = m.held.remove(i);
            q.done(item.key());
            m.in_flight.remove(item.key());
        }
        Op::Fail(..) | Op::Done(_) | Op::Drop(_) => {}
        Op::Delete(k) => {
            prop_assert_eq!(q.delete(&k).is_some(), m.queued.remove(&k));
        }
        Op::Update(k, p, with_event) => {
            let events: &[ClusterEvent] = if with_event { &[ITEM_UPDATE] } else { &[] };
            let back = q.update(k, p, events);
            prop_assert_eq!(back.is_some(), m.in_flight.contains(&k));
            if back.is_none() {
                m.queued.insert(k);
                m.data.insert(k, p);
            }
        }
        Op::Activate(k) => {
            q.activate([k]);
        }
        Op::Move(e) => {
            q.move_all(&EVENTS[e]);
        }
        Op::Advance(ms) => {
            let now = tokio::time::Instant::now() + Duration::from_millis(ms);
            q.flush_backoff_completed(now);
        }
        Op::Leftover(min) => {
            let now = tokio::time::Instant::now() + Duration::from_secs(60 * min);
            q.flush_unschedulable_leftover(now);
        }
    }
    Ok(())
}

fn pop(q: &Queue, m: &mut Model) -> Result<(), TestCaseError> {
    let before = q.pending();
    match q.try_pop() {
        Some(item) => {
            let key = *item.key();
            prop_assert!(m.queued.remove(&key), "popped {} which was not queued", key);
            prop_assert!(m.in_flight.insert(key), "popped {} twice", key);
            if before.active.contains(&key) {
                // The head of active: nothing there has a higher priority.
                prop_assert_eq!(m.data.get(&key), Some(item.data()));
                for other in &before.active {
                    prop_assert!(
                        m.data[other] <= *item.data(),
                        "{} popped before {}",
                        key,
                        other
                    );
                }
            } else {
                prop_assert!(before.active.is_empty() && before.backoff.contains(&key));
                prop_assert!(
                    !m.errored.contains(&key),
                    "{} popped from backoff after an error",
                    key
                );
            }
            m.held.push(item);
        }
        None => prop_assert!(before.active.is_empty(), "active had {:?}", before.active),
    }
    Ok(())
}

fn check(q: &Queue, m: &Model) -> Result<(), TestCaseError> {
    let p = q.pending();
    let mut all: Vec<u8> = p
        .active
        .iter()
        .chain(&p.backoff)
        .chain(&p.unschedulable)
        .copied()
        .collect();
    all.sort_unstable();
    let queued: Vec<u8> = m.queued.iter().copied().collect();
    prop_assert_eq!(
        &all,
        &queued,
        "every queued key in exactly one sub-queue ({})",
        p
    );
    let mut flying = q.in_flight();
    flying.sort_unstable();
    prop_assert_eq!(flying, m.in_flight.iter().copied().collect::<Vec<_>>());
    prop_assert_eq!(q.len(), queued.len());
    Ok(())
}

fn run(ops: Vec<Op>, pop_from_backoff: bool) -> Result<(), TestCaseError> {
    let rt = support::paused_runtime();
    rt.block_on(async {
        let q = new_queue(pop_from_backoff);
        let mut m = Model {
            queued: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            held: Vec::new(),
            data: BTreeMap::new(),
            errored: BTreeSet::new(),
        };
        for op in ops {
            step(&q, &mut m, op)?;
            check(&q, &m)?;
        }
        drain(&q, m)
    })
}

/// Drops every held item, then lets time pass and pops until nothing more comes: every key
/// comes out, except those a gate holds (data -2).
fn drain(q: &Queue, mut m: Model) -> Result<(), TestCaseError> {
    for item in m.held.drain(..) {
        m.queued.insert(*item.key());
    }
    prop_assert!(q.in_flight().is_empty(), "a dropped item stayed in flight");
    let start = tokio::time::Instant::now();
    for hour in 1..=3 {
        let now = start + Duration::from_secs(3600 * hour);
        q.flush_unschedulable_leftover(now);
        q.flush_backoff_completed(now);
        while let Some(item) = q.try_pop() {
            m.queued.remove(item.key());
            item.done();
        }
    }
    for key in &m.queued {
        prop_assert_eq!(m.data.get(key), Some(&-2), "{} lost or wedged", key);
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config {
        cases: 10_000,
        rng_seed: RngSeed::Fixed(0x5c4e_d01e),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/scheduling/model.txt",
        ))),
        ..Config::default()
    })]

    #[test]
    fn every_item_stays_in_exactly_one_sub_queue(
        ops in proptest::collection::vec(op(), 1..32),
        pop_from_backoff in any::<bool>(),
    ) {
        run(ops, pop_from_backoff)?;
    }
}
