//! An exhaustive model of the work queue's wake-up protocol (get, stream, done, shutdown,
//! drain), checked over every interleaving of a few threads: no interleaving may leave a
//! consumer waiting while a key is ready (or the queue is shut down), nor a drain waiting once
//! the queue is idle. This is the protocol the crate's design docs describe, step by step as
//! the code runs it (`wait.rs`, `shared/mod.rs`), over a model of tokio's `Notify` as
//! documented: `notify_one` wakes the first enabled waiter or stores one permit;
//! `notify_waiters` wakes every enabled waiter and every `Notified` created before the call; a
//! `Notified` dropped after `notify_one` woke it passes the wake-up on.
//!
//! The same explorer runs on deliberately broken variants of the protocol and must find the
//! lost wake-up in each: the check can fail.

use std::collections::HashSet;

/// Which protocol the threads follow: the queue's, or one broken in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Protocol {
    /// The queue's protocol.
    Correct,
    /// An add wakes a `get` before the key is queued.
    NotifyBeforePush,
    /// A `Notified` dropped with an unused `notify_one` wake-up does not pass it on.
    DropForgets,
    /// A `done` that queues its dirty key again wakes nobody.
    DoneNoWake,
    /// An add decides whether to wake streams before taking the lock (the queue's add reads
    /// the count of waiting streams after releasing it).
    StreamCheckBeforeLock,
    /// Streams wait like `get`s (one wake-up per key), so a kept stream can hold one.
    StreamLikeGet,
}

/// A model of tokio's `Notify`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Notify {
    /// Enabled waiters, first in first woken (thread indices).
    waiters: Vec<usize>,
    permit: bool,
    /// `notify_waiters` calls so far.
    epoch: u32,
}

