//! Membership: this replica's member record, renewed every retry period, and the live members
//! read from the others'.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ctrlq_leader::{LeaderRecord, Lock, LockError};
use tokio::time::Instant;
use tracing::{debug, warn};

/// What one look at the members came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// The live members, this replica among them, sorted.
    Members(Vec<String>),
    /// This replica takes no shard, for the reason given.
    Refused(String),
}

/// One replica's membership: its record, and what it observed of the others'.
pub(crate) struct Membership<L> {
    lock: L,
    /// Locks on other members' records, to blank the stale ones.
    locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
    prefix: String,
    identity: String,
    shards: u32,
    lease: Duration,
    /// Each member record's last version and when this replica first saw it, on its own clock.
    seen: HashMap<String, (String, Instant)>,
    /// When this replica's own record was last written, if it has been.
    announced: Option<Instant>,
    /// Until when this replica refuses shards because another process wrote its record (its
    /// identity is used twice): two lease durations after the last such write seen.
    duplicate_until: Option<Instant>,
}

impl<L: Lock> Membership<L> {
    /// `lock` is this replica's member record `{prefix}{identity}`; `locks` makes locks on the
    /// others'.
    pub(crate) fn new(
        lock: L,
        locks: Arc<dyn Fn(&str) -> L + Send + Sync>,
        prefix: String,
        identity: String,
        shards: u32,
        lease: Duration,
    ) -> Self {
        Self {
            lock,
            locks,
            prefix,
            identity,
            shards,
            lease,
            seen: HashMap::new(),
            announced: None,
            duplicate_until: None,
        }
    }

    fn record(&self, holder: &str) -> LeaderRecord {
        let now = SystemTime::now();
        LeaderRecord {
            holder_identity: holder.to_owned(),
            lease_duration_seconds: u32::try_from(self.lease.as_secs()).unwrap_or(u32::MAX),
            acquire_time: now,
            renew_time: now,
            // A member record's transitions carry its replica's shard count.
            leader_transitions: self.shards,
        }
    }

    /// Renews this replica's record, reads the others', and says what it may hold.
    pub(crate) async fn look(&mut self) -> View {
        self.announce().await;
        match self.lock.list(&self.prefix).await {
            Ok(listed) => {
                let (view, stale) = self.view(listed);
                for (name, version) in stale {
                    self.blank(&name, &version).await;
                }
                view
            }
            Err(e) => {
                debug!(error = %e, "listing the members failed");
                self.stale_view()
            }
        }
    }

    /// Writes this replica's record: an update of the version it last wrote, or a create. A
    /// conflict means another writer: another process with this identity.
    async fn announce(&mut self) {
        let sent = Instant::now();
        let record = self.record(&self.identity.clone());
        let written = match self.lock.update(record.clone()).await {
            Err(LockError::NotFound) => self.lock.create(record).await,
            Err(LockError::Conflict) if self.announced.is_none() => {
                // Not written by this replica yet: read the version first (a record left by an
                // earlier run of this identity), then write.
                match self.lock.get().await {
                    Ok(_) => self.lock.update(record).await,
                    Err(LockError::NotFound) => self.lock.create(record).await,
                    Err(e) => Err(e),
                }
            }
            other => other,
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

    /// The view from a fresh list, and the other members' records that went stale: not changed
    /// for a lease duration on this replica's clock.
    fn view(
        &mut self,
        listed: Vec<(String, ctrlq_leader::Versioned)>,
    ) -> (View, Vec<(String, String)>) {
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
            let first_seen = match self.seen.get(&name) {
                Some((version, at)) if *version == v.version => *at,
                _ => {
                    self.seen.insert(name.clone(), (v.version.clone(), now));
                    now
                }
            };
            let resigned = v.record.holder_identity.is_empty();
            if resigned || id == self.identity {
                continue;
            }
            if first_seen + self.lease <= now {
                stale.push((name.clone(), v.version.clone()));
                continue;
            }
            live.insert(id.to_owned());
            counts.insert(v.record.leader_transitions);
        }
        self.seen.retain(|name, _| names.contains(name));
        (self.decide(live, counts), stale)
    }

    /// Blanks the member record `name` if it is still at `version`: a replica that joins later
    /// then does not count the dead member live for a lease duration of its own observation.
    /// A compare-and-set on the version read, so a record renewed meanwhile is kept (and a
    /// member whose record was blanked writes it again at its next renew).
    async fn blank(&self, name: &str, version: &str) {
        let lock = (self.locks)(name);
        match lock.get().await {
            Ok(v) if v.version == version && !v.record.holder_identity.is_empty() => {
                match lock.update(self.record("")).await {
                    Ok(_) => debug!(member = name, "blanked a stale member record"),
                    Err(e) => debug!(member = name, error = %e, "blanking a member record failed"),
                }
            }
            Ok(_) => {}
            Err(e) => debug!(member = name, error = %e, "reading a stale member record failed"),
        }
    }

    /// Without a fresh list: the members whose records this replica last saw change within a
    /// lease duration.
    fn stale_view(&self) -> View {
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
        matches!(self.lock.get().await, Ok(v) if v.record.holder_identity.is_empty())
    }

    fn is_duplicate(&self) -> bool {
        self.duplicate_until.is_some_and(|t| Instant::now() < t)
    }

    fn decide(&self, mut live: BTreeSet<String>, counts: BTreeSet<u32>) -> View {
        if self.is_duplicate() {
            return View::Refused(format!(
                "another process uses the identity {:?}",
                self.identity
            ));
        }
        if let Some(other) = counts.iter().find(|&&n| n != self.shards) {
            return View::Refused(format!(
                "a live member has {other} shards, this replica {}",
                self.shards
            ));
        }
        match self.announced {
            Some(at) if at + self.lease > Instant::now() => {
                live.insert(self.identity.clone());
                View::Members(live.into_iter().collect())
            }
            _ => View::Refused("this replica's member record is not renewed".to_owned()),
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
