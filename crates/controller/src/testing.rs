//! A harness to test a controller under paused time (feature `test-util`): a scripted source of
//! objects, replicas on the in-memory lock with fault injection, and a log of what happened.
//!
//! - [`ScriptedSource`]: an in-memory stand-in for an API server's objects. Each subscription
//!   lists every current key, then follows changes, as a watch does; a reconcile reads
//!   [`generation`](ScriptedSource::generation) to know what it is reconciling to.
//! - [`Harness`]: spawns replicas of a user's [`Controller`] sharing one [`MemoryStore`], each
//!   with its own elector; kills, partitions and stops them; records every reconcile start and
//!   end, term and drain in an [`Observations`] log, and counts the moments at which two
//!   replicas (or two reconciles of one key) were in reconcile at once.
//!
//! # Examples
//!
//! A test a user can copy: three replicas, the leader partitioned, no overlap, every object
//! reconciled to its last generation.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use ctrlq_controller::testing::{Harness, ScriptedSource};
//! use ctrlq_controller::{Action, Context, Controller};
//! use ctrlq_leader::LeaderElectionConfig;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let api = ScriptedSource::new();
//! for i in 0..20 {
//!     api.apply(i);
//! }
//! // What each object was last reconciled to, across replicas.
//! let seen = Arc::new(Mutex::new(HashMap::new()));
//! let build = |api: ScriptedSource<u32>, seen: Arc<Mutex<HashMap<u32, u64>>>| {
//!     let source = api.clone();
//!     Controller::new("objects", move |key: u32, _ctx: Context| {
//!         let (api, seen) = (api.clone(), seen.clone());
//!         async move {
//!             let generation = api.generation(&key);
//!             tokio::time::sleep(Duration::from_millis(50)).await;
//!             if let Some(g) = generation {
//!                 seen.lock().unwrap().insert(key, g);
//!             }
//!             Ok::<_, std::convert::Infallible>(Action::Done)
//!         }
//!     })
//!     .source(move || source.subscribe())
//!     .workers(2)
//! };
//! let config = LeaderElectionConfig::default().release_on_cancel(true);
//! let mut harness = Harness::new(config);
//! for id in ["a", "b", "c"] {
//!     harness.spawn(id, build(api.clone(), seen.clone()));
//! }
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! let leader = harness.leader().unwrap();
//! harness.partition(&leader, true);
//! for i in 0..20 {
//!     api.apply(i);
//! }
//! tokio::time::sleep(Duration::from_secs(30)).await;
//! harness.stop_all().await;
//!
//! let log = harness.observations();
//! assert_eq!(log.overlaps(), 0, "two replicas never reconcile at once");
//! assert!(log.failovers().len() >= 1);
//! let seen = seen.lock().unwrap();
//! assert!((0..20).all(|i| seen.get(&i) == api.generation(&i).as_ref()));
//! # }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryLock, MemoryStore};
use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::shard::{ShardKey, Sharding};
use crate::{Controller, Event, Key, ReconcileOutcome, Summary};

/// An in-memory set of objects, each a key with a generation, that controllers subscribe to.
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use ctrlq_controller::testing::ScriptedSource;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let api = ScriptedSource::new();
/// api.apply("a");
/// let mut watch = api.subscribe();
/// api.apply("b");
/// api.delete(&"a");
/// assert_eq!(watch.next().await, Some("a")); // the initial list
/// assert_eq!(watch.next().await, Some("b"));
/// assert_eq!(watch.next().await, Some("a")); // its deletion
/// assert_eq!(api.generation(&"a"), None);
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedSource<K> {
    inner: Arc<Mutex<Objects<K>>>,
}

#[derive(Debug)]
struct Objects<K> {
    generations: HashMap<K, u64>,
    next: u64,
    watchers: Vec<mpsc::UnboundedSender<K>>,
    subscriptions: usize,
}

