//! Membership: this replica's member record, renewed every retry period, and the live members
//! read from the others'.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderRecord, Lock, LockError, Versioned};
use tokio::time::Instant;

use super::sightings::{Sightings, blank};
use tracing::{debug, warn};

/// What one look at the members came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Look {
    /// The live members, this replica among them, sorted.
    Members(Vec<String>),
    /// This replica takes no shard, for the reason given.
    Refused(String),
}

/// What a member record says: a replica's identity and its shard count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberRecord {
    /// The replica; empty in a blanked record.
    identity: String,
    /// The shard count the replica runs with.
    shards: u32,
}

impl MemberRecord {
    /// The record as the [`Lock`] stores it, renewed now: a [`LeaderRecord`] (the record type
    /// all its backends map, the Kubernetes Lease among them) with the identity as the holder
    /// and the shard count in the leader transitions, a field membership has no other use for.
    fn stored(&self, lease: Duration) -> LeaderRecord {
        LeaderRecord::new(self.identity.as_str(), lease, self.shards)
    }

    /// The member record a stored record holds.
    fn read(stored: &LeaderRecord) -> Self {
        Self {
            identity: stored.holder_identity.clone(),
            shards: stored.leader_transitions,
        }
    }
}

/// One replica's membership: its record, and what it observed of the others'.
pub(crate) struct Membership<L> {
    lock: L,
    /// Locks on other members' records, to blank the stale ones.
    locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
    prefix: String,
    /// What a look lists: the member records' prefix, or a shorter one that also lists other
    /// records for [`take_listing`](Self::take_listing).
    list_prefix: String,
    /// The last look's listing, until taken.
    listed: Option<Vec<(String, Versioned)>>,
    identity: String,
    shards: u32,
    lease: Duration,
    /// Each member record's last version and when this replica first saw it, on its own clock.
    seen: Sightings,
    /// When this replica's own record was last written, if it has been.
    announced: Option<Instant>,
    /// Until when this replica refuses shards because another process wrote its record (its
    /// identity is used twice): two lease durations after the last such write seen.
    duplicate_until: Option<Instant>,
    /// Before this replica's first write: the version of a live record of its identity that it
    /// found (left by an earlier run, or written by another process now), and when it first saw
    /// that version, on its own clock.
    inherited: Option<(String, Instant)>,
}

impl<L: Lock> Membership<L> {
    /// The membership of `identity` among the member records `{prefix}{id}`, each on a lock
    /// from `locks`; its own record is `{prefix}{identity}`.
    pub(crate) fn new(
        locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
        prefix: String,
        identity: String,
        shards: u32,
        lease: Duration,
    ) -> Self {
        Self {
            lock: locks(&format!("{prefix}{identity}")),
            locks,
            list_prefix: prefix.clone(),
            prefix,
            listed: None,
            identity,
            shards,
            lease,
            seen: Sightings::default(),
            announced: None,
            duplicate_until: None,
            inherited: None,
        }
    }

    /// Lists the records under `prefix` (which the member records' prefix starts with) at each
    /// look, so that one listing serves membership and [`take_listing`](Self::take_listing).
    pub(crate) fn list_with(mut self, prefix: String) -> Self {
        self.list_prefix = prefix;
        self
    }

    /// The last look's listing, if it listed and it was not taken yet.
    pub(crate) fn take_listing(&mut self) -> Option<Vec<(String, Versioned)>> {
        self.listed.take()
    }

    /// This replica's member record naming `identity` (its own, or empty to blank), as
    /// stored.
    fn record(&self, identity: &str) -> LeaderRecord {
        let identity = identity.to_owned();
        MemberRecord {
            identity,
            shards: self.shards,
        }
        .stored(self.lease)
    }

    /// Renews this replica's record, reads the others', and says what it may hold.
    pub(crate) async fn look(&mut self) -> Look {
        self.announce().await;
        self.listed = None;
        match self.lock.list(&self.list_prefix).await {
            Ok(listed) => {
                self.listed = Some(listed.clone());
                let (look, stale) = self.judge(listed);
                for (name, version) in stale {
                    self.blank(&name, &version).await;
                }
                look
            }
            Err(e) => {
                debug!(error = %e, "listing the members failed");
                self.recalled()
            }
        }
    }

