//! Property test of [`SchedulingState`] against a simple model: random operations at
//! explicit instants, and after every step each queued key is in exactly one sub-queue, the
//! queued and in-flight sets match the model, pops respect the active order and count the
//! cycle, an item whose last attempt failed with an error goes to backoff (or its gate) and is
//! never popped from backoff, no backoff item outstays its expiry after a flush, and the next
//! leftover deadline is never late. At the end every key still comes out once time passes,
//! except those a gate holds: none is lost or wedged in flight. Seeded; 10,000 cases.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

use super::{
    ActionType, ClusterEvent, EventPayload, Flight, Placement, QueuedItem, QueueingHint, Return,
    SchedulingQueueConfig, SchedulingRules, SchedulingState, SubQueue, Wake,
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
    let rules = SchedulingRules::new(config)
        .hint(NODE_ADD, "queue", |_, _, _| Ok(QueueingHint::Queue))
        .hint(NODE_ADD, "skip", |_, _, _| Ok(QueueingHint::Skip))
        .hint(ITEM_UPDATE, "pend", |_, _, _| Ok(QueueingHint::Queue))
        .gate("gate", [ITEM_UPDATE], |item| *item.data() != GATED);
    SchedulingState::with_rules(rules).unwrap()
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
            let (_, _, ready) = s.parts_mut();
            prop_assert!(
                ready.next_expiry().is_none_or(|e| e > m.now),
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
    let handed = s.hand_back(flight.item, Some(flight.id), flight.cycle, m.now);
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
    match s.pop(m.now) {
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
    let (rules, parked, ready) = s.parts_mut();
    prop_assert_eq!(ready.in_flight_len(), m.in_flight.len());
    let earliest = parked
        .unschedulable
        .items()
        .filter_map(|item| rules.leftover_deadline(item))
        .min();
    if let Some(earliest) = earliest {
        let next = parked.next_leftover();
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
        let handed = s.hand_back(flight.item, Some(flight.id), flight.cycle, m.now);
        prop_assert!(handed.is_ok());
    }
    prop_assert_eq!(s.len(), m.queued.len(), "every held item queued again");
    for hour in 1..=3 {
        let now = m.now + Duration::from_secs(3600 * hour);
        s.flush_unschedulable_leftover(now);
        s.flush_backoff_completed(now);
        while let Some(flight) = s.pop(now) {
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
    let flight = s.pop(now).unwrap();
    s.shut_down();
    assert_eq!(s.add(3, 3, now).unwrap_err(), (3, 3));
    assert!(s.pop(now).is_none(), "nothing pops once closed");
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
    let flight = s.pop(now).unwrap();
    s.add(1, 5, now).unwrap(); // re-added while in flight
    let refused = s.hand_back(flight.item, Some(flight.id), flight.cycle, now);
    assert_eq!(*refused.unwrap_err().data(), 1);
    assert_eq!((s.len(), s.where_is(&1)), (1, Some(SubQueue::Active)));
    assert!(!s.is_in_flight(&1), "the flight still ended");
}

#[test]
fn a_rejected_item_waits_for_an_event_and_a_move_request_sends_it_to_backoff() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut first = s.pop(t0).unwrap();
    first.item.set_rejectors(["skip"]);
    // Not in flight here (no flight id), no move requested since: unschedulable.
    s.hand_back(first.item, None, first.cycle, t0).unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Unschedulable));
    assert_eq!(s.move_all(&NODE_ADD, t0), 0, "the hint of `skip` says skip");

    s.add(2, 1, t0).unwrap();
    let mut second = s.pop(t0).unwrap();
    s.move_all(&ClusterEvent::new("Pv", ActionType::ADD), t0); // of no interest: no request
    second.item.set_rejectors(["skip"]);
    s.hand_back(second.item, None, second.cycle, t0).unwrap();
    assert_eq!(s.where_is(&2), Some(SubQueue::Unschedulable));

    s.add(3, 1, t0).unwrap();
    let mut third = s.pop(t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0); // a move request in the cycle it was popped in
    third.item.set_rejectors(["skip"]);
    s.hand_back(third.item, None, third.cycle, t0).unwrap();
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
        let mut flight = s.pop(t0).unwrap();
        s.move_all(&ITEM_UPDATE, t0);
        flight.item.set_rejectors(["skip"]);
        s.hand_back(flight.item, None, flight.cycle, t0).unwrap();
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
    let mut flight = s.pop(t0).unwrap();
    assert!(
        s.done(&1),
        "its flight ends: the hand-back finds it not in flight"
    );
    flight.item.set_rejectors(["skip"]);
    s.hand_back(flight.item, Some(flight.id), flight.cycle, t0)
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
    let mut flight = s.pop(t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0); // seen while in flight: replayed on the hand-back
    flight.item.set_pending(["pend"]);
    s.hand_back(flight.item, Some(flight.id), flight.cycle, t0)
        .unwrap();
    assert_eq!(s.where_is(&1), Some(SubQueue::Active));
}

#[test]
fn an_event_moves_what_its_hints_queue_and_one_of_no_interest_moves_nothing() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    for (key, plugin) in [(1, "queue"), (2, "skip")] {
        s.add(key, 1, t0).unwrap();
        let mut flight = s.pop(t0).unwrap();
        assert!(s.done(&key));
        flight.item.set_rejectors([plugin]);
        s.hand_back(flight.item, Some(flight.id), flight.cycle, t0)
            .unwrap();
    }
    let pv_add = ClusterEvent::new("Pv", ActionType::ADD);
    assert_eq!(s.move_all(&pv_add, t0), 0);
    let (_, parked, _) = s.parts_mut();
    assert_eq!(
        parked.move_request_cycle(),
        None,
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
fn a_move_tells_its_sink_how_many_candidates_it_has_seen() {
    let mut s = new_state(true);
    let mut other = new_state(true);
    let t0 = Instant::now();
    let (rules, parked, _) = s.parts_mut();
    let (_, _, ready) = other.parts_mut();
    for key in 0..4 {
        let mut item = rules.new_item(parked, key, 1, t0);
        item.set_rejectors(["queue"]);
        rules.commit(parked, ready, Placement::Unschedulable(item), t0);
    }
    let mut seen = Vec::new();
    let payload = EventPayload::none();
    let odd = |item: &QueuedItem<u8, i64>| item.key() % 2 == 1;
    let moved = rules.move_matching(parked, &NODE_ADD, &payload, t0, odd, |_, n| seen.push(n));
    assert_eq!((moved, seen), (2, vec![2, 4]));
}

#[test]
fn parking_moves_the_next_leftover_deadline_only_when_earlier() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(10);
    let deadline = |t: Instant| t + Duration::from_secs(300) + Duration::from_nanos(1);
    let (rules, parked, ready) = s.parts_mut();
    let mut park = |key, at| {
        let item = rules.new_item(parked, key, 1, at);
        let wake = rules.commit(parked, ready, Placement::Unschedulable(item), at);
        (wake.timer, wake.flush, parked.next_leftover())
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
fn commits_say_whom_to_wake() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    let active = s.add(1, 1, t0).unwrap();
    assert_eq!(
        (active.pop, active.timer, active.flush),
        (true, false, false)
    );
    let mut wake = Wake::default();
    wake |= Wake {
        timer: true,
        ..Wake::default()
    };
    wake |= Wake {
        flush: true,
        ..Wake::default()
    };
    assert_eq!((wake.pop, wake.timer, wake.flush), (false, true, true));
    wake |= Wake {
        pop: true,
        ..Wake::default()
    };
    wake |= Wake::default();
    assert_eq!((wake.pop, wake.timer, wake.flush), (true, true, true));
    let mut off = new_state(false);
    let (rules, parked, ready) = off.parts_mut();
    let item = rules.new_item(parked, 1, 1, t0);
    let placement = Placement::Backoff(item, t0 + Duration::from_secs(1));
    let backoff = rules.commit(parked, ready, placement, t0);
    assert_eq!(
        (backoff.pop, backoff.timer, backoff.flush),
        (false, true, true)
    );
    let item = rules.new_item(parked, 2, 1, t0);
    let refused = rules.commit_ready(ready, Placement::Unschedulable(item), t0);
    assert_eq!(
        refused.map_err(|item| *item.key()),
        Err(2),
        "unschedulable is handed back"
    );
}

#[test]
fn rules_keep_their_config_and_show_it() {
    let config = SchedulingQueueConfig::default().max_backoff(Duration::from_secs(20));
    let rules = SchedulingRules::<u8, i64>::new(config);
    assert_eq!(rules.config(), &config);
    let shown = format!("{rules:?}");
    assert!(
        shown.starts_with("SchedulingRules") && shown.contains("20s"),
        "{shown}"
    );
}

#[test]
fn a_leftover_flush_with_nothing_due_records_no_event() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, GATED, t0).unwrap(); // gated: unschedulable, due in 5 min
    s.add(2, 1, t0).unwrap();
    let _flight = s.pop(t0).unwrap();
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
    let flight = s.pop(t0).unwrap();
    let (rules, parked, ready) = s.parts_mut();
    let claim = rules.claim_return(parked, ready, flight.item, Some(flight.id), true);
    let Return::Accepted(returned) = claim else {
        panic!("a current flight is taken back: {claim:?}");
    };
    let placement = rules.requeue(parked, returned, flight.cycle, t0);
    rules.commit(parked, ready, placement, t0);
    assert_eq!(
        s.where_is(&1),
        Some(SubQueue::Backoff),
        "an error waits out its backoff"
    );

    s.add(2, 1, t0).unwrap();
    let flight = s.pop(t0).unwrap();
    assert!(s.done(&2));
    let (rules, parked, ready) = s.parts_mut();
    let claim = rules.claim_return(parked, ready, flight.item, Some(flight.id), true);
    assert!(
        matches!(claim, Return::Ended),
        "an ended flight has nothing to hand back"
    );
}

