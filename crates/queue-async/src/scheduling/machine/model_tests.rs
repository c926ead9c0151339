//! Property test of [`SchedulingState`] against a simple model: random operations at
//! explicit instants, and after every step each queued key is in exactly one sub-queue, the
//! queued and in-flight sets match the model, pops respect the active order and count the
//! cycle, an item whose last attempt failed with an error goes to backoff (or its gate) and is
//! never popped from backoff, no backoff item outstays its expiry after a flush, and the next
//! leftover deadline is never late. At the end every key still comes out once time passes,
//! except those a gate holds: none is lost or wedged in flight. Seeded; 10,000 cases.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

use super::{
    ActionType, ClusterEvent, EventPayload, Flight, Hooks, PriorityOrder, QueuedItem, QueueingHint,
    SchedulingQueueConfig, SchedulingState, SubQueue,
};

const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
const ITEM_UPDATE: ClusterEvent = ClusterEvent::new("Item", ActionType::UPDATE);
const EVENTS: [ClusterEvent; 3] = [NODE_ADD, ITEM_UPDATE, ClusterEvent::UNSCHEDULABLE_TIMEOUT];
const PLUGINS: [&str; 3] = ["queue", "skip", "pend"];
/// The data a gate refuses.
const GATED: i64 = -2;

type State = SchedulingState<u8, i64>;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, i64),
    Pop,
    Fail(usize, Option<usize>, bool),
    Done(usize),
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
        1 => k.clone().prop_map(Op::Delete),
        2 => (k.clone(), p, any::<bool>()).prop_map(|(k, p, e)| Op::Update(k, p, e)),
        1 => k.prop_map(Op::Activate),
        2 => (0usize..3).prop_map(Op::Move),
        2 => (0u64..12_000).prop_map(Op::Advance),
        1 => (0u64..8).prop_map(Op::Leftover),
    ]
}

fn new_state(pop_from_backoff: bool) -> State {
    let config = SchedulingQueueConfig::default().pop_from_backoff(pop_from_backoff);
    let mut hooks = Hooks::new();
    hint(&mut hooks, NODE_ADD, "queue", QueueingHint::Queue);
    hint(&mut hooks, NODE_ADD, "skip", QueueingHint::Skip);
    hint(&mut hooks, ITEM_UPDATE, "pend", QueueingHint::Queue);
    let gate = |item: &QueuedItem<u8, i64>| *item.data() != GATED;
    hooks
        .gates
        .push(("gate", vec![ITEM_UPDATE], Arc::new(gate)));
    SchedulingState::new(config, hooks, PriorityOrder).unwrap()
}

/// Registers a hint of `plugin` for `event` that always gives `answer`.
fn hint<K, T>(
    hooks: &mut Hooks<K, T>,
    event: ClusterEvent,
    plugin: &'static str,
    answer: QueueingHint,
) {
    hooks
        .hints
        .push((event, plugin, Arc::new(move |_, _, _| Ok(answer))));
}

/// A state with the default settings and one hint, of `Fit` for `NODE_ADD`, that queues.
fn fit_state() -> SchedulingState<&'static str, i64> {
    let mut hooks = Hooks::new();
    hint(&mut hooks, NODE_ADD, "Fit", QueueingHint::Queue);
    SchedulingState::new(SchedulingQueueConfig::default(), hooks, PriorityOrder).unwrap()
}

impl<K: std::hash::Hash + Eq + Clone, T: super::Priority> SchedulingState<K, T> {
    /// [`move_matching`](Self::move_matching) with every unschedulable item as a candidate and
    /// no payload.
    fn move_all(&mut self, event: &ClusterEvent, now: Instant) -> usize {
        self.move_matching(event, EventPayload::none(), now, |_| true)
    }

    /// [`hand_back`](Self::hand_back) of an item with a verdict.
    fn fail(
        &mut self,
        item: QueuedItem<K, T>,
        flight: Option<u64>,
        cycle: u64,
        now: Instant,
    ) -> Result<(), QueuedItem<K, T>> {
        self.hand_back(item, flight, cycle, now, false)
    }

