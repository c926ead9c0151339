//! Behaviour of `KeyedHeap`, following the scenarios of kube-scheduler's heap tests.

use ctrlq_queue_core::{KeyedHeap, MaxOrder, MinOrder};

fn pop_values<K: std::hash::Hash + Eq>(heap: &mut KeyedHeap<K, i64>) -> Vec<i64> {
    std::iter::from_fn(|| heap.pop().map(|(_, v)| v)).collect()
}

fn heap_of(items: &[(&'static str, i64)]) -> KeyedHeap<&'static str, i64> {
    let mut heap = KeyedHeap::default();
    for &(k, v) in items {
        heap.add(k, v);
    }
    heap
}

#[test]
fn pop_should_return_values_in_order_after_500_descending_adds() {
    let mut heap = KeyedHeap::default();
    for i in (1..=500i64).rev() {
        heap.add(format!("a{i}"), i);
        assert_eq!(
            heap.peek().map(|(_, v)| *v),
            Some(i),
            "peek is the newest, smallest"
        );
    }
    let values = pop_values(&mut heap);
    assert_eq!(values, (1..=500).collect::<Vec<_>>());
}

#[test]
fn peek_should_return_none_on_an_empty_heap() {
    let heap: KeyedHeap<&str, i64> = KeyedHeap::default();
    assert_eq!(heap.peek(), None);
}

#[test]
fn add_should_update_a_present_key_in_place() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("baz", 11), ("zab", 30)]);
    assert_eq!(heap.add("foo", 13), Some(10));
    assert_eq!(heap.pop(), Some(("bar", 1)));
    assert_eq!(heap.pop(), Some(("baz", 11)));
    assert_eq!(heap.delete("baz"), None, "already gone");
    heap.add("foo", 14);
    assert_eq!(heap.pop(), Some(("foo", 14)));
    assert_eq!(heap.pop(), Some(("zab", 30)));
    assert!(heap.is_empty());
}

#[test]
fn add_if_absent_should_ignore_a_present_key() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("baz", 11), ("zab", 30)]);
    assert_eq!(heap.add_if_absent("foo", 13), Err(("foo", 13)));
    assert_eq!(heap.len(), 4);
    assert_eq!(heap.get("foo"), Some(&10));
    assert_eq!(heap.pop(), Some(("bar", 1)));
    assert_eq!(heap.pop(), Some(("foo", 10)));
    assert_eq!(heap.add_if_absent("bar", 14), Ok(()));
    assert_eq!(heap.pop(), Some(("baz", 11)));
    assert_eq!(heap.pop(), Some(("bar", 14)));
}

#[test]
fn delete_should_match_by_key_and_ignore_absent_keys() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("bal", 31), ("baz", 11)]);
    assert_eq!(heap.delete("bar"), Some(("bar", 1)));
    assert_eq!(heap.pop(), Some(("foo", 10)));
    heap.add("zab", 30);
    heap.add("faz", 30);
    let len = heap.len();
    assert_eq!(heap.delete("non-existent"), None);
    assert_eq!(heap.len(), len);
    assert!(heap.delete("bal").is_some());
    assert!(heap.delete("zab").is_some());
    assert_eq!(heap.pop(), Some(("baz", 11)));
    assert_eq!(heap.pop(), Some(("faz", 30)));
    assert_eq!(heap.len(), 0);
}

#[test]
fn update_should_move_an_entry_up_and_down() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("bal", 31), ("baz", 11)]);
    assert!(heap.update("baz", |v| *v = 0));
    assert_eq!(heap.peek(), Some((&"baz", &0)));
    assert_eq!(heap.pop(), Some(("baz", 0)));
    assert!(heap.update("bar", |v| *v = 100));
    assert_eq!(heap.peek(), Some((&"foo", &10)));
    assert!(!heap.update("nope", |_| unreachable!("not called for an absent key")));
}