#[test]
fn a_hand_back_finds_its_key_in_any_sub_queue() {
    let t0 = Instant::now();
    for queued_in in [SubQueue::Backoff, SubQueue::Unschedulable] {
        let mut s = new_state(true);
        s.add(1, 1, t0).unwrap();
        let flight = s.pop(t0).unwrap();
        let (rules, parked, ready) = s.parts_mut();
        let copy = rules.new_item(parked, 1, 7, t0);
        let placement = match queued_in {
            SubQueue::Backoff => Placement::Backoff(copy, t0 + Duration::from_secs(1)),
            _ => Placement::Unschedulable(copy),
        };
        rules.commit(parked, ready, placement, t0);
        let refused = s.hand_back(flight.item, Some(flight.id), flight.cycle, t0);
        assert_eq!(refused.map_err(|item| *item.data()).unwrap_err(), 1);
        assert_eq!((s.len(), s.where_is(&1)), (1, Some(queued_in)));
    }
}

#[test]
fn an_update_judges_its_events_for_an_unschedulable_item() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    s.add(1, 1, t0).unwrap();
    let mut flight = s.pop(t0).unwrap();
    assert!(s.done(&1));
    flight.item.set_rejectors(["queue"]);
    s.hand_back(flight.item, Some(flight.id), flight.cycle, t0)
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
    let mut flight = s.pop(t0).unwrap();
    s.move_all(&NODE_ADD, t0); // `skip` says skip
    s.move_all(&ITEM_UPDATE, t0); // `pend` says queue, and it is pending: at once
    flight.item.set_rejectors(["skip"]);
    flight.item.set_pending(["pend"]);
    s.hand_back(flight.item, Some(flight.id), flight.cycle, t0)
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
    let order: Vec<u8> = std::iter::from_fn(|| s.pop(t0).map(|f| *f.item.key())).collect();
    assert_eq!(order, (0..10).collect::<Vec<u8>>());
}