    /// Writes this replica's record: an update of the version it last wrote, or a create. A
    /// conflict means another writer: another process with this identity. Before the first
    /// write, a live record of this identity is left alone until it has not changed for a lease
    /// duration.
    async fn announce(&mut self) {
        let sent = Instant::now();
        let record = self.record(&self.identity.clone());
        let written = if self.announced.is_none() {
            // Not written by this replica yet. A blank record is free. One that names this
            // identity was left by an earlier run, or is written by another process now: like
            // another member's, it is taken over only once it has not changed for a lease
            // duration on this replica's clock (or another member blanked it).
            match self.lock.get().await {
                Ok(v) if v.record.is_free() || self.inherited_stale(&v.version) => {
                    self.lock.update(record).await
                }
                Ok(_) => return,
                Err(LockError::NotFound) => self.lock.create(record).await,
                Err(e) => Err(e),
            }
        } else {
            match self.lock.update(record.clone()).await {
                Err(LockError::NotFound) => self.lock.create(record).await,
                other => other,
            }
        };
        match written {
            Ok(_) => self.announced = Some(sent),
            Err(LockError::Conflict | LockError::AlreadyExists) if self.blanked().await => {
                // Another member found this record stale and blanked it: write it again.
                if self
                    .lock
                    .update(self.record(&self.identity.clone()))
                    .await
                    .is_ok()
                {
                    self.announced = Some(sent);
                }
            }
            Err(LockError::Conflict | LockError::AlreadyExists) => {
                if !self.is_duplicate() {
                    warn!(identity = %self.identity, "another process writes this replica's member record");
                }
                // The look in `blanked` read the record again, so the next write can win if
                // the other process is gone.
                self.duplicate_until = Some(Instant::now() + self.lease * 2);
            }
            Err(e) => debug!(error = %e, "renewing the member record failed"),
        }
    }

    /// What a fresh list comes to, and the other members' records that went stale: not changed
    /// for a lease duration on this replica's clock.
    fn judge(&mut self, listed: Vec<(String, Versioned)>) -> (Look, Vec<(String, String)>) {
        let now = Instant::now();
        let mut stale = Vec::new();
        let mut live = BTreeSet::new();
        let mut counts = BTreeSet::new();
        let mut names = BTreeSet::new();
        for (name, v) in listed {
            let Some(id) = name.strip_prefix(&self.prefix) else {
                continue;
            };
            names.insert(name.clone());
            let first_seen = self.seen.first_seen(&name, &v.version, now);
            let member = MemberRecord::read(&v.record);
            if member.identity.is_empty() || id == self.identity {
                continue;
            }
            if first_seen + self.lease <= now {
                stale.push((name.clone(), v.version.clone()));
                continue;
            }
            live.insert(id.to_owned());
            counts.insert(member.shards);
        }
        self.seen.keep(&names);
        (self.decide(live, counts), stale)
    }

    /// Blanks the member record `name` if it is still at `version`: a replica that joins later
    /// then does not count the dead member live for a lease duration of its own observation.
    /// A compare-and-set on the version read, so a record renewed meanwhile is kept (and a
    /// member whose record was blanked writes it again at its next renew).
    async fn blank(&self, name: &str, version: &str) {
        blank(&(self.locks)(name), name, version, |_| self.record("")).await;
    }

    /// Without a fresh list: the members whose records this replica last saw change within a
    /// lease duration.
    fn recalled(&self) -> Look {
        let now = Instant::now();
        let live = self
            .seen
            .iter()
            .filter(|(_, (_, at))| *at + self.lease > now)
            .filter_map(|(name, _)| name.strip_prefix(&self.prefix))
            .filter(|id| *id != self.identity)
            .map(str::to_owned)
            .collect();
        self.decide(live, BTreeSet::new())
    }

    /// Whether this replica's record, read again, is blank (another member blanked it).
    async fn blanked(&self) -> bool {
        matches!(self.lock.get().await, Ok(v) if v.record.is_free())
    }

    /// Whether the live record of this identity found before the first write, now at
    /// `version`, has not changed for a lease duration since this replica first saw it.
    fn inherited_stale(&mut self, version: &str) -> bool {
        let now = Instant::now();
        match &self.inherited {
            Some((seen, at)) if seen == version => *at + self.lease <= now,
            _ => {
                if self.inherited.is_none() {
                    warn!(
                        identity = %self.identity,
                        "a member record of this identity exists: taking it once it has not \
                         changed for a lease duration (another process may use this identity)"
                    );
                }
                self.inherited = Some((version.to_owned(), now));
                false
            }
        }
    }

    fn is_duplicate(&self) -> bool {
        self.duplicate_until.is_some_and(|t| Instant::now() < t)
    }

    fn decide(&self, mut live: BTreeSet<String>, counts: BTreeSet<u32>) -> Look {
        if self.is_duplicate() {
            return Look::Refused(format!(
                "another process uses the identity {:?}",
                self.identity
            ));
        }
        if let Some(other) = counts.iter().find(|&&n| n != self.shards) {
            return Look::Refused(format!(
                "a live member has {other} shards, this replica {}",
                self.shards
            ));
        }
        match self.announced {
            Some(at) if at + self.lease > Instant::now() => {
                live.insert(self.identity.clone());
                Look::Members(live.into_iter().collect())
            }
            None if self.inherited.is_some() => Look::Refused(format!(
                "a member record of the identity {:?} exists (an earlier run's, or another \
                 process's): waiting for it to stay unchanged for a lease duration",
                self.identity
            )),
            _ => Look::Refused("this replica's member record is not renewed".to_owned()),
        }
    }