#[test]
fn get_should_find_present_keys_only() {
    let heap = heap_of(&[("foo", 10), ("bar", 1), ("bal", 31), ("baz", 11)]);
    assert_eq!(heap.get("baz"), Some(&11));
    assert_eq!(heap.get_key_value("baz"), Some((&"baz", &11)));
    assert_eq!(heap.get("non-existing"), None);
}

#[test]
fn get_should_accept_borrowed_keys() {
    let mut heap: KeyedHeap<String, i64> = KeyedHeap::default();
    heap.add("ns/a".to_owned(), 1);
    assert_eq!(heap.get("ns/a"), Some(&1));
    assert!(heap.contains_key("ns/a"));
    assert_eq!(heap.delete("ns/a"), Some(("ns/a".to_owned(), 1)));
}

#[test]
fn iter_should_list_every_entry_once() {
    let empty: KeyedHeap<&str, i64> = KeyedHeap::default();
    assert_eq!(empty.iter().count(), 0);
    let items = [
        ("foo", 10),
        ("bar", 1),
        ("bal", 30),
        ("baz", 11),
        ("faz", 30),
    ];
    let heap = heap_of(&items);
    let mut listed: Vec<_> = heap.iter().map(|(k, v)| (*k, *v)).collect();
    listed.sort();
    let mut expected = items.to_vec();
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!((&heap).into_iter().len(), 5);
}

#[test]
fn contains_key_should_follow_delete_pop_and_update() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1)]);
    assert!(heap.contains_key("foo"));
    assert!(!heap.contains_key("nope"));
    heap.delete("foo");
    assert!(!heap.contains_key("foo"));
    heap.pop();
    assert!(!heap.contains_key("bar"));
    heap.add("baz", 3);
    heap.add("baz", 4);
    assert!(heap.contains_key("baz"));
}

#[test]
fn a_single_entry_should_pop_delete_and_peek() {
    let mut heap = heap_of(&[("a", 42)]);
    assert_eq!(heap.pop(), Some(("a", 42)));
    assert_eq!(heap.len(), 0);
    assert_eq!(heap.pop(), None);
    heap.add("b", 7);
    assert!(heap.delete("b").is_some());
    assert_eq!(heap.len(), 0);
    heap.add("c", 99);
    assert_eq!(heap.peek(), Some((&"c", &99)));
}

#[test]
fn pop_order_should_not_depend_on_insertion_order() {
    for input in [
        vec![1, 2, 3],
        vec![30, 20, 10],
        vec![15, 3, 42, 1, 27],
        vec![5, 5, 5],
    ] {
        let mut heap = KeyedHeap::default();
        for (i, v) in input.iter().enumerate() {
            heap.add(i, *v);
        }
        let mut expected = input.clone();
        expected.sort();
        assert_eq!(pop_values(&mut heap), expected);
    }
}

#[test]
fn delete_in_the_middle_should_keep_the_order() {
    let items = [
        ("foo", 10),
        ("bar", 1),
        ("baz", 20),
        ("bal", 15),
        ("zab", 25),
        ("faz", 5),
    ];
    let mut heap = heap_of(&items);
    heap.delete("foo");
    heap.delete("bal");
    assert_eq!(pop_values(&mut heap), [1, 5, 20, 25]);

    let mut heap = heap_of(&items);
    heap.delete("bar");
    heap.delete("faz");
    heap.delete("bal");
    heap.delete("zab");
    assert_eq!(pop_values(&mut heap), [10, 20]);

    let mut heap = heap_of(&items);
    for k in ["foo", "baz", "bal", "zab", "faz"] {
        heap.delete(k);
    }
    assert_eq!(pop_values(&mut heap), [1]);
}

#[test]
fn update_should_re_prioritise() {
    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("baz", 11)]);
    heap.add("foo", 10);
    assert_eq!(pop_values(&mut heap), [1, 10, 11]);

    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("baz", 11)]);
    heap.add("baz", 0);
    assert_eq!(pop_values(&mut heap), [0, 1, 10]);

    let mut heap = heap_of(&[("foo", 10), ("bar", 1), ("baz", 11)]);
    heap.add("bar", 100);
    assert_eq!(pop_values(&mut heap), [10, 11, 100]);

    let mut heap = heap_of(&[("foo", 1), ("bar", 2), ("baz", 3), ("bal", 4), ("faz", 5)]);
    heap.add("faz", 0);
    heap.add("foo", 100);
    assert_eq!(pop_values(&mut heap), [0, 2, 3, 4, 100]);
}

