//! What this replica observed of the shard leases, from its start: each lease's last version and
//! when it first saw that version, on its own clock. A lease assigned to this replica that has
//! not changed for its lease duration is blanked, so that the shard's elector takes it at its
//! first try instead of starting its own observation then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderRecord, Lock, Versioned};
use tokio::time::Instant;

use super::sightings::{Sightings, blank};

/// The shard leases `{prefix}{name}-shard-{i}` as one replica observed them.
///
/// # Why blanking keeps one holder
///
/// A holder leads only until its last successful renew was sent plus the retry period and the
/// renew deadline, which the election settings keep below the lease duration. This replica first saw that renew's version no
/// earlier than it was written, so a version unchanged for a lease duration since then belongs
/// to a holder that stopped leading: the rule the elector applies to its own observation.
/// Versions never repeat, and the blank is a compare-and-set on the version observed, so a
/// lease renewed meanwhile is kept.
pub(crate) struct ShardLeases<L> {
    /// Locks on one lease by name, to blank a stale one.
    locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
    /// `{prefix}{name}-shard-`.
    prefix: String,
    /// Each lease's last version and when this replica first saw it, on its own clock.
    seen: Sightings,
    /// The shards whose lease named a live holder at the last look.
    owned: BTreeSet<u32>,
    /// Each shard without a live holder, since when (the look that first found it so).
    unowned_since: BTreeMap<u32, Instant>,
}

/// The shards held by nobody, as one replica's last look at the leases saw them: no lease, a
/// lease released, or one unchanged for its duration (its holder stopped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Unowned {
    pub(crate) shards: Vec<u32>,
    /// How long the one unowned longest has been, from the first look that found it so.
    pub(crate) longest: Duration,
}

impl<L: Lock> ShardLeases<L> {
    /// The leases named `{prefix}{i}`; `locks` makes the lock on one of them.
    pub(crate) fn new(prefix: String, locks: Arc<dyn Fn(&str) -> L + Send + Sync>) -> Self {
        Self {
            locks,
            prefix,
            seen: Sightings::default(),
            owned: BTreeSet::new(),
            unowned_since: BTreeMap::new(),
        }
    }

    /// Records a fresh listing of the store (other records than the leases are skipped), and
    /// blanks the leases of `mine` (the shards assigned to this replica) that name a holder and
    /// have not changed for their lease duration on this replica's clock, except the shards in
    /// `held` (led by this replica). Returns the shards blanked.
    pub(crate) async fn look(
        &mut self,
        listed: Vec<(String, Versioned)>,
        mine: &BTreeSet<u32>,
        held: &BTreeSet<u32>,
    ) -> Vec<u32> {
        let mut blanked = Vec::new();
        for (name, shard, version) in self.stale(listed) {
            if mine.contains(&shard) && !held.contains(&shard) && self.blank(&name, &version).await
            {
                blanked.push(shard);
            }
        }
        blanked
    }

    /// Records a fresh list; returns the leases that name a holder and have not changed for
    /// their lease duration since this replica first saw their version.
    fn stale(&mut self, listed: Vec<(String, Versioned)>) -> Vec<(String, u32, String)> {
        let now = Instant::now();
        let mut stale = Vec::new();
        let mut names = BTreeSet::new();
        self.owned.clear();
        for (name, v) in listed {
            let Some(shard) = name
                .strip_prefix(&self.prefix)
                .and_then(|i| i.parse::<u32>().ok())
            else {
                continue;
            };
            names.insert(name.clone());
            let first_seen = self.seen.first_seen(&name, &v.version, now);
            let lease = Duration::from_secs(u64::from(v.record.lease_duration_seconds));
            if v.record.holder_identity.is_empty() {
                continue;
            }
            if first_seen + lease <= now {
                stale.push((name, shard, v.version));
            } else {
                self.owned.insert(shard);
            }
        }
        self.seen.keep(&names);
        stale
    }

    /// The shards below `shards` that the last look found without a live holder, and how long
    /// the longest of them has been so, counted from the first look that found it so and
    /// asked this (the runner asks after every look).
    pub(crate) fn unowned(&mut self, shards: u32) -> Unowned {
        let now = Instant::now();
        let owned = &self.owned;
        self.unowned_since.retain(|shard, _| !owned.contains(shard));
        let unowned: Vec<u32> = (0..shards).filter(|s| !owned.contains(s)).collect();
        let mut longest = Duration::ZERO;
        for &shard in &unowned {
            let since = *self.unowned_since.entry(shard).or_insert(now);
            longest = longest.max(now - since);
        }
        Unowned {
            shards: unowned,
            longest,
        }
    }