    /// Blanks this replica's record, so that the others assign its shards at once.
    pub(crate) async fn resign(&mut self) {
        if self.announced.is_some() && !self.is_duplicate() {
            let record = self.record("");
            if let Err(e) = self.lock.update(record).await {
                debug!(error = %e, "resigning the member record failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctrlq_leader::{MemoryLock, MemoryStore};
    use std::time::SystemTime;
    use tokio::time::advance;

    const LEASE: Duration = Duration::from_secs(15);
    const PREFIX: &str = "x-member-";

    fn member(store: &MemoryStore, id: &str, shards: u32) -> Membership<MemoryLock> {
        let (s, me) = (store.clone(), id.to_owned());
        let locks: Arc<dyn Fn(&str) -> MemoryLock + Send + Sync> =
            Arc::new(move |name: &str| s.named_lock(name, me.clone()));
        Membership::new(locks, PREFIX.to_owned(), id.to_owned(), shards, LEASE)
    }

    fn members(ids: &[&str]) -> Look {
        Look::Members(ids.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn a_member_record_is_stored_with_its_shard_count_as_the_transitions() {
        let record = MemberRecord {
            identity: "a".to_owned(),
            shards: 12,
        };
        let stored = record.stored(LEASE);
        assert_eq!(stored.holder_identity, "a");
        assert_eq!(stored.leader_transitions, 12);
        assert_eq!(stored.lease_duration_seconds, 15);
        assert_eq!(MemberRecord::read(&stored), record);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_stops_renewing_goes_stale_and_is_blanked() {
        let store = MemoryStore::new();
        let (mut a, mut b) = (member(&store, "a", 4), member(&store, "b", 4));
        assert_eq!(a.look().await, members(&["a"]));
        assert_eq!(b.look().await, members(&["a", "b"]));
        assert_eq!(a.look().await, members(&["a", "b"]));
        // b stops renewing; a sees it live for a lease duration of its own observation.
        advance(LEASE - Duration::from_secs(1)).await;
        assert_eq!(a.look().await, members(&["a", "b"]));
        advance(Duration::from_secs(1)).await;
        assert_eq!(a.look().await, members(&["a"]));
        let record = store.record_named("x-member-b").unwrap();
        assert_eq!(record.holder_identity, "", "blanked");
        // A replica that joins now does not count b live.
        let mut c = member(&store, "c", 4);
        assert_eq!(c.look().await, members(&["a", "c"]));
        // b was alive after all: it writes its record again, without taking it for a
        // duplicate, and is a member again.
        assert_eq!(b.look().await, members(&["a", "b", "c"]));
        assert_eq!(
            store.record_named("x-member-b").unwrap().holder_identity,
            "b"
        );
        assert_eq!(a.look().await, members(&["a", "b", "c"]));
    }

    /// With a wider listing, other records do not count as members, and the listing is handed
    /// out once per look (none after a look that could not list).
    #[tokio::test(start_paused = true)]
    async fn a_wider_listing_serves_membership_and_is_taken_once() {
        let store = MemoryStore::new();
        let mut a = member(&store, "a", 4).list_with("x-".to_owned());
        let shard = store.named_lock("x-shard-0", "b");
        shard.create(LeaderRecord::default()).await.unwrap();
        assert_eq!(a.look().await, members(&["a"]));
        let names: Vec<String> = a
            .take_listing()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["x-member-a", "x-shard-0"]);
        assert!(a.take_listing().is_none());
        store.partition("a", true);
        a.look().await;
        assert!(a.take_listing().is_none());
    }

    /// A replica that could never write its record is refused as not renewed, not as one
    /// waiting for a record of its identity left by another process.
    #[tokio::test(start_paused = true)]
    async fn a_replica_that_never_wrote_its_record_is_refused_as_not_renewed() {
        let store = MemoryStore::new();
        let mut a = member(&store, "a", 4);
        store.partition("a", true);
        assert!(matches!(a.look().await, Look::Refused(r) if r.contains("not renewed")));
        store.partition("a", false);
        assert_eq!(a.look().await, members(&["a"]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_resigns_leaves_at_once() {
        let store = MemoryStore::new();
        let (mut a, mut b) = (member(&store, "a", 4), member(&store, "b", 4));
        a.look().await;
        assert_eq!(b.look().await, members(&["a", "b"]));
        a.resign().await;
        assert_eq!(
            store.record_named("x-member-a").unwrap().holder_identity,
            ""
        );
        assert_eq!(b.look().await, members(&["b"]));
        // A member that never announced has nothing to resign.
        let mut never = member(&store, "z", 4);
        never.resign().await;
        assert!(store.record_named("x-member-z").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_renewed_since_it_was_seen_is_not_blanked() {
        let store = MemoryStore::new();
        let (mut a, mut b) = (member(&store, "a", 4), member(&store, "b", 4));
        b.look().await;
        a.look().await;
        let seen = a.seen.get("x-member-b").unwrap().0.clone();
        b.look().await; // renewed: a newer version
        a.blank("x-member-b", &seen).await;
        assert_eq!(
            store.record_named("x-member-b").unwrap().holder_identity,
            "b"
        );
        // Blanking at the version it has does blank, once.
        let now = a.lock.list(PREFIX).await.unwrap();
        let current = now
            .iter()
            .find(|(n, _)| n == "x-member-b")
            .unwrap()
            .1
            .version
            .clone();
        a.blank("x-member-b", &current).await;
        assert_eq!(
            store.record_named("x-member-b").unwrap().holder_identity,
            ""
        );
        let blanked = a.lock.list(PREFIX).await.unwrap();
        let version = blanked
            .iter()
            .find(|(n, _)| n == "x-member-b")
            .unwrap()
            .1
            .version
            .clone();
        a.blank("x-member-b", &version).await;
        // a's one update is the blank (its own record was created): a blank record is left.
        assert_eq!(
            store
                .operations()
                .iter()
                .filter(|(id, op)| id == "a" && *op == "update")
                .count(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_list_the_last_look_holds_for_a_lease_duration() {
        let store = MemoryStore::new();
        let (mut a, mut b) = (member(&store, "a", 4), member(&store, "b", 4));
        b.look().await;
        assert_eq!(a.look().await, members(&["a", "b"]));
        store.partition("a", true);
        advance(Duration::from_secs(10)).await;
        b.look().await;
        // a cannot list or renew: it keeps what it saw change within a lease duration.
        assert_eq!(a.look().await, members(&["a", "b"]));
        advance(Duration::from_secs(5)).await;
        assert!(matches!(a.look().await, Look::Refused(r) if r.contains("not renewed")));
        store.partition("a", false);
        assert_eq!(a.look().await, members(&["a", "b"]));
    }

    #[tokio::test(start_paused = true)]
    async fn another_shard_count_and_a_second_writer_are_refused() {
        let store = MemoryStore::new();
        let (mut a, mut b) = (member(&store, "a", 4), member(&store, "b", 8));
        a.look().await;
        assert!(matches!(b.look().await, Look::Refused(r) if r.contains("4 shards")));
        assert!(matches!(a.look().await, Look::Refused(r) if r.contains("8 shards")));
        // A second process with a's identity: refused, and it never writes, while a1 renews.
        let store = MemoryStore::new();
        let (mut a1, mut a2) = (member(&store, "a", 4), member(&store, "a", 4));
        assert_eq!(a1.look().await, members(&["a"]));
        for _ in 0..20 {
            assert!(matches!(a2.look().await, Look::Refused(r) if r.contains("exists")));
            assert_eq!(a1.look().await, members(&["a"]));
            advance(Duration::from_secs(2)).await;
        }
        // (Had a2 written the record, a1's next renew would have met a conflict and refused.)
        // a1 stops renewing (it died): a2 takes the record once it has not changed for a lease
        // duration since a2 first saw it unchanged.
        drop(a1);
        assert!(matches!(a2.look().await, Look::Refused(_)));
        advance(LEASE - Duration::from_secs(1)).await;
        assert!(matches!(a2.look().await, Look::Refused(_)));
        advance(Duration::from_secs(1)).await;
        assert_eq!(a2.look().await, members(&["a"]));
        // Another process that writes over a record this replica already wrote: refused for
        // two lease durations after the last conflict seen, even alone.
        let store = MemoryStore::new();
        let mut a1 = member(&store, "a", 4);
        assert_eq!(a1.look().await, members(&["a"]));
        let intruder = store.named_lock("x-member-a", "a");
        let mut record = intruder.get().await.unwrap().record;
        record.renew_time = SystemTime::now();
        intruder.update(record).await.unwrap();
        assert!(matches!(a1.look().await, Look::Refused(r) if r.contains("identity")));
        advance(LEASE * 2 - Duration::from_secs(1)).await;
        assert!(matches!(a1.look().await, Look::Refused(_)));
        advance(Duration::from_secs(1)).await;
        assert_eq!(a1.look().await, members(&["a"]));
    }
}