    fn done(&mut self, key: &K) -> bool {
        self.in_flight.done(key)
    }

    fn is_in_flight(&self, key: &K) -> bool {
        self.in_flight.contains(key)
    }

    fn in_flight_keys(&self) -> Vec<K> {
        self.in_flight.markers.keys().cloned().collect()
    }

    fn in_flight_events(&self) -> Vec<super::InFlightEntry<K>> {
        self.in_flight.entries()
    }

    fn num_unschedulable(&self) -> usize {
        self.unschedulable.len()
    }

    fn scheduling_cycle(&self) -> u64 {
        self.cycle
    }

    fn is_closed(&self) -> bool {
        self.closed
    }

    fn flush_backoff_completed(&mut self, now: Instant) -> usize {
        self.flush_backoff(Some(now), now)
    }

    fn flush_backoff_all(&mut self, now: Instant) -> usize {
        self.flush_backoff(None, now)
    }

    fn delete(&mut self, key: &K) -> Option<T> {
        self.take(key).map(|item| item.data)
    }

    fn end_flight(&mut self, key: &K, flight: u64) {
        if self.in_flight.is_current(key, flight) {
            self.in_flight.done(key);
        }
    }
}

impl<K, T, C> std::fmt::Debug for SchedulingState<K, T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.describe("SchedulingState", f)
    }
}

/// The model: the clock, which keys are queued, which are in flight (and the popped items
/// held), their data, which failed with an error last, and how many pops there were.
struct Model {
    now: Instant,
    queued: BTreeSet<u8>,
    in_flight: BTreeSet<u8>,
    held: Vec<Flight<u8, i64>>,
    data: BTreeMap<u8, i64>,
    errored: BTreeSet<u8>,
    pops: u64,
    pop_from_backoff: bool,
}

fn step(s: &mut State, m: &mut Model, op: Op) -> Result<(), TestCaseError> {
    match op {
        // Re-adding a key in flight queues a copy `pop` discards; the model leaves that out.
        Op::Add(k, _) if m.in_flight.contains(&k) => {}
        Op::Add(k, p) => {
            prop_assert!(s.add(k, p, m.now).is_ok());
            m.queued.insert(k);
            m.data.insert(k, p);
            let expected = if p == GATED {
                SubQueue::Unschedulable
            } else {
                SubQueue::Active
            };
            prop_assert_eq!(s.where_is(&k), Some(expected));
        }
        Op::Pop => pop(s, m)?,
        Op::Fail(i, rejector, pending) if i < m.held.len() => fail(s, m, i, rejector, pending)?,
        Op::Done(i) if i < m.held.len() => {
            let flight = m.held.remove(i);
            prop_assert!(s.done(flight.item.key()));
            prop_assert!(!s.done(flight.item.key()), "done twice");
            m.in_flight.remove(flight.item.key());
        }
        Op::Fail(..) | Op::Done(_) => {}
        Op::Delete(k) => {
            prop_assert_eq!(s.delete(&k).is_some(), m.queued.remove(&k));
            prop_assert_eq!(s.where_is(&k), None);
        }
        Op::Update(k, p, with_event) => {
            let events: &[ClusterEvent] = if with_event { &[ITEM_UPDATE] } else { &[] };
            let back = s.update(k, p, events, m.now);
            prop_assert_eq!(back.is_some(), m.in_flight.contains(&k));
            if back.is_none() {
                m.queued.insert(k);
                m.data.insert(k, p);
            }
        }
        Op::Activate(k) => {
            let was = s.where_is(&k);
            let moved = s.activate([k], m.now);
            let now_in = s.where_is(&k);
            prop_assert_eq!(
                moved == 1,
                was != Some(SubQueue::Active) && now_in == Some(SubQueue::Active)
            );
            if was == Some(SubQueue::Backoff) {
                prop_assert_eq!(
                    (moved, now_in),
                    (1, Some(SubQueue::Active)),
                    "backoff activates"
                );
            }
        }
        Op::Move(e) => {
            let before = s.pending().unschedulable.len();
            let moved = s.move_matching(&EVENTS[e], EventPayload::none(), m.now, |_| true);
            let after = s.pending().unschedulable.len();
            prop_assert_eq!(
                moved,
                before - after,
                "a move reports what left unschedulable"
            );
        }
        Op::Advance(ms) => {
            m.now += Duration::from_millis(ms);
            s.flush_backoff_completed(m.now);
            prop_assert!(
                s.backoff.next_expiry().is_none_or(|e| e > m.now),
                "backoff outstayed"
            );
        }
        Op::Leftover(min) => {
            m.now += Duration::from_secs(60 * min);
            s.flush_unschedulable_leftover(m.now);
        }
    }
    Ok(())
}

