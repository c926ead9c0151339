//! Restoring the heap order (invariant 2 of the parent module) after an entry was added,
//! changed or moved: sifts up and down, which rewrite the `positions` of the entries they move.

use std::cmp::Ordering;
use std::hash::Hash;

use super::{ARITY, Entry, KeyedHeap, MAX_DEPTH};
use crate::compare::Compare;

impl<K, V, C> KeyedHeap<K, V, C>
where
    K: Hash + Eq,
    C: Compare<V>,
{
    /// Records that the entry now at `pos` sits there.
    pub(super) fn place(&mut self, pos: usize) {
        self.positions[self.entries[pos].id] = pos;
    }

    /// Moves the entry at `pos` up or down until the heap order holds again.
    pub(super) fn restore(&mut self, pos: usize) {
        if !self.sift_up(pos) {
            self.sift_down(pos);
        }
    }

    /// Moves the entry at `pos` towards the root while it pops before its parent. Returns whether
    /// it moved.
    pub(super) fn sift_up(&mut self, start: usize) -> bool {
        let mut pos = start;
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if self.order(start, parent) != Ordering::Less {
                break;
            }
            pos = parent;
        }
        if pos == start {
            return false;
        }
        self.move_chain(start, pos);
        true
    }

    /// Moves the entry at `pos` towards the leaves while a child pops before it.
    ///
    /// The target is found first and the entries are moved after, so a comparison that panics
    /// (the debug check of the ordering) leaves the index intact.
    pub(super) fn sift_down(&mut self, start: usize) {
        // Bottom-up ("Floyd"): walk the path of first-popping children to a leaf, then climb
        // back to the deepest path entry that pops before the moving one. A moved-down entry
        // (usually the former last) belongs near the leaves, so this skips comparing it at
        // every level.
        let mut path = [0usize; MAX_DEPTH];
        let mut depth = 0;
        let mut node = start;
        loop {
            let first = ARITY * node + 1;
            let end = (first + ARITY).min(self.entries.len());
            let Some(children) = self.entries.get(first..end).filter(|c| !c.is_empty()) else {
                break;
            };
            let mut best = 0;
            for (i, child) in children.iter().enumerate().skip(1) {
                if self.less(child, &children[best]) {
                    best = i;
                }
            }
            node = first + best;
            path[depth] = node;
            depth += 1;
        }
        while depth > 0 && self.order(path[depth - 1], start) != Ordering::Less {
            depth -= 1;
        }
        if depth == 0 {
            return;
        }
        let mut pos = start;
        for &child in &path[..depth] {
            self.entries.swap(pos, child);
            self.place(pos);
            pos = child;
        }
        self.place(pos);
    }

    /// Moves the entry at `start` up to `end` (an ancestor), shifting the path down one level.
    fn move_chain(&mut self, start: usize, end: usize) {
        let mut pos = start;
        while pos != end {
            let parent = (pos - 1) / ARITY;
            self.entries.swap(pos, parent);
            self.place(pos);
            pos = parent;
        }
        self.place(pos);
    }

    pub(super) fn order(&self, a: usize, b: usize) -> Ordering {
        self.compare(&self.entries[a], &self.entries[b])
    }

    fn less(&self, a: &Entry<K, V>, b: &Entry<K, V>) -> bool {
        self.compare(a, b) == Ordering::Less
    }

    fn compare(&self, a: &Entry<K, V>, b: &Entry<K, V>) -> Ordering {
        let (va, vb) = (&a.value, &b.value);
        let ord = self.cmp.compare(va, vb);
        debug_assert!(
            ord == self.cmp.compare(vb, va).reverse(),
            "the comparison is not antisymmetric: a strict weak order is required"
        );
        ord
    }
}