#[test]
fn the_halves_report_what_they_hold() {
    let mut s = new_state(true);
    let t0 = Instant::now();
    assert!(s.is_empty());
    s.add(1, GATED, t0).unwrap();
    s.add(2, 1, t0).unwrap();
    s.add(3, 1, t0).unwrap();
    assert!(!s.is_empty());
    let flight = s.pop(t0).unwrap();
    s.move_all(&ITEM_UPDATE, t0);
    let (_, parked, ready) = s.parts_mut();
    assert_eq!(parked.move_request_cycle(), Some(1));
    assert!(!parked.is_empty() && parked.contains(&1));
    assert_eq!(ready.in_flight_keys(), vec![2]);
    assert!(ready.is_current_flight(&2, flight.id));
    assert!(!ready.is_current_flight(&2, flight.id + 1) && !ready.is_current_flight(&3, 0));
    let shown = format!("{parked:?} {ready:?}");
    assert!(shown.contains("Parked { unschedulable: 1"), "{shown}");
    assert!(
        shown.contains("Ready { active: 1, backoff: 0, in_flight: 1"),
        "{shown}"
    );
    ready.end_flight(&2, flight.id + 1);
    assert!(ready.is_in_flight(&2), "a stale flight id ends nothing");
    ready.end_flight(&2, flight.id);
    assert!(!ready.is_in_flight(&2));
    assert_eq!(parked.remove(&1).map(|item| *item.data()), Some(GATED));
    assert!(parked.is_empty() && parked.remove(&1).is_none());
}