fn fail(
    s: &mut State,
    m: &mut Model,
    i: usize,
    rejector: Option<usize>,
    pending: bool,
) -> Result<(), TestCaseError> {
    let mut flight = m.held.remove(i);
    flight.item.set_rejectors(rejector.map(|r| PLUGINS[r]));
    flight.item.set_pending(pending.then_some("pend"));
    let key = *flight.item.key();
    let errored = rejector.is_none() && !pending;
    let handed = s.fail(flight.item, Some(flight.id), flight.cycle, m.now);
    prop_assert!(handed.is_ok());
    m.in_flight.remove(&key);
    m.queued.insert(key);
    if errored {
        m.errored.insert(key);
        // An error waits out its backoff (at least 1 s from now), unless its gate holds it.
        let expected = if m.data[&key] == GATED {
            SubQueue::Unschedulable
        } else {
            SubQueue::Backoff
        };
        prop_assert_eq!(s.where_is(&key), Some(expected));
    } else {
        m.errored.remove(&key);
    }
    Ok(())
}

fn pop(s: &mut State, m: &mut Model) -> Result<(), TestCaseError> {
    let before = s.pending();
    match s.pop(|| m.now) {
        Some(flight) => {
            let key = *flight.item.key();
            m.pops += 1;
            prop_assert_eq!(flight.cycle, m.pops);
            prop_assert!(m.queued.remove(&key), "popped {} which was not queued", key);
            prop_assert!(m.in_flight.insert(key), "popped {} twice", key);
            if before.active.contains(&key) {
                // The head of active: nothing there has a higher priority.
                prop_assert_eq!(m.data.get(&key), Some(flight.item.data()));
                for other in &before.active {
                    prop_assert!(
                        m.data[other] <= *flight.item.data(),
                        "{} before {}",
                        key,
                        other
                    );
                }
            } else {
                prop_assert!(
                    m.pop_from_backoff,
                    "{} popped from backoff with the option off",
                    key
                );
                prop_assert!(before.active.is_empty() && before.backoff.contains(&key));
                prop_assert!(
                    !m.errored.contains(&key),
                    "{} popped from backoff after an error",
                    key
                );
            }
            m.held.push(flight);
        }
        None => {
            prop_assert!(before.active.is_empty(), "active had {:?}", before.active);
            if m.pop_from_backoff {
                for key in &before.backoff {
                    prop_assert!(m.errored.contains(key), "{} could pop from backoff", key);
                }
            }
        }
    }
    Ok(())
}