impl<K: Key> ScriptedSource<K> {
    /// No objects.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Objects {
                generations: HashMap::new(),
                next: 1,
                watchers: Vec::new(),
                subscriptions: 0,
            })),
        }
    }

    /// Creates or changes `key`: its generation becomes greater than every generation before.
    /// Returns it.
    pub fn apply(&self, key: K) -> u64 {
        let mut o = self.lock();
        let g = o.next;
        o.next += 1;
        o.generations.insert(key.clone(), g);
        o.notify(&key);
        g
    }

    /// Deletes `key`; watchers see its key once more.
    pub fn delete(&self, key: &K) {
        let mut o = self.lock();
        if o.generations.remove(key).is_some() {
            o.notify(key);
        }
    }

    /// The current generation of `key`, `None` if it does not exist.
    #[must_use]
    pub fn generation(&self, key: &K) -> Option<u64> {
        self.lock().generations.get(key).copied()
    }

    /// Every object with its generation.
    #[must_use]
    pub fn objects(&self) -> HashMap<K, u64> {
        self.lock().generations.clone()
    }

    /// A watch: every current key (in no particular order), then each changed key as it
    /// changes. Give `move || source.subscribe()` to [`Controller::source`].
    pub fn subscribe(&self) -> BoxStream<'static, K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut o = self.lock();
        for k in o.generations.keys() {
            let _ = tx.send(k.clone());
        }
        o.watchers.push(tx);
        o.subscriptions += 1;
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) })
            .boxed()
    }

    /// How many times [`subscribe`](Self::subscribe) was called (on this source or a clone):
    /// each is a full listing, as a watch's initial list is.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::testing::ScriptedSource;
    /// let api = ScriptedSource::<u32>::new();
    /// let _watch = api.clone().subscribe();
    /// assert_eq!(api.subscriptions(), 1);
    /// ```
    #[must_use]
    pub fn subscriptions(&self) -> usize {
        self.lock().subscriptions
    }

    fn lock(&self) -> MutexGuard<'_, Objects<K>> {
        self.inner.lock()
    }
}

impl<K> Objects<K> {
    fn notify(&mut self, key: &K)
    where
        K: Clone,
    {
        self.watchers.retain(|w| w.send(key.clone()).is_ok());
    }
}

impl<K> Clone for ScriptedSource<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Key> Default for ScriptedSource<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// One recorded transition, with the replica and the paused-clock time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record<K> {
    /// A term began.
    Leading {
        /// The replica.
        replica: String,
        /// The term's fencing token.
        fencing_token: Option<u64>,
        /// When.
        at: Instant,
    },
    /// A term's queue was filled from the warm view ([`Event::WarmStart`]).
    WarmStart {
        /// The replica.
        replica: String,
        /// The shard whose term it is; `None` without sharding.
        shard: Option<u32>,
        /// The keys the queue was filled with.
        keys: usize,
        /// When.
        at: Instant,
    },
    /// A term's first reconcile is about to start ([`Event::FirstReconcile`]).
    FirstReconcile {
        /// The replica.
        replica: String,
        /// The shard whose term it is; `None` without sharding.
        shard: Option<u32>,
        /// The time since the term began.
        after: Duration,
        /// When.
        at: Instant,
    },
    /// A reconcile started.
    Started {
        /// The replica.
        replica: String,
        /// The key.
        key: K,
        /// When.
        at: Instant,
    },
    /// A reconcile ended (returned, panicked, or was dropped).
    Finished {
        /// The replica.
        replica: String,
        /// The key.
        key: K,
        /// How.
        outcome: ReconcileOutcome,
        /// When.
        at: Instant,
    },
    /// A source yielded an error ([`Event::SourceError`]).
    SourceError {
        /// The replica.
        replica: String,
        /// The source's position.
        source: usize,
        /// The error's message.
        error: String,
        /// When.
        at: Instant,
    },
    /// A source failed and will be subscribed again ([`Event::SourceFailed`]).
    SourceFailed {
        /// The replica.
        replica: String,
        /// The source's position.
        source: usize,
        /// How it failed.
        failure: crate::SourceFailure,
        /// When.
        at: Instant,
    },
    /// Sharded: the replica won a shard's lease ([`Event::ShardLeading`]).
    ShardLeading {
        /// The replica.
        replica: String,
        /// The shard.
        shard: u32,
        /// The shard lease's fencing token.
        fencing_token: u64,
        /// When.
        at: Instant,
    },
    /// Sharded: a shard's term ended ([`Event::ShardEnded`]).
    ShardEnded {
        /// The replica.
        replica: String,
        /// The shard.
        shard: u32,
        /// Whether its lease was lost.
        lost: bool,
        /// When.
        at: Instant,
    },
    /// Sharded: shards held by no replica at the replica's look ([`Event::ShardsUnowned`]).
    ShardsUnowned {
        /// The replica.
        replica: String,
        /// The shards; empty once every shard has a holder again.
        shards: Vec<u32>,
        /// How long the one unowned longest has been so.
        longest: Duration,
        /// When.
        at: Instant,
    },
    /// Sharded: the replica took no shard ([`Event::ShardingRefused`]).
    ShardingRefused {
        /// The replica.
        replica: String,
        /// Why.
        reason: String,
        /// When.
        at: Instant,
    },
    /// The lease was lost.
    LeadershipLost {
        /// The replica.
        replica: String,
        /// When.
        at: Instant,
    },
    /// The replica was killed by [`Harness::kill`].
    Killed {
        /// The replica.
        replica: String,
        /// When.
        at: Instant,
    },
    /// A drain began.
    DrainStarted {
        /// The replica.
        replica: String,
        /// When.
        at: Instant,
    },
    /// A drain ended.
    DrainFinished {
        /// The replica.
        replica: String,
        /// Reconciles dropped when the grace period ran out.
        aborted: u64,
        /// When.
        at: Instant,
    },
}