// ===== the steps of the rules and the halves, one at a time =====

#[test]
fn a_rejected_item_waits_for_an_event_then_for_its_backoff() {
    let rules = SchedulingRules::new(SchedulingQueueConfig::default()).hint(
        NODE_ADD,
        "Fit",
        |_item, _event, _payload| Ok(QueueingHint::Queue),
    );
    let mut state = SchedulingState::<&str, i64>::with_rules(rules).unwrap();
    let t0 = Instant::now();

    state.add("pod-a", 10, t0).unwrap();
    let mut flight = state.pop(t0).unwrap();
    flight.item.set_rejectors(["Fit"]); // the attempt failed
    state
        .hand_back(flight.item, Some(flight.id), flight.cycle, t0)
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
    let rules = SchedulingRules::new(SchedulingQueueConfig::default()).hint(
        NODE_ADD,
        "Fit",
        |_item, _event, _payload| Ok(QueueingHint::Queue),
    );
    let mut state = SchedulingState::<&str, i64>::with_rules(rules).unwrap();
    let t0 = Instant::now();
    state.add("pod-a", 10, t0).unwrap();
    let mut flight = state.pop(t0).unwrap();
    flight.item.set_rejectors(["Fit"]);
    state
        .hand_back(flight.item, Some(flight.id), flight.cycle, t0)
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
fn new_halves_are_empty_and_open() {
    let mut state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    let (_rules, parked, _ready) = state.parts_mut();
    assert_eq!((parked.len(), parked.move_request_cycle()), (0, None));

    state.add("a", 1, Instant::now()).unwrap();
    let (_rules, _parked, ready) = state.parts_mut();
    assert_eq!(
        (ready.active_len(), ready.cycle(), ready.is_closed()),
        (1, 0, false)
    );
}

#[test]
fn rules_care_only_for_the_events_of_their_hints_and_gates() {
    let rules = SchedulingRules::<&str, i64>::new(SchedulingQueueConfig::default())
        .hint(NODE_ADD, "Fit", |_item, _event, _payload| {
            Ok(QueueingHint::Queue)
        })
        .gate("Quota", [NODE_ADD], |item| *item.data() < 100);
    assert!(rules.is_of_interest(&NODE_ADD));
    assert!(!rules.is_of_interest(&ClusterEvent::new("Pv", ActionType::ADD)));
}

#[test]
fn an_admitted_item_is_placed_in_active_and_wakes_a_pop() {
    let mut state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    let now = Instant::now();
    let (rules, parked, ready) = state.parts_mut();
    let item = rules.new_item(parked, "a", 1, now);
    let placement = rules.admit(item, now);
    assert!(matches!(placement, Placement::Active(_)));
    assert!(rules.commit(parked, ready, placement, now).pop);
}

#[test]
fn wakes_accumulate() {
    let mut wake = Wake::default();
    wake |= Wake {
        pop: true,
        ..Wake::default()
    };
    assert!(wake.pop && !wake.timer && !wake.flush);
}

#[test]
fn a_flight_carries_its_item_and_cycle() {
    let mut state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    let now = Instant::now();
    state.add("a", 1, now).unwrap();
    let flight = state.pop(now).unwrap();
    assert_eq!((*flight.item.key(), flight.cycle), ("a", 1));
}

#[test]
fn an_item_in_flight_is_taken_back() {
    let mut state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    let now = Instant::now();
    state.add("a", 1, now).unwrap();
    let flight = state.pop(now).unwrap();
    let (rules, parked, ready) = state.parts_mut();
    let claim = rules.claim_return(parked, ready, flight.item, Some(flight.id), false);
    assert!(matches!(claim, Return::Accepted(_)));
}
