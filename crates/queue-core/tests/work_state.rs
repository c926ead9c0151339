//! Behaviour of `WorkState`, following the scenarios of client-go's queue tests.

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, WorkState};

fn item<K>(outcome: PopOutcome<K>) -> K {
    match outcome {
        PopOutcome::Item(k) => k,
        other => panic!("expected an item, got {}", describe(&other)),
    }
}

fn describe<K>(outcome: &PopOutcome<K>) -> &'static str {
    match outcome {
        PopOutcome::Item(_) => "an item",
        PopOutcome::Empty => "empty",
        PopOutcome::ShutDown => "shut down",
    }
}

#[test]
fn pop_should_hand_out_keys_in_the_order_first_added() {
    let mut state = WorkState::new();
    for k in ["a", "b", "c"] {
        assert_eq!(state.add(k), AddOutcome::Queued);
    }
    assert_eq!(
        state.add("a"),
        AddOutcome::Coalesced,
        "a keeps its first place"
    );
    assert_eq!(item(state.pop()), "a");
    assert_eq!(item(state.pop()), "b");
    assert_eq!(item(state.pop()), "c");
    assert_eq!(state.pop(), PopOutcome::Empty);
}

#[test]
fn add_while_processing_should_defer_until_done() {
    let mut state = WorkState::new();
    state.add("foo");
    assert_eq!(item(state.pop()), "foo");
    assert_eq!(state.add("foo"), AddOutcome::Deferred { newly_dirty: true });
    assert_eq!(state.add("foo"), AddOutcome::Coalesced);
    assert_eq!(state.len(), 0, "not queued while processing");
    assert_eq!(
        state.pop(),
        PopOutcome::Empty,
        "never handed out twice at once"
    );
    assert_eq!(state.done("foo"), DoneOutcome::Requeued(()));
    assert_eq!(state.len(), 1);
    assert_eq!(item(state.pop()), "foo");
    assert_eq!(state.done("foo"), DoneOutcome::Finished);
    assert!(state.is_idle());
}

#[test]
fn len_should_count_queued_keys_only() {
    let mut state = WorkState::new();
    assert!(state.is_empty());
    state.add("foo");
    assert_eq!(state.len(), 1);
    assert!(!state.is_empty());
    state.add("bar");
    assert_eq!(state.len(), 2);
    state.add("foo");
    assert_eq!(state.len(), 2, "a duplicate adds nothing");
    state.pop();
    assert_eq!(state.len(), 1);
    assert_eq!(state.processing_len(), 1);
    state.pop();
    assert!(state.is_empty(), "no key queued, two processing");
}

#[test]
fn reinsert_after_done_should_queue_again() {
    let mut state = WorkState::new();
    state.add("foo");
    let k = item(state.pop());
    assert_eq!(state.done(k), DoneOutcome::Finished);
    assert_eq!(state.add(k), AddOutcome::Queued);
    assert_eq!(item(state.pop()), "foo");
    assert_eq!(state.len(), 0);
}

#[test]
fn collapse_should_keep_one_copy() {
    let mut state = WorkState::new();
    state.add("bar");
    state.add("bar");
    assert_eq!(state.len(), 1);
    assert_eq!(item(state.pop()), "bar");
    assert_eq!(state.pop(), PopOutcome::Empty);
}

#[test]
fn collapse_while_processing_should_requeue_once() {
    let mut state = WorkState::new();
    state.add("bar");
    assert_eq!(item(state.pop()), "bar");
    state.add("bar");
    state.add("bar");
    assert_eq!(state.len(), 0);
    assert_eq!(state.done("bar"), DoneOutcome::Requeued(()));
    assert_eq!(state.len(), 1);
    assert_eq!(item(state.pop()), "bar");
    assert_eq!(state.done("bar"), DoneOutcome::Finished);
    assert_eq!(state.pop(), PopOutcome::Empty);
}

#[test]
fn done_of_a_key_not_processing_should_be_ignored() {
    let mut state = WorkState::new();
    assert_eq!(state.done("ghost"), DoneOutcome::NotProcessing);
    state.add("a");
    assert_eq!(
        state.done("a"),
        DoneOutcome::NotProcessing,
        "queued, not processing"
    );
    assert_eq!(
        state.len(),
        1,
        "no second queue entry (kubernetes/kubernetes#141079)"
    );
    assert_eq!(item(state.pop()), "a");
    assert_eq!(state.done("a"), DoneOutcome::Finished);
    assert_eq!(state.done("a"), DoneOutcome::NotProcessing);
    assert!(state.is_idle());
}

#[test]
fn shut_down_should_refuse_adds_and_still_hand_out_queued_keys() {
    let mut state = WorkState::new();
    state.add("a");
    state.add("b");
    assert!(!state.is_shut_down());
    assert!(state.shut_down());
    assert!(state.is_shut_down());
    assert!(
        !state.shut_down(),
        "a second call reports it was already shut down"
    );
    assert_eq!(state.add("c"), AddOutcome::ShutDown("c"));
    assert_eq!(item(state.pop()), "a");
    assert_eq!(item(state.pop()), "b");
    assert_eq!(state.pop(), PopOutcome::ShutDown);
}

#[test]
fn done_after_shut_down_should_requeue_a_key_added_before() {
    let mut state = WorkState::new();
    state.add("a");
    assert_eq!(item(state.pop()), "a");
    assert_eq!(state.add("a"), AddOutcome::Deferred { newly_dirty: true });
    state.shut_down();
    assert_eq!(state.add("a"), AddOutcome::ShutDown("a"));
    assert_eq!(
        state.done("a"),
        DoneOutcome::Requeued(()),
        "accepted before the shutdown"
    );
    assert_eq!(item(state.pop()), "a");
    assert_eq!(state.done("a"), DoneOutcome::Finished);
    assert_eq!(state.pop(), PopOutcome::ShutDown);
    assert!(state.is_idle());
}

#[test]
fn is_idle_should_wait_for_queued_and_processing_keys() {
    let mut state = WorkState::new();
    assert!(state.is_idle());
    state.add(1);
    state.add(2);
    assert!(!state.is_idle());
    let a = item(state.pop());
    let b = item(state.pop());
    assert!(!state.is_idle(), "two keys in flight");
    state.done(&a);
    assert!(!state.is_idle());
    state.done(&b);
    assert!(state.is_idle());
}

#[test]
fn queries_should_accept_borrowed_keys() {
    let mut state: WorkState<String> = WorkState::new();
    state.add("ns/a".to_owned());
    assert!(state.is_queued("ns/a"));
    assert!(!state.is_processing("ns/a"));
    let _ = state.pop();
    assert!(state.is_processing("ns/a"));
    assert_eq!(state.done("ns/a"), DoneOutcome::Finished);
}

#[test]
fn debug_should_show_counts_not_keys() {
    let mut state = WorkState::new();
    state.add("secret");
    assert_eq!(
        format!("{state:?}"),
        "WorkState { queued: 1, processing: 0, shut_down: false }"
    );
}