/// The log of a harness run, with the overlap counts taken at every reconcile start and end.
#[derive(Debug, Clone)]
pub struct Observations<K> {
    records: Vec<Record<K>>,
    in_reconcile: HashMap<String, usize>,
    per_key: HashMap<K, usize>,
    overlaps: u64,
    key_overlaps: u64,
}

impl<K: Key> Observations<K> {
    fn new() -> Self {
        Self {
            records: Vec::new(),
            in_reconcile: HashMap::new(),
            per_key: HashMap::new(),
            overlaps: 0,
            key_overlaps: 0,
        }
    }

    fn record(&mut self, replica: &str, event: &Event<'_, K>) {
        let at = Instant::now();
        let replica = replica.to_owned();
        let r = match *event {
            Event::Leading { fencing_token } => Record::Leading {
                replica,
                fencing_token,
                at,
            },
            Event::ReconcileStarted { key, .. } => {
                *self.in_reconcile.entry(replica.clone()).or_default() += 1;
                let n = self.per_key.entry(key.clone()).or_default();
                *n += 1;
                if *n > 1 {
                    self.key_overlaps += 1;
                }
                self.check();
                Record::Started {
                    replica,
                    key: key.clone(),
                    at,
                }
            }
            Event::ReconcileFinished { key, outcome, .. } => {
                self.check();
                if let Some(n) = self.in_reconcile.get_mut(&replica) {
                    *n = n.saturating_sub(1);
                }
                if let Some(n) = self.per_key.get_mut(key) {
                    *n = n.saturating_sub(1);
                }
                Record::Finished {
                    replica,
                    key: key.clone(),
                    outcome,
                    at,
                }
            }
            Event::LeadershipLost { .. } => Record::LeadershipLost { replica, at },
            Event::DrainStarted { .. } => Record::DrainStarted { replica, at },
            Event::DrainFinished { aborted } => Record::DrainFinished {
                replica,
                aborted,
                at,
            },
            Event::SourceError { source, error } => Record::SourceError {
                replica,
                source,
                error: error.to_owned(),
                at,
            },
            Event::SourceFailed {
                source, failure, ..
            } => Record::SourceFailed {
                replica,
                source,
                failure: failure.clone(),
                at,
            },
            Event::ShardLeading {
                shard,
                fencing_token,
            } => Record::ShardLeading {
                replica,
                shard,
                fencing_token,
                at,
            },
            Event::ShardEnded { shard, lost } => Record::ShardEnded {
                replica,
                shard,
                lost,
                at,
            },
            Event::ShardsUnowned { shards, longest } => Record::ShardsUnowned {
                replica,
                shards: shards.to_vec(),
                longest,
                at,
            },
            Event::ShardingRefused { reason } => Record::ShardingRefused {
                replica,
                reason: reason.to_owned(),
                at,
            },
            Event::WarmStart { shard, keys } => Record::WarmStart {
                replica,
                shard,
                keys,
                at,
            },
            Event::FirstReconcile { shard, after } => Record::FirstReconcile {
                replica,
                shard,
                after,
                at,
            },
            Event::ShardsAssigned { .. }
            | Event::ReconcileOverran { .. }
            | Event::ShardSelectorIgnored { .. } => return,
        };
        self.records.push(r);
    }

    /// Counts a moment at which more than one replica is in reconcile.
    fn check(&mut self) {
        if self.in_reconcile.values().filter(|n| **n > 0).count() > 1 {
            self.overlaps += 1;
        }
    }

    /// Every record, in order.
    #[must_use]
    pub fn records(&self) -> &[Record<K>] {
        &self.records
    }

