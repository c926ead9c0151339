//! An exhaustive model of how a sharded work queue hands keys out (`shared/handout.rs`): the
//! hand-out order (a lock over the shard of every queued key, in queue order) and the shards'
//! locks, over every interleaving of two adders and two getters, step by step as the code
//! takes and releases its locks. In every interleaving: no thread waits forever on a lock (no
//! deadlock), the keys leave the queue in the order they were queued (first in, first out), and
//! no getter receives a key queued before one it already received.
//!
//! The same explorer runs on two broken variants and must find the fault in each: a getter that
//! releases the order's lock before taking its shard's (a later getter can take the earlier
//! key of that shard), and one that waits for its shard's lock while holding the order's (an
//! adder holding that shard and waiting for the order deadlocks with it).

use std::collections::{HashSet, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Protocol {
    /// The queue's: the entry and its shard's key are taken under the shard's lock together;
    /// the shard's lock is only tried under the order's, else taken first and the order's after.
    Correct,
    /// The entry is taken and the order's lock released before the shard's lock is taken.
    EntryThenShard,
    /// The getter waits for the shard's lock while it holds the order's.
    BlockUnderOrder,
}

/// Who holds a lock.
type Holder = Option<usize>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    order: VecDeque<usize>,
    order_lock: Holder,
    shards: [VecDeque<u8>; 2],
    shard_locks: [Holder; 2],
    threads: Vec<Thread>,
    /// Keys in the order their entries were pushed to the order (an add's completion).
    queued: Vec<u8>,
    /// The keys the entries taken stand for, in the order the entries were taken (a get's
    /// moment): the k-th entry of a shard stands for the k-th key queued in it.
    taken: Vec<u8>,
    /// Per shard: entries taken whose key is not popped yet.
    pending: [usize; 2],
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Thread {
    /// An adder's keys still to add; empty for a getter.
    keys: Vec<u8>,
    getter: bool,
    /// A getter's gets still to make.
    gets: u8,
    pc: Pc,
    /// The shard the thread works on.
    shard: usize,
    /// What a getter received, in order.
    got: Vec<u8>,
    /// The key the entry a getter took stands for.
    expect: Option<u8>,
    /// A getter received a key other than its entry's.
    mismatch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pc {
    /// Adder: take the key's shard's lock, push the key.
    AddShard,
    /// Adder: take the order's lock (under the shard's), push the entry, release both.
    AddOrder,
    /// Getter: take the order's lock, look at the first entry.
    GetOrder,
    /// Getter (holding the order's lock): try the entry's shard's lock.
    GetTry,
    /// Getter: wait for the shard's lock (the order's released).
    GetShard,
    /// Getter (holding the shard's lock): take the order's lock, check the entry again.
    GetRecheck,
    /// Getter (holding the shard's lock, entry taken): pop the shard, release it.
    GetPop,
    Finished,
}

/// A key's shard: keys 0 and 2 share shard 0, key 1 is in shard 1.
fn shard_of(key: u8) -> usize {
    usize::from(key % 2)
}

impl World {
    fn new() -> Self {
        let adder = |keys: Vec<u8>| Thread {
            keys,
            getter: false,
            gets: 0,
            pc: Pc::AddShard,
            shard: 0,
            got: Vec::new(),
            expect: None,
            mismatch: false,
        };
        let getter = || Thread {
            keys: Vec::new(),
            getter: true,
            gets: 2,
            pc: Pc::GetOrder,
            shard: 0,
            got: Vec::new(),
            expect: None,
            mismatch: false,
        };
        World {
            order: VecDeque::new(),
            order_lock: None,
            shards: [VecDeque::new(), VecDeque::new()],
            shard_locks: [None, None],
            threads: vec![adder(vec![0, 1]), adder(vec![2]), getter(), getter()],
            queued: Vec::new(),
            taken: Vec::new(),
            pending: [0, 0],
        }
    }

    /// Takes the first entry of the order (the caller holds the order's lock) for getter `t`.
    fn take_entry(&mut self, t: usize) {
        let shard = self.order.pop_front().expect("an entry to take");
        let key = self.shards[shard][self.pending[shard]];
        self.pending[shard] += 1;
        self.taken.push(key);
        self.threads[t].expect = Some(key);
    }

    /// Whether thread `t` can take its next step now (a lock it waits for is free).
    fn can_move(&self, t: usize, protocol: Protocol) -> bool {
        let th = &self.threads[t];
        match th.pc {
            Pc::Finished => false,
            Pc::AddShard => self.shard_locks[shard_of(th.keys[0])].is_none(),
            Pc::AddOrder | Pc::GetOrder | Pc::GetRecheck => self.order_lock.is_none(),
            Pc::GetTry => {
                protocol != Protocol::BlockUnderOrder || self.shard_locks[th.shard].is_none()
            }
            Pc::GetShard => self.shard_locks[th.shard].is_none(),
            Pc::GetPop => match protocol {
                Protocol::EntryThenShard => self.shard_locks[th.shard].is_none(),
                _ => true,
            },
        }
    }

    fn step(&mut self, t: usize, protocol: Protocol) {
        let pc = self.threads[t].pc;
        match pc {
            Pc::AddShard => {
                let key = self.threads[t].keys[0];
                let shard = shard_of(key);
                self.shard_locks[shard] = Some(t);
                self.shards[shard].push_back(key);
                self.threads[t].shard = shard;
                self.threads[t].pc = Pc::AddOrder;
            }
            Pc::AddOrder => {
                let th = &mut self.threads[t];
                self.order.push_back(th.shard);
                self.queued.push(th.keys[0]);
                self.shard_locks[th.shard] = None;
                th.keys.remove(0);
                th.pc = if th.keys.is_empty() {
                    Pc::Finished
                } else {
                    Pc::AddShard
                };
            }
            Pc::GetOrder => match self.order.front() {
                // Nothing queued yet: this get would wait; the model lets it look again later.
                None => {}
                Some(&shard) => {
                    self.order_lock = Some(t);
                    self.threads[t].shard = shard;
                    self.threads[t].pc = if protocol == Protocol::EntryThenShard {
                        self.take_entry(t);
                        self.order_lock = None;
                        Pc::GetPop
                    } else {
                        Pc::GetTry
                    };
                }
            },
            Pc::GetTry => {
                let shard = self.threads[t].shard;
                if self.shard_locks[shard].is_none() {
                    self.shard_locks[shard] = Some(t);
                    self.take_entry(t);
                    self.order_lock = None;
                    self.threads[t].pc = Pc::GetPop;
                } else {
                    self.order_lock = None;
                    self.threads[t].pc = Pc::GetShard;
                }
            }
            Pc::GetShard => {
                self.shard_locks[self.threads[t].shard] = Some(t);
                self.threads[t].pc = Pc::GetRecheck;
            }
            Pc::GetRecheck => {
                let shard = self.threads[t].shard;
                if self.order.front() == Some(&shard) {
                    self.take_entry(t);
                    self.order_lock = None;
                    self.threads[t].pc = Pc::GetPop;
                } else {
                    self.order_lock = None;
                    self.shard_locks[shard] = None;
                    self.threads[t].pc = Pc::GetOrder;
                }
            }
            Pc::GetPop => {
                let shard = self.threads[t].shard;
                if protocol == Protocol::EntryThenShard {
                    self.shard_locks[shard] = Some(t);
                }
                let key = self.shards[shard]
                    .pop_front()
                    .expect("an order entry stands for a key of its shard");
                self.pending[shard] -= 1;
                self.shard_locks[shard] = None;
                let th = &mut self.threads[t];
                th.mismatch |= th.expect.take() != Some(key);
                th.got.push(key);
                th.gets -= 1;
                th.pc = if th.gets == 0 {
                    Pc::Finished
                } else {
                    Pc::GetOrder
                };
            }
            Pc::Finished => unreachable!("a finished thread does not move"),
        }
    }

    /// A fault of this state, if any: entries taken out of queue order, a getter that received
    /// a key other than its entry's, or one that received a key queued before one it already
    /// had.
    fn fault(&self) -> Option<String> {
        if self.taken[..] != self.queued[..self.taken.len()] {
            return Some(format!("taken {:?}, queued {:?}", self.taken, self.queued));
        }
        if let Some(th) = self.threads.iter().find(|th| th.mismatch) {
            return Some(format!(
                "a getter received another entry's key: {:?}",
                th.got
            ));
        }
        let position = |k: &u8| self.queued.iter().position(|q| q == k);
        for th in self.threads.iter().filter(|th| th.getter) {
            if th.got.windows(2).any(|w| position(&w[0]) > position(&w[1])) {
                return Some(format!("a getter received {:?}", th.got));
            }
        }
        None
    }
}

/// Explores every interleaving from the start; returns the first fault or deadlock found.
fn explore(protocol: Protocol) -> Option<String> {
    let mut seen = HashSet::new();
    let mut stack = vec![World::new()];
    while let Some(world) = stack.pop() {
        if !seen.insert(world.clone()) {
            continue;
        }
        if let Some(fault) = world.fault() {
            return Some(fault);
        }
        let movable: Vec<usize> = (0..world.threads.len())
            .filter(|&t| world.can_move(t, protocol))
            .collect();
        let unfinished = world.threads.iter().any(|th| th.pc != Pc::Finished);
        if movable.is_empty() && unfinished {
            return Some(format!("deadlock: {:?}", world.threads));
        }
        for t in movable {
            let mut next = world.clone();
            next.step(t, protocol);
            if next != world {
                stack.push(next);
            }
        }
    }
    None
}

#[test]
fn every_interleaving_hands_keys_out_in_order_without_deadlock() {
    assert_eq!(explore(Protocol::Correct), None);
}

#[test]
fn each_broken_hand_out_is_caught() {
    let fifo = explore(Protocol::EntryThenShard);
    assert!(
        fifo.is_some_and(|f| !f.starts_with("deadlock")),
        "EntryThenShard"
    );
    let deadlock = explore(Protocol::BlockUnderOrder);
    assert!(
        deadlock.is_some_and(|f| f.starts_with("deadlock")),
        "BlockUnderOrder"
    );
}