fn check(s: &mut State, m: &Model) -> Result<(), TestCaseError> {
    let p = s.pending();
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
    for key in &m.in_flight {
        prop_assert!(s.is_in_flight(key));
    }
    prop_assert_eq!(s.len(), queued.len());
    prop_assert_eq!(s.scheduling_cycle(), m.pops);
    // The next leftover deadline is never later than any unschedulable item's.
    prop_assert_eq!(s.in_flight.markers.len(), m.in_flight.len());
    let earliest = s
        .unschedulable
        .items()
        .filter_map(|item| s.config.leftover_deadline(item))
        .min();
    if let Some(earliest) = earliest {
        let next = s.next_leftover;
        prop_assert!(
            next.is_some_and(|n| n <= earliest),
            "leftover late: {:?} > {:?}",
            next,
            earliest
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>, pop_from_backoff: bool) -> Result<(), TestCaseError> {
    let mut s = new_state(pop_from_backoff);
    let mut m = Model {
        now: Instant::now(),
        queued: BTreeSet::new(),
        in_flight: BTreeSet::new(),
        held: Vec::new(),
        data: BTreeMap::new(),
        errored: BTreeSet::new(),
        pops: 0,
        pop_from_backoff,
    };
    for op in ops {
        step(&mut s, &mut m, op)?;
        check(&mut s, &m)?;
    }
    drain(&mut s, m)
}

/// Hands every held item back as an error, then lets time pass and pops until nothing more
/// comes: every key comes out, except those a gate holds.
fn drain(s: &mut State, mut m: Model) -> Result<(), TestCaseError> {
    for flight in m.held.drain(..) {
        m.queued.insert(*flight.item.key());
        let handed = s.fail(flight.item, Some(flight.id), flight.cycle, m.now);
        prop_assert!(handed.is_ok());
    }
    prop_assert_eq!(s.len(), m.queued.len(), "every held item queued again");
    for hour in 1..=3 {
        let now = m.now + Duration::from_secs(3600 * hour);
        s.flush_unschedulable_leftover(now);
        s.flush_backoff_completed(now);
        while let Some(flight) = s.pop(|| now) {
            m.queued.remove(flight.item.key());
            s.done(flight.item.key());
        }
    }
    for key in &m.queued {
        prop_assert_eq!(m.data.get(key), Some(&GATED), "{} lost or wedged", key);
    }
    Ok(())
}

proptest! {
    // `PROPTEST_CASES` lowers the count for a quick run (a mutation run, say); 10,000 otherwise.
    #![proptest_config(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000),
        rng_seed: RngSeed::Fixed(0x5c4e_d01e),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/scheduling/machine.txt",
        ))),
        ..Config::default()
    })]

    #[test]
    fn scheduling_state_matches_the_model(
        ops in prop::collection::vec(op(), 1..60),
        pop_from_backoff in any::<bool>(),
    ) {
        run(ops, pop_from_backoff)?;
    }
}

#[test]
fn closing_refuses_adds_ends_flights_and_keeps_the_queued_items() {
    let mut s = new_state(true);
    let now = Instant::now();
    s.add(1, 1, now).unwrap();
    s.add(2, 2, now).unwrap();
    let flight = s.pop(|| now).unwrap();
    s.shut_down();
    assert_eq!(s.add(3, 3, now).unwrap_err(), (3, 3));
    assert!(s.pop(|| now).is_none(), "nothing pops once closed");
    assert!(!s.is_in_flight(flight.item.key()), "every flight ended");
    assert_eq!((s.len(), s.where_is(&1)), (1, Some(SubQueue::Active)));
    assert_eq!(
        s.update(3, 3, &[], now),
        Some(3),
        "an update that adds is refused"
    );
}

#[test]
fn a_hand_back_of_a_queued_key_changes_nothing() {
    let mut s = new_state(true);
    let now = Instant::now();
    s.add(1, 1, now).unwrap();
    let flight = s.pop(|| now).unwrap();
    s.add(1, 5, now).unwrap(); // re-added while in flight
    let refused = s.fail(flight.item, Some(flight.id), flight.cycle, now);
    assert_eq!(*refused.unwrap_err().data(), 1);
    assert_eq!((s.len(), s.where_is(&1)), (1, Some(SubQueue::Active)));
    assert!(!s.is_in_flight(&1), "the flight still ended");
}