    /// Reconcile starts and ends at which more than one replica was in reconcile.
    #[must_use]
    pub fn overlaps(&self) -> u64 {
        self.overlaps
    }

    /// Reconcile starts at which the key was already in reconcile (on any replica).
    #[must_use]
    pub fn key_overlaps(&self) -> u64 {
        self.key_overlaps
    }

    /// Reconciles started, with the replica and key.
    pub fn starts(&self) -> impl Iterator<Item = (&str, &K, Instant)> {
        self.records.iter().filter_map(|r| match r {
            Record::Started { replica, key, at } => Some((replica.as_str(), key, *at)),
            _ => None,
        })
    }

    /// Each failover: the new leader and the time from the end of the previous leader's term
    /// (its lost lease, its drain's end, or its kill) to the start of the new term.
    #[must_use]
    pub fn failovers(&self) -> Vec<(String, Duration)> {
        let mut out = Vec::new();
        let mut leader: Option<&str> = None;
        let mut ended: Option<Instant> = None;
        for r in &self.records {
            match r {
                Record::Leading { replica, at, .. } => {
                    if let Some(end) = ended.take() {
                        out.push((replica.clone(), at.duration_since(end)));
                    }
                    leader = Some(replica);
                }
                Record::LeadershipLost { replica, at }
                | Record::DrainFinished { replica, at, .. }
                | Record::Killed { replica, at }
                    if leader == Some(replica.as_str()) =>
                {
                    leader = None;
                    ended = Some(*at);
                }
                _ => {}
            }
        }
        out
    }
}

struct Replica {
    id: String,
    shutdown: CancellationToken,
    /// The replica's elector; `None` for a sharded replica.
    elector: Option<Arc<LeaderElector<MemoryLock>>>,
    /// The shards a sharded replica leads.
    held: Option<watch::Receiver<BTreeSet<u32>>>,
    run: JoinHandle<Summary>,
}

/// Replicas of a controller on one in-memory lock, with fault injection and a log.
///
/// See the [module documentation](self) for an example.
pub struct Harness<K> {
    store: MemoryStore,
    config: LeaderElectionConfig,
    log: Arc<Mutex<Observations<K>>>,
    replicas: Vec<Replica>,
}

impl<K: Key> Harness<K> {
    /// A harness whose replicas' electors use `config`.
    #[must_use]
    pub fn new(config: LeaderElectionConfig) -> Self {
        Self {
            store: MemoryStore::new(),
            config,
            log: Arc::new(Mutex::new(Observations::new())),
            replicas: Vec::new(),
        }
    }

    /// The shared lock's store, for finer fault injection ([`MemoryStore::fail_next`],
    /// [`MemoryStore::delay_next`], ...).
    #[must_use]
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Runs `controller` as replica `id` (a new elector on the shared lock, the harness's
    /// event hook added), spawned on the current runtime.
    ///
    /// # Panics
    ///
    /// If the harness's config is invalid or `id` is empty (a test setup error).
    pub fn spawn<E: Send + 'static>(&mut self, id: &str, controller: Controller<K, E>) {
        let elector = LeaderElector::new(self.store.lock(id), self.config.clone())
            .expect("a valid harness config and a non-empty replica id");
        let elector = Arc::new(elector);
        let log = self.log.clone();
        let replica = id.to_owned();
        let shutdown = CancellationToken::new();
        let run = controller
            .leader_elector(elector.clone())
            .on_event(move |e| lock(&log).record(&replica, e))
            .run(shutdown.clone());
        self.replicas.push(Replica {
            id: id.to_owned(),
            shutdown,
            elector: Some(elector),
            held: None,
            run: tokio::spawn(run),
        });
    }

