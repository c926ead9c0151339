//! Property tests of both structures against naive models, checking the private invariants
//! after every step. Seeded, 10,000 cases per model; failures are persisted under
//! `proptest-regressions/` and replayed first.

use std::collections::{BTreeMap, HashSet, VecDeque};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

use crate::{AddOutcome, DoneOutcome, KeyedHeap, PopOutcome, WorkState};

fn config(file: &'static str) -> Config {
    Config {
        cases: 10_000,
        rng_seed: RngSeed::Fixed(0x5eed_c0de),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..Config::default()
    }
}

#[derive(Debug, Clone)]
enum HeapOp {
    Add(u8, u8),
    AddIfAbsent(u8, u8),
    Update(u8, u8),
    Delete(u8),
    Pop,
    Retain(u8),
}

fn heap_op() -> impl Strategy<Value = HeapOp> {
    // Few keys and values, so replacements, misses and ties are common.
    let (k, v) = (0u8..24, 0u8..16);
    prop_oneof![
        4 => (k.clone(), v.clone()).prop_map(|(k, v)| HeapOp::Add(k, v)),
        1 => (k.clone(), v.clone()).prop_map(|(k, v)| HeapOp::AddIfAbsent(k, v)),
        2 => (k.clone(), v).prop_map(|(k, v)| HeapOp::Update(k, v)),
        2 => k.prop_map(HeapOp::Delete),
        3 => Just(HeapOp::Pop),
        1 => (2u8..5).prop_map(HeapOp::Retain),
    ]
}

proptest! {
    #![proptest_config(config("proptest-regressions/keyed_heap.txt"))]

    #[test]
    fn keyed_heap_matches_a_sorted_map(ops in prop::collection::vec(heap_op(), 1..60)) {
        let mut heap = KeyedHeap::default();
        let mut model: BTreeMap<u8, u8> = BTreeMap::new();
        for op in ops {
            match op {
                HeapOp::Add(k, v) => prop_assert_eq!(heap.add(k, v), model.insert(k, v)),
                HeapOp::AddIfAbsent(k, v) => {
                    let present = model.contains_key(&k);
                    prop_assert_eq!(heap.add_if_absent(k, v).is_err(), present);
                    model.entry(k).or_insert(v);
                }
                HeapOp::Update(k, v) => {
                    let present = model.get_mut(&k).map(|m| *m = v).is_some();
                    prop_assert_eq!(heap.update(&k, |x| *x = v), present);
                }
                HeapOp::Delete(k) => {
                    prop_assert_eq!(heap.delete(&k), model.remove(&k).map(|v| (k, v)));
                }
                HeapOp::Pop => match heap.pop() {
                    Some((k, v)) => {
                        // Ties pop in any order: the value must be the smallest, and the key's.
                        prop_assert_eq!(Some(&v), model.values().min());
                        prop_assert_eq!(model.remove(&k), Some(v));
                    }
                    None => prop_assert!(model.is_empty()),
                },
                HeapOp::Retain(m) => {
                    heap.retain(|k, _| k % m != 0);
                    model.retain(|k, _| k % m != 0);
                }
            }
            heap.check_invariants();
            prop_assert_eq!(heap.len(), model.len());
            prop_assert_eq!(heap.peek().map(|(_, v)| v), model.values().min());
            for (k, v) in &model {
                prop_assert_eq!(heap.get(k), Some(v));
            }
        }
    }
}

#[derive(Debug, Clone)]
enum WorkOp {
    Add(u8),
    Pop,
    Done(u8),
    ShutDown,
}

fn work_op() -> impl Strategy<Value = WorkOp> {
    prop_oneof![
        4 => (0u8..12).prop_map(WorkOp::Add),
        4 => Just(WorkOp::Pop),
        4 => (0u8..12).prop_map(WorkOp::Done),
        1 => Just(WorkOp::ShutDown),
    ]
}

/// client-go's queue, literally: a FIFO, a dirty set and a processing set.
struct GoModel {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: HashSet<u8>,
    shutting_down: bool,
}

impl GoModel {
    fn new() -> Self {
        GoModel {
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            shutting_down: false,
        }
    }

    fn add(&mut self, k: u8) -> AddOutcome<u8> {
        if self.shutting_down {
            return AddOutcome::ShutDown(k);
        }
        if self.dirty.contains(&k) {
            return AddOutcome::Coalesced;
        }
        self.dirty.insert(k);
        if self.processing.contains(&k) {
            return AddOutcome::Deferred { newly_dirty: true };
        }
        self.queue.push_back(k);
        AddOutcome::Queued
    }

    fn pop(&mut self) -> PopOutcome<u8> {
        match self.queue.pop_front() {
            Some(k) => {
                self.processing.insert(k);
                self.dirty.remove(&k);
                PopOutcome::Item(k)
            }
            None if self.shutting_down => PopOutcome::ShutDown,
            None => PopOutcome::Empty,
        }
    }

    /// Go's `Done`, with the fix: a key not being processed is ignored.
    fn done(&mut self, k: u8) -> DoneOutcome {
        if !self.processing.remove(&k) {
            return DoneOutcome::NotProcessing;
        }
        if self.dirty.contains(&k) {
            self.queue.push_back(k);
            DoneOutcome::Requeued(())
        } else {
            DoneOutcome::Finished
        }
    }
}

/// Runs `ops` on `state` and `model`, comparing every outcome and, after each step, the
/// state's invariants and what it holds.
fn run_work(
    mut state: WorkState<u8>,
    mut model: GoModel,
    ops: Vec<WorkOp>,
) -> Result<(), TestCaseError> {
    for op in ops {
        match op {
            WorkOp::Add(k) => prop_assert_eq!(state.add(k), model.add(k)),
            WorkOp::Pop => prop_assert_eq!(state.pop(), model.pop()),
            WorkOp::Done(k) => prop_assert_eq!(state.done(&k), model.done(k)),
            WorkOp::ShutDown => {
                prop_assert_eq!(state.shut_down(), !model.shutting_down);
                model.shutting_down = true;
            }
        }
        state.check_invariants();
        prop_assert_eq!(state.len(), model.queue.len());
        prop_assert_eq!(state.processing_len(), model.processing.len());
        prop_assert_eq!(
            state.is_idle(),
            model.queue.is_empty() && model.processing.is_empty()
        );
        for k in 0..12u8 {
            prop_assert_eq!(state.is_queued(&k), model.queue.contains(&k));
            prop_assert_eq!(state.is_processing(&k), model.processing.contains(&k));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config("proptest-regressions/work_state.txt"))]

    #[test]
    fn work_state_matches_client_go(ops in prop::collection::vec(work_op(), 1..80)) {
        run_work(WorkState::new(), GoModel::new(), ops)?;
    }
}
