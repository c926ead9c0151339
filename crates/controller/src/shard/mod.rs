//! Sharding: the key space split into shards by a stable hash, each shard owned through its own
//! lease, the shards spread over the live replicas by rendezvous hashing.
//!
//! - **Shards**: a key belongs to shard [`shard_of`]`(key, n)` (FNV-1a of its [`ShardKey`]
//!   bytes through a finalizer, scaled to `n`), the same in every replica and every version of
//!   this crate; or, for a controller [sharded by namespace](Sharding::by_namespace), to the
//!   shard of its namespace as a Kubernetes API server divides objects by a shard selector
//!   ([`ShardSelector`], KEP-5866), so that a replica's watch asks the server for the objects
//!   of the shards it holds only (`Watch::for_shards`, feature `kube`; below).
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
//!
//! Every look also finds the shards held by no replica: no lease yet, a lease released (a
//! hand-over between the release and the next holder's take), or a lease unchanged for its
//! duration (its holder stopped). Each replica reports them after every look that finds some
//! and once when none are left ([`Event::ShardsUnowned`](crate::Event::ShardsUnowned), with how
//! long the one unowned longest has been so; the `ctrlq_controller_shards_unowned` and
//! `_seconds` gauges): a dead holder's shards are reported from the look that finds their
//! leases stale until they are taken, within the bound after a death above.
//!
//! # Watching only the held shards
//!
//! With `Watch::for_shards` (feature `kube`), a replica's watch lists and watches only the
//! namespaces of the shards it holds, the API server filtering by each shard's
//! [`ShardSelector`] (kube-apiserver's `ShardedListAndWatch` gate): one watcher per held shard,
//! started when the replica wins the shard's lease and dropped when its term there ends (after
//! its drain), the store forgetting the shard's objects without yielding their keys; the other
//! shards' watchers run on, with no relist. A replica's memory, its watch traffic and the
//! server's fan-out then fall with the number of replicas (`benches/RESULTS.md`, "Sharded
//! watches").
//!
//! - **Listed before reconciled**: a shard's term starts its workers only once the shard's
//!   watcher has listed. The warm view keeps the keys of shards this replica held before; a
//!   reconcile of one of them from a store that has not listed the shard again would read a
//!   present object as absent.
//! - **Namespace, not uid**: the server can divide by either, but a key's shard must follow from
//!   the key alone. With uid shards, a name deleted and created again (a new uid) could land in
//!   a shard another replica holds while this one still reconciles the old object, and one key
//!   would be in two reconciles at once; owned objects' keys (their owner's name) and mapped
//!   keys carry no uid at all. Namespace shards keep a key in one shard for its whole life, and
//!   an owned object (in its owner's namespace) in its owner's shard, so every watch of the
//!   controller can be sharded alike. The cost is balance: a namespace is never split, and
//!   FNV-1a puts names that differ only in their last characters in one shard
//!   ([`ShardField::Namespace`]).
//! - **What warm means now**: a replica holds nothing of the shards it does not lead. A
//!   take-over lists the shards taken (a list of their namespaces, not of the whole collection),
//!   then reconciles their objects; until that list, the term waits. Watching the shards a
//!   replica would take next as well would trade the memory the sharding saves for a take-over
//!   that is already bounded by the lease duration rather than by the list.
//! - **Without the gate** (or on an older server) each watcher receives every object, and the
//!   watch keeps only its shard's: correct, at the traffic of the whole collection per held
//!   shard (`WatchStatus::outside_shards` counts the dropped objects).

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