    /// Runs `controller` as replica `id` of a controller sharded into `shards` shards (see
    /// [`Controller::sharded`]), its shard and member records on the harness's store, its
    /// electors on the harness's config; spawned on the current runtime, the harness's event
    /// hook added. [`partition`](Self::partition) cuts it off from every record.
    ///
    /// # Panics
    ///
    /// If `shards` is 0, `id` is empty or the harness's config is invalid (a test setup error).
    pub fn spawn_sharded<E: Send + 'static>(
        &mut self,
        id: &str,
        controller: Controller<K, E>,
        shards: u32,
    ) where
        K: ShardKey,
    {
        self.spawn_sharded_as(id, id, controller, shards);
    }

    /// As [`spawn_sharded`](Self::spawn_sharded), for a replica known to the harness (and in
    /// its records) as `id` that runs with the identity `identity`: a second process started
    /// with the identity of another replica.
    ///
    /// # Panics
    ///
    /// As [`spawn_sharded`](Self::spawn_sharded).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::testing::Harness;
    /// use ctrlq_controller::{Action, Context, Controller};
    /// use ctrlq_leader::LeaderElectionConfig;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let reconcile = |_key: u32, _ctx: Context| async { Ok::<_, std::io::Error>(Action::Done) };
    /// let mut harness = Harness::new(LeaderElectionConfig::default());
    /// harness.spawn_sharded("a", Controller::new("c", reconcile), 4);
    /// harness.spawn_sharded_as("a-twin", "a", Controller::new("c", reconcile), 4);
    /// harness.stop_all().await;
    /// # }
    /// ```
    pub fn spawn_sharded_as<E: Send + 'static>(
        &mut self,
        id: &str,
        identity: &str,
        controller: Controller<K, E>,
        shards: u32,
    ) where
        K: ShardKey,
    {
        let (store, owner) = (self.store.clone(), identity.to_owned());
        let locks = move |name: &str| store.named_lock(name, owner.clone());
        let sharding = Sharding::new(shards, identity, locks, self.config.clone())
            .expect("a valid harness config, shard count and replica id");
        let held = sharding.subscribe_held();
        let log = self.log.clone();
        let replica = id.to_owned();
        let shutdown = CancellationToken::new();
        let run = controller
            .sharded(sharding)
            .on_event(move |e| lock(&log).record(&replica, e))
            .run(shutdown.clone());
        self.replicas.push(Replica {
            id: id.to_owned(),
            shutdown,
            elector: None,
            held: Some(held),
            run: tokio::spawn(run),
        });
    }

    /// The shards sharded replica `id` leads now (empty for an unknown or unsharded replica).
    #[must_use]
    pub fn shards_held(&self, id: &str) -> BTreeSet<u32> {
        self.replicas
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.held.as_ref())
            .map(|held| held.borrow().clone())
            .unwrap_or_default()
    }

    /// The running replicas' ids (killed and stopped ones left out), in no particular order.
    #[must_use]
    pub fn replicas(&self) -> Vec<String> {
        self.replicas.iter().map(|r| r.id.clone()).collect()
    }

    /// The replica leading now, if any.
    #[must_use]
    pub fn leader(&self) -> Option<String> {
        self.replicas
            .iter()
            .find(|r| r.elector.as_ref().is_some_and(|e| e.is_leader()))
            .map(|r| r.id.clone())
    }

    /// Cuts replica `id` off the lock (every lock call fails) or heals it.
    pub fn partition(&self, id: &str, partitioned: bool) {
        self.store.partition(id, partitioned);
    }

    /// Kills replica `id` as a crash would: its run is dropped, nothing is drained or released.
    pub fn kill(&mut self, id: &str) {
        if let Some(i) = self.replicas.iter().position(|r| r.id == id) {
            self.replicas.swap_remove(i).run.abort();
            lock(&self.log).records.push(Record::Killed {
                replica: id.to_owned(),
                at: Instant::now(),
            });
        }
    }

    /// Asks replica `id` to shut down gracefully without waiting for it (it drains meanwhile);
    /// [`stop`](Self::stop) or [`stop_all`](Self::stop_all) then collect its summary.
    pub fn request_stop(&self, id: &str) {
        if let Some(r) = self.replicas.iter().find(|r| r.id == id) {
            r.shutdown.cancel();
        }
    }

    /// Shuts replica `id` down gracefully and returns its summary (`None` if there is no such
    /// replica, or it panicked).
    pub async fn stop(&mut self, id: &str) -> Option<Summary> {
        let i = self.replicas.iter().position(|r| r.id == id)?;
        let r = self.replicas.swap_remove(i);
        r.shutdown.cancel();
        r.run.await.ok()
    }

    /// Shuts every replica down at once and returns their summaries.
    pub async fn stop_all(&mut self) -> Vec<(String, Summary)> {
        for r in &self.replicas {
            r.shutdown.cancel();
        }
        let mut out = Vec::new();
        for r in self.replicas.drain(..) {
            if let Ok(s) = r.run.await {
                out.push((r.id, s));
            }
        }
        out
    }

    /// A copy of the log so far.
    #[must_use]
    pub fn observations(&self) -> Observations<K> {
        lock(&self.log).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl<K> std::fmt::Debug for Harness<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field(
                "replicas",
                &self.replicas.iter().map(|r| &r.id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}