#[test]
fn len_should_count_distinct_keys() {
    let mut heap = KeyedHeap::default();
    assert_eq!(heap.len(), 0);
    heap.add("a", 1);
    assert_eq!(heap.len(), 1);
    heap.add("b", 2);
    heap.add("c", 3);
    assert_eq!(heap.len(), 3);

    let mut heap = heap_of(&[("a", 1), ("b", 2)]);
    heap.add("a", 5);
    assert_eq!(heap.len(), 2, "re-adding a present key");
    heap.delete("a");
    assert_eq!(heap.len(), 1);
    heap.add("c", 1);
    heap.pop();
    assert_eq!(heap.len(), 1);
}

#[test]
fn keys_should_be_reusable_after_pop_and_delete() {
    let mut heap = heap_of(&[("a", 10), ("b", 15), ("c", 20)]);
    assert_eq!(pop_values(&mut heap), [10, 15, 20]);
    heap.add("a", 5);
    heap.add("b", 3);
    assert_eq!(pop_values(&mut heap), [3, 5]);

    for order in [["a", "b", "c"], ["c", "b", "a"], ["b", "a", "c"]] {
        let mut heap = heap_of(&[("a", 1), ("b", 2), ("c", 3)]);
        for k in order {
            assert!(heap.delete(k).is_some());
        }
        assert_eq!(heap.len(), 0);
        heap.add("new", 5);
        assert_eq!(heap.pop(), Some(("new", 5)));
    }
}

#[test]
fn a_thousand_entries_should_survive_updates_and_deletes() {
    let mut heap = KeyedHeap::default();
    for i in (0..1000i64).rev() {
        heap.add(i, i);
    }
    for i in (0..1000i64).step_by(10) {
        heap.add(i, 1000 + i);
    }
    for i in (5..1000i64).step_by(10) {
        heap.delete(&i);
    }
    let values = pop_values(&mut heap);
    assert_eq!(values.len(), 900);
    assert!(values.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn retain_drain_and_clear_should_empty_or_filter() {
    let mut heap = heap_of(&[("a", 3), ("b", 1), ("c", 2), ("d", 0)]);
    heap.retain(|k, _| *k != "d");
    assert_eq!(heap.len(), 3);
    assert_eq!(heap.peek(), Some((&"b", &1)));
    let mut drained: Vec<_> = heap.drain().collect();
    drained.sort();
    assert_eq!(drained, [("a", 3), ("b", 1), ("c", 2)]);
    assert!(heap.is_empty());
    heap.add("x", 1);
    assert_eq!(heap.get("x"), Some(&1), "usable after drain");
    heap.clear();
    assert!(heap.is_empty() && !heap.contains_key("x"));
}

#[test]
fn min_and_max_orders_and_closures_should_decide_the_order() {
    let mut min = KeyedHeap::new(MinOrder);
    let mut max = KeyedHeap::new(MaxOrder);
    let mut by_len = KeyedHeap::new(|a: &String, b: &String| a.len().cmp(&b.len()));
    for (k, v) in [(1, "ccc"), (2, "a"), (3, "bb")] {
        min.add(k, v);
        max.add(k, v);
        by_len.add(k, v.to_owned());
    }
    assert_eq!(min.pop(), Some((2, "a")));
    assert_eq!(max.pop(), Some((1, "ccc")));
    assert_eq!(by_len.pop().map(|(k, _)| k), Some(2));
}

#[test]
fn debug_should_list_entries() {
    let heap = heap_of(&[("a", 1)]);
    assert_eq!(format!("{heap:?}"), r#"{"a": 1}"#);
}
