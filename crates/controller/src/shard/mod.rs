//! Sharding: the key space split into shards by a stable hash, each shard owned through its own
//! lease, the shards spread over the live replicas by rendezvous hashing.
//!
//! - **Shards**: a key belongs to shard [`shard_of`]`(key, n)` (FNV-1a of its [`ShardKey`]
//!   bytes through a finalizer, scaled to `n`), the same in every replica and every version of
//!   this crate; or, for a controller [sharded by namespace](Sharding::by_namespace), to the
//!   shard of its namespace as a Kubernetes API server divides objects by a shard selector
//!   ([`ShardSelector`], KEP-5866), so that a replica's watch can ask the server for the
//!   objects of its shards only (`Watch::sharded`, feature `kube`).
//! - **Ownership**: shard `i` is held through the record `{prefix}{name}-shard-{i}` with the
//!   elector the controller uses for one lease: fencing tokens, drain and the timing budget are
//!   per shard. A replica runs one term per held shard (a fresh queue and the configured
//!   workers), so a key is never reconciled by two replicas at once.
//! - **Membership**: each replica keeps a member record `{prefix}{name}-member-{id}` (its
//!   identity and its shard count) renewed every retry period, lists the members' records
//!   ([`Lock::list`](ctrlq_leader::Lock::list)) and counts a member live while its record
//!   changed within a lease duration on its own clock. A replica shutting down blanks its record.
//!   The lock stores a member record as a [`LeaderRecord`](ctrlq_leader::LeaderRecord): the
//!   identity as the holder, the shard count as the leader transitions.
//! - **Balance**: every replica assigns the shards over the live members by rendezvous hashing
//!   with bounded load, so each holds ⌊n/m⌋ or ⌈n/m⌉ once settled, and a join or a leave moves
//!   few shards. A replica stands for the shards assigned to it and hands back, after draining
//!   (the lease is released once the term's reconciles finished), those no longer assigned to
//!   it. It never takes a shard whose lease is still held: its elector waits for the lease.
//! - **Keys**: the sources run once per replica, and the replica keeps every key they yield in
//!   its warm view (see [`Controller::warm_standby`](crate::Controller::warm_standby) for what
//!   that costs), by shard; each key also goes to its shard's queue while this replica holds
//!   that shard. When a shard is gained, its term's queue is filled from the view's keys of that
//!   shard at once ([`Event::WarmStart`](crate::Event::WarmStart)): no source is subscribed
//!   again, and the keys of shards already held are not queued again.
//! - **Refusals**: a replica takes no shard while a live member announces another shard count
//!   (both sides stop rather than split the keys twice), or while another process writes its
//!   member record (an identity used twice); both are reported
//!   ([`Event::ShardingRefused`](crate::Event::ShardingRefused)).
//! - **One process per identity**: before its first write, a replica that finds a live member
//!   record of its own identity (an earlier run's, or another process's) leaves it alone until
//!   it has not changed for a lease duration on its own clock, or another member blanked it;
//!   shard leases that name its identity are taken on the same rule. So a second process with
//!   an identity in use takes no shard while the first renews, and a replica restarted after a
//!   crash holds its share again within the bound after a death plus the bound after a join
//!   (below), counted from its start: the others may take its shards first and hand them back
//!   once they see it.
//!
//! # Timing
//!
//! Each replica looks every retry period RP at the member records and at the shard leases, and
//! keeps, for each record, the version it last saw and when it first saw that version, on its
//! own clock. A record unchanged for a lease duration LD since then is stale: its writer
//! stopped (a holder stops leading a retry period plus a renew deadline after its last renew
//! was sent, which the election settings keep below a lease duration). At a look, a replica drops the members whose records
//! are stale, assigns the shards, and blanks the stale leases of the shards assigned to it
//! (a compare-and-set on the version seen) before it stands for them, so a shard's elector
//! takes a dead holder's lease at its first try instead of observing it for a lease duration
//! of its own.
//!
//! After a replica dies (or is cut off), the others first saw its last writes at most a retry
//! period after it, and find them stale at a look at most another retry period after they
//! went stale: its shards are assigned and their leases blanked within LD + 2 × RP. A new
//! stand takes its shard at its first try; a stand already running (the shard was assigned
//! here before) at its next jittered retry (at most 2.2 × RP); a shard that the bounded load
//! moves from one survivor to another is first drained (at most the grace period G) and
//! released. Settled within LD + 4.2 × RP + G: 23.4 s + G with the defaults. After a join,
//! a shard moves once its old holder drained it (at most G) and released its lease, on the new
//! holder's next try (at most 2.2 × RP after the release), once every replica's look has seen
//! the join (a retry period): G + 4.2 × RP.

//! # Examples
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use ctrlq_controller::shard::Sharding;
//! use ctrlq_controller::{Action, Context, Controller};
//! use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let store = MemoryStore::new();
//! let locks = move |name: &str| store.named_lock(name, "replica-a");
//! let sharding = Sharding::new(4, "replica-a", locks, LeaderElectionConfig::default()).unwrap();
//! let held = sharding.subscribe_held();
//! let shutdown = CancellationToken::new();
//! let (reconciled, stop) = (Arc::new(AtomicUsize::new(0)), shutdown.clone());
//! let count = reconciled.clone();
//! let summary = Controller::new("pods", move |_key: String, _ctx: Context| {
//!         if count.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
//!             stop.cancel(); // both keys reconciled
//!         }
//!         async { Ok::<_, Infallible>(Action::Done) }
//!     })
//!     .source(|| futures::stream::iter(["default/a".to_owned(), "default/b".to_owned()]))
//!     .sharded(sharding)
//!     .run(shutdown)
//!     .await;
//! // Alone, this replica held every shard, so it reconciled every key.
//! assert_eq!(summary.reconciles, 2);
//! assert_eq!(summary.terms, 4);
//! assert!(held.borrow().is_empty(), "handed back at the shutdown");
//! # }
//! ```

mod assign;
mod key;
mod leases;
mod members;
pub(crate) mod run;
mod server;
mod sharding;
mod sightings;

pub use key::{ShardKey, shard_of};
pub use server::{
    HashRange, ShardField, ShardSelector, ShardSelectorError, field_hash, shard_of_hash,
};
pub(crate) use sharding::ShardFollower;
pub use sharding::{Sharding, ShardingError};