/// A model of one `Notified` future.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Notified {
    epoch: u32,
    enabled: bool,
    notified: bool,
    /// Woken by `notify_one` (then a drop passes it on).
    by_one: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Which {
    Get,
    Stream,
    Idle,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Role {
    /// `while let Some(item) = queue.get().await { item.done() }`; with `may_cancel`, may drop
    /// its waiting `get` and stop (a `select!` whose other branch won, and the worker leaves);
    /// with `once`, stops after its first item.
    Getter { may_cancel: bool, once: bool },
    /// The same over `queue.stream()`; may also stop being polled for good (kept, not dropped).
    Streamer { may_stall: bool },
    /// Adds its keys in order.
    Adder { keys: Vec<u8> },
    /// `shut_down`, or `shut_down_with_drain` and its wait.
    ShutDown { drain: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Thread {
    role: Role,
    pc: u8,
    notified: Option<Notified>,
    /// A stream registered as waiting (under the lock).
    registered: bool,
    /// The key a worker holds, or the key an adder is adding.
    key: Option<u8>,
    /// What the step under the lock asked to wake: (one get, the streams, drains).
    wake: (bool, bool, bool),
    finished: bool,
    stalled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    queue: Vec<u8>,
    processing: Vec<u8>,
    dirty: Vec<u8>,
    shut: bool,
    draining: bool,
    streams_waiting: u8,
    get_wake: Notify,
    stream_wake: Notify,
    idle_wake: Notify,
    threads: Vec<Thread>,
}

/// How a thread moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Its next step.
    Run,
    /// Drop the waiting `get` and stop consuming.
    Cancel,
    /// Never poll the waiting stream again (it is kept).
    Stall,
}

// Program counters.
const START: u8 = 0; // create the `Notified`, then look (the fast path)
const ENABLE: u8 = 1;
const RECHECK: u8 = 2;
const WAIT: u8 = 3;
const DONE_LOCKED: u8 = 4;
const DONE_WAKE: u8 = 5;
const ADD_CHECK: u8 = 10;
const ADD_LOCKED: u8 = 11;
const ADD_WAKE: u8 = 12;
const SHUT_LOCKED: u8 = 20;
const SHUT_WAKE: u8 = 21;

impl World {
    fn new(roles: Vec<Role>) -> Self {
        let threads = roles
            .into_iter()
            .map(|role| {
                let pc = match role {
                    Role::Getter { .. } | Role::Streamer { .. } => START,
                    Role::Adder { .. } => ADD_CHECK,
                    Role::ShutDown { .. } => SHUT_LOCKED,
                };
                Thread {
                    role,
                    pc,
                    notified: None,
                    registered: false,
                    key: None,
                    wake: (false, false, false),
                    finished: false,
                    stalled: false,
                }
            })
            .collect();
        World {
            queue: Vec::new(),
            processing: Vec::new(),
            dirty: Vec::new(),
            shut: false,
            draining: false,
            streams_waiting: 0,
            get_wake: Notify::default(),
            stream_wake: Notify::default(),
            idle_wake: Notify::default(),
            threads,
        }
    }

    fn notify(&mut self, which: Which) -> &mut Notify {
        match which {
            Which::Get => &mut self.get_wake,
            Which::Stream => &mut self.stream_wake,
            Which::Idle => &mut self.idle_wake,
        }
    }

    /// The `Notify` thread `t` waits on.
    fn which(&self, t: usize, protocol: Protocol) -> Which {
        match self.threads[t].role {
            Role::Getter { .. } => Which::Get,
            Role::Streamer { .. } if protocol == Protocol::StreamLikeGet => Which::Get,
            Role::Streamer { .. } => Which::Stream,
            _ => Which::Idle,
        }
    }

    fn is_stream(&self, t: usize, protocol: Protocol) -> bool {
        matches!(self.threads[t].role, Role::Streamer { .. }) && protocol != Protocol::StreamLikeGet
    }

    fn notify_one(&mut self, which: Which) {
        let n = self.notify(which);
        if n.waiters.is_empty() {
            n.permit = true;
            return;
        }
        let t = n.waiters.remove(0);
        let nf = self.threads[t]
            .notified
            .as_mut()
            .expect("a waiter has a Notified");
        (nf.notified, nf.by_one) = (true, true);
    }

    fn notify_waiters(&mut self, which: Which) {
        let n = self.notify(which);
        n.epoch += 1;
        let woken: Vec<usize> = n.waiters.drain(..).collect();
        for t in woken {
            let nf = self.threads[t]
                .notified
                .as_mut()
                .expect("a waiter has a Notified");
            (nf.notified, nf.by_one) = (true, false);
        }
    }

    fn new_notified(&mut self, t: usize, which: Which) {
        let epoch = self.notify(which).epoch;
        self.threads[t].notified = Some(Notified {
            epoch,
            enabled: false,
            notified: false,
            by_one: false,
        });
    }

    fn enable(&mut self, t: usize, which: Which) {
        let mut nf = self.threads[t].notified.expect("created first");
        if nf.enabled || nf.notified {
            return;
        }
        nf.enabled = true;
        let n = self.notify(which);
        if n.epoch != nf.epoch {
            nf.notified = true;
        } else if n.permit {
            n.permit = false;
            (nf.notified, nf.by_one) = (true, true);
        } else {
            n.waiters.push(t);
        }
        self.threads[t].notified = Some(nf);
    }

    /// Drops thread `t`'s `Notified`.
    fn drop_notified(&mut self, t: usize, which: Which, protocol: Protocol) {
        let Some(nf) = self.threads[t].notified.take() else {
            return;
        };
        self.notify(which).waiters.retain(|&w| w != t);
        if nf.notified && nf.by_one && protocol != Protocol::DropForgets {
            self.notify_one(which);
        }
    }

    /// `try_take` under the lock: `Some(Some(key))`, `Some(None)` (shut down and empty), or
    /// `None` (wait). A stream is registered exactly while it waits. (The queue registers a
    /// stream just before its look and takes the registration back just after a look that found
    /// something; an add that reads the count in between only wakes streams once more than
    /// needed, which the model leaves out.)
    fn try_take(&mut self, t: usize, protocol: Protocol) -> Option<Option<u8>> {
        let out = if !self.queue.is_empty() {
            let k = self.queue.remove(0);
            self.processing.push(k);
            Some(Some(k))
        } else if self.shut {
            Some(None)
        } else {
            None
        };
        if self.is_stream(t, protocol) {
            let waiting = out.is_none();
            if waiting != self.threads[t].registered {
                self.threads[t].registered = waiting;
                if waiting {
                    self.streams_waiting += 1;
                } else {
                    self.streams_waiting -= 1;
                }
            }
        }
        out
    }

    /// The `get` (or the stream's `next`) of thread `t` completes with `out`.
    fn complete_get(&mut self, t: usize, out: Option<u8>, protocol: Protocol) {
        let which = self.which(t, protocol);
        self.drop_notified(t, which, protocol);
        let th = &mut self.threads[t];
        match out {
            Some(k) => {
                th.key = Some(k);
                th.pc = DONE_LOCKED;
            }
            None => th.finished = true,
        }
    }

    /// A thread that cannot move until it is woken.
    fn blocked(&self, t: usize) -> bool {
        let th = &self.threads[t];
        th.pc == WAIT && !th.notified.is_some_and(|nf| nf.notified)
    }

    /// Every move thread `t` can make now.
    fn moves(&self, t: usize) -> Vec<Move> {
        let th = &self.threads[t];
        if th.finished || th.stalled {
            return Vec::new();
        }
        let mut moves = Vec::new();
        if !self.blocked(t) {
            moves.push(Move::Run);
        }
        if th.pc == WAIT {
            match th.role {
                Role::Getter {
                    may_cancel: true, ..
                } => moves.push(Move::Cancel),
                Role::Streamer { may_stall: true } => moves.push(Move::Stall),
                _ => {}
            }
        }
        moves
    }

    fn step(&mut self, t: usize, how: Move, protocol: Protocol) {
        let which = self.which(t, protocol);
        match how {
            Move::Cancel => {
                self.drop_notified(t, which, protocol);
                self.threads[t].finished = true;
            }
            Move::Stall => self.threads[t].stalled = true,
            Move::Run => self.run(t, which, protocol),
        }
    }

    fn run(&mut self, t: usize, which: Which, protocol: Protocol) {
        match self.threads[t].pc {
            START => {
                self.new_notified(t, which);
                match self.try_take(t, protocol) {
                    Some(out) => self.complete_get(t, out, protocol),
                    None => self.threads[t].pc = ENABLE,
                }
            }
            ENABLE => {
                self.enable(t, which);
                self.threads[t].pc = RECHECK;
            }
            RECHECK if matches!(self.threads[t].role, Role::ShutDown { .. }) => {
                // `wait_drained`'s look, under the lock.
                if self.draining && !(self.queue.is_empty() && self.processing.is_empty()) {
                    self.threads[t].pc = WAIT;
                } else {
                    self.drop_notified(t, which, protocol);
                    self.threads[t].finished = true;
                }
            }
            RECHECK => match self.try_take(t, protocol) {
                Some(out) => self.complete_get(t, out, protocol),
                None => self.threads[t].pc = WAIT,
            },
            WAIT => {
                // Woken: a new `Notified`, enabled, then look again.
                self.new_notified(t, which);
                self.threads[t].pc = ENABLE;
            }
            DONE_LOCKED => self.done_locked(t, protocol),
            DONE_WAKE => {
                self.wake(t, protocol);
                self.threads[t].pc = START;
                if let Role::Getter { once: true, .. } = self.threads[t].role {
                    self.threads[t].finished = true;
                }
            }
            ADD_CHECK => self.add_check(t, protocol),
            ADD_LOCKED => self.add_locked(t, protocol),
            ADD_WAKE => {
                self.wake(t, protocol);
                self.threads[t].pc = if protocol == Protocol::NotifyBeforePush {
                    ADD_LOCKED
                } else {
                    ADD_CHECK
                };
            }
            SHUT_LOCKED => {
                let Role::ShutDown { drain } = self.threads[t].role else {
                    unreachable!("only a shutdown thread shuts down")
                };
                self.shut = true;
                self.draining = drain;
                self.threads[t].pc = SHUT_WAKE;
            }
            SHUT_WAKE => {
                let Role::ShutDown { drain } = self.threads[t].role else {
                    unreachable!("only a shutdown thread shuts down")
                };
                self.notify_waiters(Which::Get);
                self.notify_waiters(Which::Stream);
                if drain {
                    // `wait_drained`: a `Notified`, enabled, then look (the RECHECK step).
                    self.new_notified(t, Which::Idle);
                    self.threads[t].pc = ENABLE;
                } else {
                    self.notify_waiters(Which::Idle);
                    self.threads[t].finished = true;
                }
            }
            pc => unreachable!("pc {pc}"),
        }
    }

    /// `done` under the lock: a dirty key is queued again.
    fn done_locked(&mut self, t: usize, protocol: Protocol) {
        let k = self.threads[t].key.take().expect("a held key");
        self.processing.retain(|&p| p != k);
        let mut wake = (false, false, false);
        if let Some(i) = self.dirty.iter().position(|&d| d == k) {
            self.dirty.remove(i);
            self.queue.push(k);
            wake.0 = protocol != Protocol::DoneNoWake;
            // Whether streams wait is read at the wake, after the lock.
            wake.1 = wake.0;
        }
        wake.2 = self.draining && self.queue.is_empty() && self.processing.is_empty();
        self.threads[t].wake = wake;
        self.threads[t].pc = DONE_WAKE;
    }

    /// The adder's next key; the broken protocols look at the streams or wake here, before
    /// the lock.
    fn add_check(&mut self, t: usize, protocol: Protocol) {
        let streams = self.streams_waiting > 0;
        let th = &mut self.threads[t];
        let Role::Adder { keys } = &mut th.role else {
            unreachable!("only an adder adds")
        };
        if keys.is_empty() {
            th.finished = true;
            return;
        }
        th.key = Some(keys.remove(0));
        match protocol {
            Protocol::StreamCheckBeforeLock => {
                th.wake.1 = streams;
                th.pc = ADD_LOCKED;
            }
            Protocol::NotifyBeforePush => {
                th.wake = (true, streams, false);
                th.pc = ADD_WAKE;
            }
            _ => th.pc = ADD_LOCKED,
        }
    }

    /// `add` under the lock: queued, coalesced, or dirty while processing.
    fn add_locked(&mut self, t: usize, protocol: Protocol) {
        let k = self.threads[t].key.take().expect("a key to add");
        let queued = if self.shut || self.queue.contains(&k) {
            false
        } else if self.processing.contains(&k) {
            if !self.dirty.contains(&k) {
                self.dirty.push(k);
            }
            false
        } else {
            self.queue.push(k);
            true
        };
        match protocol {
            Protocol::NotifyBeforePush => self.threads[t].pc = ADD_CHECK,
            Protocol::StreamCheckBeforeLock => {
                let streams = self.threads[t].wake.1;
                self.threads[t].wake = (queued, queued && streams, false);
                self.threads[t].pc = ADD_WAKE;
            }
            _ => {
                // Whether streams wait is read at the wake, after the lock.
                self.threads[t].wake = (queued, queued, false);
                self.threads[t].pc = ADD_WAKE;
            }
        }
    }

    /// The wake-ups a step under the lock asked for, sent after it. Streams are woken if the
    /// step queued a key and a stream is registered now (read here, after the lock), except in
    /// the protocol that decided it before the lock.
    fn wake(&mut self, t: usize, protocol: Protocol) {
        let (get, streams, idle) = std::mem::take(&mut self.threads[t].wake);
        let streams = match protocol {
            Protocol::StreamCheckBeforeLock => streams,
            _ => streams && self.streams_waiting > 0,
        };
        if get {
            self.notify_one(Which::Get);
        }
        if streams {
            self.notify_waiters(Which::Stream);
        }
        if idle {
            self.notify_waiters(Which::Idle);
        }
    }

    /// At a state where no thread can move: a description of the lost wake-up, if any.
    fn lost_wake_up(&self) -> Option<String> {
        let ready = !self.queue.is_empty() || self.shut;
        let idle = self.queue.is_empty() && self.processing.is_empty();
        self.threads
            .iter()
            .enumerate()
            .filter(|(_, th)| !th.finished && !th.stalled)
            .find(|(_, th)| match th.role {
                Role::ShutDown { .. } => !self.draining || idle,
                _ => ready,
            })
            .map(|(t, _)| format!("thread {t} waits forever: {self:?}"))
    }
}

/// Explores every interleaving from `roles`: the first lost wake-up found, if any, and the
/// number of states seen.
fn explore(roles: Vec<Role>, protocol: Protocol) -> (Option<String>, usize) {
    let mut seen = HashSet::new();
    let mut stack = vec![World::new(roles)];
    while let Some(world) = stack.pop() {
        if !seen.insert(world.clone()) {
            continue;
        }
        let mut moved = false;
        for t in 0..world.threads.len() {
            for how in world.moves(t) {
                let mut next = world.clone();
                next.step(t, how, protocol);
                stack.push(next);
                moved = true;
            }
        }
        if !moved && let Some(lost) = world.lost_wake_up() {
            return (Some(lost), seen.len());
        }
    }
    (None, seen.len())
}

fn getter(may_cancel: bool) -> Role {
    Role::Getter {
        may_cancel,
        once: false,
    }
}

fn one_item_worker() -> Role {
    Role::Getter {
        may_cancel: false,
        once: true,
    }
}

fn streamer(may_stall: bool) -> Role {
    Role::Streamer { may_stall }
}

fn adder(keys: &[u8]) -> Role {
    Role::Adder {
        keys: keys.to_vec(),
    }
}

fn shut_down(drain: bool) -> Role {
    Role::ShutDown { drain }
}

/// The scenarios every protocol runs: consumers of each kind, adds (a key added again while
/// processed), cancelled gets, a stalled stream, shutdowns with and without drain.
fn scenarios() -> Vec<Vec<Role>> {
    vec![
        vec![
            getter(false),
            getter(false),
            adder(&[1, 2]),
            shut_down(false),
        ],
        vec![getter(true), getter(false), adder(&[1])],
        vec![getter(true), getter(true), adder(&[1, 2])],
        vec![getter(false), adder(&[1, 1]), adder(&[1])],
        vec![one_item_worker(), getter(false), adder(&[1, 1])],
        vec![getter(false), adder(&[1, 1]), shut_down(true)],
        vec![getter(false), getter(false), adder(&[1]), shut_down(true)],
        vec![streamer(true), getter(false), adder(&[1, 2])],
        vec![
            streamer(false),
            streamer(false),
            adder(&[1, 2]),
            shut_down(false),
        ],
        vec![streamer(false), adder(&[1, 1, 2])],
    ]
}

#[test]
fn no_interleaving_loses_a_wake_up() {
    for roles in scenarios() {
        let (lost, states) = explore(roles.clone(), Protocol::Correct);
        assert!(lost.is_none(), "{roles:?}: {}", lost.unwrap_or_default());
        assert!(states > 10, "{roles:?}: explored {states} states");
    }
}

#[test]
fn each_broken_protocol_loses_a_wake_up_in_some_interleaving() {
    for protocol in [
        Protocol::NotifyBeforePush,
        Protocol::DropForgets,
        Protocol::DoneNoWake,
        Protocol::StreamCheckBeforeLock,
        Protocol::StreamLikeGet,
    ] {
        let found = scenarios()
            .into_iter()
            .any(|roles| explore(roles, protocol).0.is_some());
        assert!(found, "{protocol:?}: the explorer found no lost wake-up");
    }
}