#[test]
fn a_rejected_item_waits_for_an_event_and_a_move_request_sends_it_to_backoff() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut first = s.pop(|| t0).unwrap();
    first.item.set_rejectors(["skip"]);
    // Not in flight here (no flight id), no move requested since: unschedulable.
    s.fail(first.item, None, first.cycle, t0).unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Unschedulable));
    assert_eq!(s.move_all(&NODE_ADD, t0), 0, "the hint of `skip` says skip");

    s.add(2, 1, t0).unwrap();
    let mut second = s.pop(|| t0).unwrap();
    s.move_all(&ClusterEvent::new("Pv", ActionType::ADD), t0); // of no interest: no request
    second.item.set_rejectors(["skip"]);
    s.fail(second.item, None, second.cycle, t0).unwrap();
    assert_eq!(s.where_is(&2), Some(SubQueue::Unschedulable));

    s.add(3, 1, t0).unwrap();
    let mut third = s.pop(|| t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0); // a move request in the cycle it was popped in
    third.item.set_rejectors(["skip"]);
    s.fail(third.item, None, third.cycle, t0).unwrap();
    assert_eq!(s.where_is(&3), Some(SubQueue::Backoff));
    let expiry = t0 + Duration::from_secs(1);
    assert_eq!(s.next_deadline(), Some(expiry));
    assert_eq!(
        s.flush_backoff_completed(expiry - Duration::from_nanos(1)),
        0
    );
    assert_eq!(s.flush_backoff_completed(expiry), 1);
}

#[test]
fn ending_all_backoff_moves_every_item_to_active() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    s.add(2, 2, t0).unwrap();
    for _ in 0..2 {
        let mut flight = s.pop(|| t0).unwrap();
        s.move_all(&ITEM_UPDATE, t0);
        flight.item.set_rejectors(["skip"]);
        s.fail(flight.item, None, flight.cycle, t0).unwrap();
    }
    assert_eq!(s.where_is(&1), Some(SubQueue::Backoff));
    assert_eq!(s.where_is(&2), Some(SubQueue::Backoff));
    assert_eq!(s.flush_backoff_completed(t0), 0, "neither backoff is over");
    let now = t0 + Duration::from_millis(1);
    assert_eq!(s.flush_backoff_all(now), 2);
    assert_eq!(s.flush_backoff_all(now), 0, "nothing left");
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.where_is(&1), Some(SubQueue::Active));
    assert_eq!(s.where_is(&2), Some(SubQueue::Active));
}

#[test]
fn the_leftover_flush_moves_items_strictly_after_the_maximum() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut flight = s.pop(|| t0).unwrap();
    assert!(
        s.done(&1),
        "its flight ends: the hand-back finds it not in flight"
    );
    flight.item.set_rejectors(["skip"]);
    s.fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Unschedulable));
    let five_min = Duration::from_secs(300);
    assert_eq!(
        s.next_deadline(),
        Some(t0 + five_min + Duration::from_nanos(1))
    );
    assert_eq!(s.flush_unschedulable_leftover(t0 + five_min), 0);
    assert_eq!(
        s.flush_unschedulable_leftover(t0 + five_min + Duration::from_nanos(1)),
        1
    );
    assert_eq!(
        s.where_is(&1),
        Some(SubQueue::Active),
        "its backoff is long over"
    );
    assert_eq!(s.next_deadline(), None);
    assert_eq!(
        s.in_flight_events(),
        Vec::new(),
        "nothing in flight: the timeout event is not kept"
    );
}

#[test]
fn a_pending_plugin_answering_queue_skips_the_backoff() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut flight = s.pop(|| t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0); // seen while in flight: replayed on the hand-back
    flight.item.set_pending(["pend"]);
    s.fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Active));
}