    /// Blanks the lease `name` if it is still at `version` and names a holder, keeping its leader
    /// transitions (the next grant's fencing token is larger still), as a release writes it.
    async fn blank(&self, name: &str, version: &str) -> bool {
        blank(&(self.locks)(name), name, version, LeaderRecord::released).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctrlq_leader::{MemoryLock, MemoryStore};
    use std::time::SystemTime;
    use tokio::time::advance;

    const PREFIX: &str = "x-shard-";

    fn leases(store: &MemoryStore, id: &str) -> ShardLeases<MemoryLock> {
        let (s, me) = (store.clone(), id.to_owned());
        let locks: Arc<dyn Fn(&str) -> MemoryLock + Send + Sync> =
            Arc::new(move |name: &str| s.named_lock(name, me.clone()));
        ShardLeases::new(PREFIX.to_owned(), locks)
    }

    /// One look of `a` over a listing of every `x-` record, as the membership lists them.
    async fn look(
        a: &mut ShardLeases<MemoryLock>,
        store: &MemoryStore,
        mine: &[u32],
        held: &[u32],
    ) -> Vec<u32> {
        let listed = store.lock("a").list("x-").await.unwrap();
        a.look(listed, &set(mine), &set(held)).await
    }

    /// Writes the record `name` as held by `holder` for 15 s.
    async fn write(store: &MemoryStore, name: &str, holder: &str, transitions: u32) {
        let lock = store.named_lock(name, holder);
        let wall = SystemTime::now();
        let record = LeaderRecord {
            holder_identity: holder.to_owned(),
            lease_duration_seconds: 15,
            acquire_time: wall,
            renew_time: wall,
            leader_transitions: transitions,
        };
        match lock.get().await {
            Ok(_) => lock.update(record).await.unwrap(),
            Err(_) => lock.create(record).await.unwrap(),
        };
    }

    /// Writes shard `i`'s lease as held by `holder` for 15 s.
    async fn renew(store: &MemoryStore, i: u32, holder: &str, transitions: u32) {
        write(store, &format!("{PREFIX}{i}"), holder, transitions).await;
    }

    fn set(shards: &[u32]) -> BTreeSet<u32> {
        shards.iter().copied().collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_unchanged_for_its_duration_is_blanked_once_assigned() {
        let store = MemoryStore::new();
        renew(&store, 0, "x", 3).await;
        renew(&store, 1, "x", 1).await;
        let mut a = leases(&store, "a");
        assert!(look(&mut a, &store, &[0, 1], &[]).await.is_empty());
        advance(Duration::from_secs(14)).await;
        renew(&store, 1, "x", 1).await; // shard 1 is renewed: alive
        assert!(look(&mut a, &store, &[0, 1], &[]).await.is_empty());
        advance(Duration::from_secs(1)).await;
        // Shard 0 is not assigned to a: left alone.
        assert!(look(&mut a, &store, &[1], &[]).await.is_empty());
        assert_eq!(
            store.record_named("x-shard-0").unwrap().holder_identity,
            "x"
        );
        // Assigned, led by a itself: left alone.
        assert!(look(&mut a, &store, &[0], &[0]).await.is_empty());
        assert_eq!(look(&mut a, &store, &[0, 1], &[]).await, [0]);
        let blank = store.record_named("x-shard-0").unwrap();
        assert_eq!(blank.holder_identity, "");
        assert_eq!(blank.leader_transitions, 3, "the fencing token still grows");
        // A blank lease is free: nothing more to write.
        advance(Duration::from_secs(30)).await;
        assert_eq!(look(&mut a, &store, &[0, 1], &[]).await, [1]);
        assert!(look(&mut a, &store, &[0, 1], &[]).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_without_a_live_holder_is_unowned_from_the_look_that_found_it() {
        let store = MemoryStore::new();
        renew(&store, 0, "x", 1).await;
        write(&store, "x-shard-2", "", 1).await; // released
        let mut a = leases(&store, "a");
        look(&mut a, &store, &[], &[]).await;
        let unowned = |shards: &[u32], secs| Unowned {
            shards: shards.to_vec(),
            longest: Duration::from_secs(secs),
        };
        assert_eq!(a.unowned(3), unowned(&[1, 2], 0), "absent, released");
        advance(Duration::from_secs(5)).await;
        look(&mut a, &store, &[], &[]).await;
        assert_eq!(a.unowned(3), unowned(&[1, 2], 5));
        // Shard 0 unchanged for its 15 s: its holder stopped.
        advance(Duration::from_secs(10)).await;
        renew(&store, 1, "y", 1).await;
        look(&mut a, &store, &[], &[]).await;
        assert_eq!(a.unowned(3), unowned(&[0, 2], 15));
        renew(&store, 0, "x", 1).await;
        renew(&store, 2, "y", 2).await;
        look(&mut a, &store, &[], &[]).await;
        assert_eq!(a.unowned(3), unowned(&[], 0));
        // Unowned again: counted from then, not from before.
        advance(Duration::from_secs(3)).await;
        write(&store, "x-shard-1", "", 2).await;
        look(&mut a, &store, &[], &[]).await;
        assert_eq!(a.unowned(3), unowned(&[1], 0));
        advance(Duration::from_secs(2)).await;
        look(&mut a, &store, &[], &[]).await;
        assert_eq!(a.unowned(3), unowned(&[1], 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_renewed_after_the_list_is_kept() {
        let store = MemoryStore::new();
        renew(&store, 0, "x", 1).await;
        let mut a = leases(&store, "a");
        look(&mut a, &store, &[], &[]).await;
        advance(Duration::from_secs(15)).await;
        let stale = a.stale(store.lock("a").list(PREFIX).await.unwrap());
        assert_eq!(stale.len(), 1);
        renew(&store, 0, "x", 1).await; // between the list and the blank
        let (name, _, version) = &stale[0];
        assert!(!a.blank(name, version).await);
        assert_eq!(
            store.record_named("x-shard-0").unwrap().holder_identity,
            "x"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn records_other_than_the_shard_leases_are_left_alone() {
        let store = MemoryStore::new();
        write(&store, "x-member-b", "b", 4).await;
        write(&store, "x-shard-other", "b", 1).await;
        write(&store, "y-shard-0", "b", 1).await;
        let mut a = leases(&store, "a");
        look(&mut a, &store, &[0], &[]).await;
        advance(Duration::from_secs(30)).await;
        assert!(look(&mut a, &store, &[0], &[]).await.is_empty());
        for name in ["x-member-b", "x-shard-other", "y-shard-0"] {
            assert_eq!(store.record_named(name).unwrap().holder_identity, "b");
        }
    }
}
