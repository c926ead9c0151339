//! A controller runner: sources of keys, a reconcile function and an optional lease, turned into
//! leader-gated workers over a work queue.
//!
//! [`Controller`] wires what every controller needs and what is easy to get wrong by hand:
//!
//! - keys from one or more sources (any [`Stream`](futures::Stream); kube-runtime watchers with
//!   the `kube` feature) go through a [`PriorityQueue`](ctrlq_queue_async::PriorityQueue), so a
//!   key is never reconciled twice at once, a key changed during its reconcile is reconciled
//!   again, and live changes go before the keys of a listing, which age so that none starves
//!   (see [`priority`]);
//! - a reconcile can be given a soft and a hard deadline
//!   ([`Controller::soft_deadline`], [`Controller::hard_deadline`]);
//! - each reconcile returns an [`Action`]; failures and panics go to an error policy (by default
//!   a rate-limited requeue), and a panic never loses the key;
//! - with a [`LeaderElector`](ctrlq_leader::LeaderElector), workers run only while leading; a lost
//!   lease cancels at once, and the controller stands again with a fresh queue;
//! - a follower stands warm: its sources run while it follows, and the keys they yielded fill a
//!   new term's queue at once, without listing again (see [Warm standby](#warm-standby));
//! - a shutdown drains: no new keys, in-flight reconciles finish within a grace period while the
//!   lease is kept, then [`Controller::run`] returns a [`Summary`];
//! - controller-runtime's metric names (the module `prometheus`, feature `prometheus`), a
//!   `tracing` span per reconcile carrying the key, and [`Event`]s as they happen.
//!
//! # Warm standby
//!
//! With an elector (unless [`Controller::warm_standby`] turns it off) or sharded, each replica
//! subscribes its sources once per run and keeps every key they yield in a warm view: a set of
//! keys, one entry per distinct key for the run (`size_of::<K>()` + 1 bytes times 8/7 to 16/7,
//! plus what the key owns on the heap). A follower reconciles nothing and writes nothing; a
//! source that fails while it follows is reported and subscribed again after the backoff, as
//! while leading. When a term begins (a lease or a shard won), its queue is filled from the
//! view at once ([`Event::WarmStart`]), and the sources' later keys go to it as they come; the
//! time from winning to the first reconcile is reported ([`Event::FirstReconcile`],
//! [`Summary::slowest_first_reconcile`], and with the `prometheus` feature the histogram
//! `ctrlq_controller_first_reconcile_seconds`). A source's own relist (a watch restarted after a
//! failure) adds its keys to the view and to the running term's queue again (a key waiting there
//! is not queued twice).
//!
//! A leader crashes; the follower, whose view holds every key, reconciles as soon as it wins:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use ctrlq_controller::{Action, Context, Controller, Event};
//! use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
//! use futures::StreamExt;
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let store = MemoryStore::new();
//! let events = Arc::new(Mutex::new(Vec::new()));
//! let replica = |id: &str| {
//!     let elector = LeaderElector::new(store.lock(id), LeaderElectionConfig::default()).unwrap();
//!     let (log, id) = (events.clone(), id.to_owned());
//!     Controller::new("objects", |_key: u32, _ctx: Context| async {
//!         Ok::<_, std::io::Error>(Action::Done)
//!     })
//!     .source(|| futures::stream::iter(0..1000).chain(futures::stream::pending()))
//!     .leader_elector(Arc::new(elector))
//!     .on_event(move |e| {
//!         let line = match e {
//!             Event::WarmStart { keys, .. } => format!("{id}: {keys} keys"),
//!             Event::FirstReconcile { after, .. } => format!("{id}: {after:?}"),
//!             _ => return,
//!         };
//!         log.lock().unwrap().push(line);
//!     })
//! };
//! let shutdown = CancellationToken::new();
//! let a = tokio::spawn(replica("a").run(shutdown.clone()));
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! let b = tokio::spawn(replica("b").run(shutdown.clone()));
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! a.abort(); // a crash: nothing drained, nothing released
//! tokio::time::sleep(Duration::from_secs(30)).await; // the lease expires; b wins
//! shutdown.cancel();
//! assert_eq!(b.await.unwrap().reconciles, 1000);
//! let events = events.lock().unwrap();
//! assert!(events.ends_with(&["b: 1000 keys".to_owned(), "b: 0ns".to_owned()]), "{events:?}");
//! # }
//! ```
//!
//! # Locks
//!
//! Every lock of the workspace's crates is `parking_lot`'s `Mutex`, one family for all: it does
//! not poison, so a panic in a caller's code while a lock is held (a hook, a hint, a lock
//! backend) cannot wedge what the lock guards, which is consistent between transitions; it
//! spins briefly before parking, which suits locks held for a few hundred nanoseconds; and its
//! guard is not `Send`, so a lock held across an `.await` does not compile in a spawned task.
//!
//! # Examples
//!
//! Three replicas of a controller share one in-memory lock; the leader reconciles every key,
//! then all shut down and the leader drains.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use ctrlq_controller::{Action, Context, Controller, Drain};
//! use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(Debug)]
//! struct Unavailable;
//!
//! async fn reconcile(key: String, ctx: Context) -> Result<Action, Unavailable> {
//!     // Read the object, act, write status guarded by the fencing token...
//!     let _ = (key, ctx.fencing_token());
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//!     Ok(Action::requeue_after(Duration::from_secs(300)))
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let store = MemoryStore::new();
//! let shutdown = CancellationToken::new();
//! let mut replicas = Vec::new();
//! for id in ["a", "b", "c"] {
//!     let config = LeaderElectionConfig::default().release_on_cancel(true);
//!     let elector = Arc::new(LeaderElector::new(store.lock(id), config).unwrap());
//!     let controller = Controller::new("objects", reconcile)
//!         .source(|| futures::stream::iter((0..100).map(|i| format!("ns/obj-{i}"))))
//!         .workers(4)
//!         .leader_elector(elector);
//!     replicas.push(tokio::spawn(controller.run(shutdown.clone())));
//! }
//! tokio::time::sleep(Duration::from_secs(5)).await;
//! shutdown.cancel();
//! let mut reconciles = 0;
//! for r in replicas {
//!     let summary = r.await.unwrap();
//!     assert_ne!(summary.drain, Drain::CutShort); // followers report `NotLeading`
//!     reconciles += summary.reconciles;
//! }
//! assert_eq!(reconciles, 100);
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod action;
mod context;
mod controller;
mod event;
mod key;
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
pub mod kube;
mod lead;
pub mod priority;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
pub mod shard;
mod source;
mod term;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;
mod warm;

pub use action::{Action, ReconcileError};
pub use context::Context;
pub use controller::{Controller, DEFAULT_GRACE_PERIOD, DEFAULT_SYNC_TIMEOUT};
pub use ctrlq_queue_async::InBackoff;
pub use event::{Drain, Event, NotSynced, ReconcileOutcome, SourceFailure, Summary};
pub use key::Key;