#[test]
fn an_event_moves_what_its_hints_queue_and_one_of_no_interest_moves_nothing() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    for (key, plugin) in [(1, "queue"), (2, "skip")] {
        s.add(key, 1, t0).unwrap();
        let mut flight = s.pop(|| t0).unwrap();
        assert!(s.done(&key));
        flight.item.set_rejectors([plugin]);
        s.fail(flight.item, Some(flight.id), flight.cycle, t0)
            .unwrap();
    }
    let pv_add = ClusterEvent::new("Pv", ActionType::ADD);
    assert_eq!(s.move_all(&pv_add, t0), 0);
    assert_eq!(
        s.move_request_cycle, None,
        "no request for an event of no interest"
    );
    assert_eq!(
        s.move_all(&NODE_ADD, t0),
        1,
        "the hint of `queue` queues, `skip`'s skips"
    );
    assert_eq!(s.where_is(&1), Some(SubQueue::Backoff));
    assert_eq!(s.where_is(&2), Some(SubQueue::Unschedulable));
    // Its backoff (1 s from its hand-back) ends exactly now: active, not backoff.
    let at_expiry = t0 + Duration::from_secs(1);
    assert_eq!(
        s.move_all(&ClusterEvent::UNSCHEDULABLE_TIMEOUT, at_expiry),
        1
    );
    assert_eq!(s.where_is(&2), Some(SubQueue::Active));
}

#[test]
fn parking_moves_the_next_leftover_deadline_only_when_earlier() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(10);
    let deadline = |t: Instant| t + Duration::from_secs(300) + Duration::from_nanos(1);
    // Parks an item (its gate refuses it); whether the earliest deadline got earlier (the
    // timer must look again), whether a timed move is due ever, and the next leftover deadline.
    let mut park = |key, at| {
        let before = s.next_deadline();
        s.add(key, GATED, at).unwrap();
        let after = s.next_deadline();
        let earlier = after.is_some_and(|a| before.is_none_or(|b| a < b));
        (earlier, after.is_some(), s.next_leftover)
    };
    assert_eq!(park(1, later), (true, true, Some(deadline(later))));
    assert_eq!(
        park(2, t0),
        (true, true, Some(deadline(t0))),
        "earlier: re-armed"
    );
    assert_eq!(
        park(3, t0),
        (false, true, Some(deadline(t0))),
        "equal: nothing to re-arm"
    );
    assert_eq!(park(4, later), (false, true, Some(deadline(t0))));
}

#[test]
fn changes_say_whom_to_wake() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    // Whom a change wakes: the pops if a pop can take an item it could not take before, the
    // timer if the earliest deadline got earlier, and a timed move is due if any deadline is.
    let wakes = |s: &mut State, change: &dyn Fn(&mut State)| {
        let (could_pop, before) = (s.can_pop(), s.next_deadline());
        change(s);
        let after = s.next_deadline();
        let earlier = after.is_some_and(|a| before.is_none_or(|b| a < b));
        (!could_pop && s.can_pop(), earlier, after.is_some())
    };
    let active = wakes(&mut s, &|s| s.add(1, 1, t0).unwrap());
    assert_eq!(active, (true, false, false));
    let mut off = new_state(false);
    off.add(1, 1, t0).unwrap();
    let flight = off.pop(|| t0).unwrap();
    let backoff = wakes(&mut off, &|s| {
        let item = QueuedItem::new(1, 1, t0, 0);
        s.fail(item, Some(flight.id), flight.cycle, t0).unwrap();
    });
    assert_eq!(off.where_is(&1), Some(SubQueue::Backoff));
    assert_eq!(backoff, (false, true, true));
}

#[test]
fn a_leftover_flush_with_nothing_due_records_no_event() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, GATED, t0).unwrap(); // gated: unschedulable, due in 5 min
    s.add(2, 1, t0).unwrap();
    let _flight = s.pop(|| t0).unwrap();
    assert_eq!(
        s.flush_unschedulable_leftover(t0 + Duration::from_secs(60)),
        0
    );
    assert_eq!(s.in_flight_events(), vec![super::InFlightEntry::Item(2)]);
}

#[test]
fn a_guard_dropped_claims_its_item_back_only_while_its_flight_lasts() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let flight = s.pop(|| t0).unwrap();
    let claim = s.hand_back(flight.item, Some(flight.id), flight.cycle, t0, true);
    assert!(claim.is_ok(), "a current flight is taken back");
    assert_eq!(
        s.where_is(&1),
        Some(SubQueue::Backoff),
        "an error waits out its backoff"
    );

    s.add(2, 1, t0).unwrap();
    let flight = s.pop(|| t0).unwrap();
    assert!(s.done(&2));
    let claim = s.hand_back(flight.item, Some(flight.id), flight.cycle, t0, true);
    assert!(
        claim.is_ok() && s.where_is(&2).is_none(),
        "an ended flight has nothing to hand back"
    );
}

#[test]
fn a_hand_back_finds_its_key_in_any_sub_queue() {
    let t0 = Instant::now();
    for queued_in in [SubQueue::Backoff, SubQueue::Unschedulable] {
        let mut s = new_state(true);
        s.add(1, 1, t0).unwrap();
        let flight = s.pop(|| t0).unwrap();
        let copy = QueuedItem::new(1, 7, t0, 0);
        match queued_in {
            SubQueue::Backoff => s.backoff.push(copy, t0 + Duration::from_secs(1)),
            _ => s.unschedulable.insert(copy),
        }
        let refused = s.fail(flight.item, Some(flight.id), flight.cycle, t0);
        assert_eq!(refused.map_err(|item| *item.data()).unwrap_err(), 1);
        assert_eq!((s.len(), s.where_is(&1)), (1, Some(queued_in)));
    }
}

#[test]
fn an_update_judges_its_events_for_an_unschedulable_item() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut flight = s.pop(|| t0).unwrap();
    assert!(s.done(&1));
    flight.item.set_rejectors(["queue"]);
    s.fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(s.update(1, 2, &[ITEM_UPDATE], t0), None);
    assert_eq!(
        s.where_is(&1),
        Some(SubQueue::Unschedulable),
        "no hint of `queue` for it"
    );
    assert_eq!(s.update(1, 3, &[ITEM_UPDATE, NODE_ADD], t0), None);
    assert_eq!(
        s.where_is(&1),
        Some(SubQueue::Backoff),
        "the first event that helps"
    );
}

#[test]
fn a_replay_looks_past_an_event_that_does_not_help() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut flight = s.pop(|| t0).unwrap();
    s.move_all(&NODE_ADD, t0); // `skip` says skip
    s.move_all(&ITEM_UPDATE, t0); // `pend` says queue, and it is pending: at once
    flight.item.set_rejectors(["skip"]);
    flight.item.set_pending(["pend"]);
    s.fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Active));
}

#[test]
fn equal_items_pop_in_queueing_order() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    for key in 0..10 {
        s.add(key, 1, t0).unwrap();
    }
    let order: Vec<u8> = std::iter::from_fn(|| s.pop(|| t0).map(|f| *f.item.key())).collect();
    assert_eq!(order, (0..10).collect::<Vec<u8>>());
}

#[test]
fn the_state_reports_what_it_holds() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    assert_eq!(s.len(), 0);
    s.add(1, GATED, t0).unwrap();
    s.add(2, 1, t0).unwrap();
    s.add(3, 1, t0).unwrap();
    assert_ne!(s.len(), 0);
    let flight = s.pop(|| t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0);
    assert_eq!(s.move_request_cycle, Some(1));
    assert!(s.num_unschedulable() != 0 && s.where_is(&1) == Some(SubQueue::Unschedulable));
    assert_eq!(s.in_flight_keys(), vec![2]);
    assert!(s.in_flight.is_current(&2, flight.id));
    let in_flight = &s.in_flight;
    assert!(!in_flight.is_current(&2, flight.id + 1) && !in_flight.is_current(&3, 0));
    let shown = format!("{s:?}");
    assert!(
        shown.contains("SchedulingState { active: 1, backoff: 0, unschedulable: 1, in_flight: 1"),
        "{shown}"
    );
    s.end_flight(&2, flight.id + 1);
    assert!(s.is_in_flight(&2), "a stale flight id ends nothing");
    s.end_flight(&2, flight.id);
    assert!(!s.is_in_flight(&2));
    assert_eq!(s.delete(&1), Some(GATED));
    assert!(s.num_unschedulable() == 0 && s.delete(&1).is_none());
}

// ===== the steps of the state, one at a time =====

#[test]
fn a_rejected_item_waits_for_an_event_then_for_its_backoff() {
    let mut state = fit_state();
    let t0 = Instant::now();

    state.add("pod-a", 10, t0).unwrap();
    let mut flight = state.pop(|| t0).unwrap();
    flight.item.set_rejectors(["Fit"]); // the attempt failed
    state
        .fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(state.where_is(&"pod-a"), Some(SubQueue::Unschedulable));

    state.move_all(&NODE_ADD, t0); // backoff (1 s) not over yet
    assert_eq!(state.where_is(&"pod-a"), Some(SubQueue::Backoff));
    assert_eq!(state.next_deadline(), Some(t0 + Duration::from_secs(1)));
    assert_eq!(
        state.flush_backoff_completed(t0 + Duration::from_secs(1)),
        1
    );
    assert_eq!(state.where_is(&"pod-a"), Some(SubQueue::Active));
}

#[test]
fn flush_backoff_all_moves_items_whose_backoff_is_not_over() {
    let mut state = fit_state();
    let t0 = Instant::now();
    state.add("pod-a", 10, t0).unwrap();
    let mut flight = state.pop(|| t0).unwrap();
    flight.item.set_rejectors(["Fit"]);
    state
        .fail(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    state.move_all(&NODE_ADD, t0); // into backoff until t0 + 1 s

    let now = t0 + Duration::from_millis(1);
    assert_eq!(
        state.flush_backoff_completed(now),
        0,
        "its backoff is not over"
    );
    assert_eq!(state.flush_backoff_all(now), 1, "moved all the same");
    assert_eq!(state.where_is(&"pod-a"), Some(SubQueue::Active));
    assert_eq!(state.flush_backoff_all(now), 0, "nothing left in backoff");
}

#[test]
fn a_new_state_is_empty_and_open() {
    let mut state = fit_state();
    let unschedulable = state.num_unschedulable();
    assert_eq!((unschedulable, state.move_request_cycle), (0, None));

    state.add("a", 1, Instant::now()).unwrap();
    let active = state.pending().active.len();
    assert_eq!(
        (active, state.scheduling_cycle(), state.is_closed()),
        (1, 0, false)
    );
}

#[test]
fn hooks_care_only_for_the_events_of_their_hints_and_gates() {
    let mut hooks = Hooks::<&str, i64>::new();
    hint(&mut hooks, NODE_ADD, "Fit", QueueingHint::Queue);
    hooks
        .gates
        .push(("Quota", vec![NODE_ADD], Arc::new(|item| *item.data() < 100)));
    assert!(hooks.is_of_interest(&NODE_ADD));
    assert!(!hooks.is_of_interest(&ClusterEvent::new("Pv", ActionType::ADD)));
}

#[test]
fn an_added_item_is_placed_in_active_and_lets_a_pop_take_it() {
    let mut state = fit_state();
    let now = Instant::now();
    assert!(!state.can_pop());
    state.add("a", 1, now).unwrap();
    assert_eq!(state.where_is(&"a"), Some(SubQueue::Active));
    assert!(state.can_pop());
}

#[test]
fn a_flight_carries_its_item_and_cycle() {
    let mut state = fit_state();
    let now = Instant::now();
    state.add("a", 1, now).unwrap();
    let flight = state.pop(|| now).unwrap();
    assert_eq!((*flight.item.key(), flight.cycle), ("a", 1));
}

#[test]
fn an_item_in_flight_is_taken_back() {
    let mut state = fit_state();
    let now = Instant::now();
    state.add("a", 1, now).unwrap();
    let flight = state.pop(|| now).unwrap();
    let claim = state.fail(flight.item, Some(flight.id), flight.cycle, now);
    assert!(claim.is_ok() && state.where_is(&"a").is_some());
}
