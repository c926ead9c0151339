//! When this replica first saw each record at its current version, on its own clock: how it
//! judges that a record's writer is gone (a record unchanged for a lease duration has no live
//! writer), for the member records and the shard leases alike.

use std::collections::{BTreeSet, HashMap};

use ctrlq_leader::{LeaderRecord, Lock};
use tokio::time::Instant;
use tracing::debug;

/// Each record's last version seen and when this replica first saw that version.
#[derive(Debug, Default)]
pub(super) struct Sightings(HashMap<String, (String, Instant)>);

impl Sightings {
    /// When `name` was first seen at `version`: `now` when it is new or its version changed.
    pub(super) fn first_seen(&mut self, name: &str, version: &str, now: Instant) -> Instant {
        match self.0.get(name) {
            Some((seen, at)) if seen == version => *at,
            _ => {
                self.0.insert(name.to_owned(), (version.to_owned(), now));
                now
            }
        }
    }

    /// Forgets the records not in `names` (gone from the store).
    pub(super) fn keep(&mut self, names: &BTreeSet<String>) {
        self.0.retain(|name, _| names.contains(name));
    }

    /// Each record's name, last version and when that version was first seen.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &(String, Instant))> {
        self.0.iter()
    }

    /// `name`'s last version and when it was first seen.
    #[cfg(test)]
    pub(super) fn get(&self, name: &str) -> Option<&(String, Instant)> {
        self.0.get(name)
    }
}

/// Blanks the stale record `name` with the record `blank` makes of it, if it is still at
/// `version` and names a holder: a compare-and-set on the version read, so a record renewed
/// meanwhile is kept. Whether it blanked.
pub(super) async fn blank<L: Lock>(
    lock: &L,
    name: &str,
    version: &str,
    blank: impl FnOnce(&LeaderRecord) -> LeaderRecord,
) -> bool {
    let v = match lock.get().await {
        Ok(v) if v.version == version && !v.record.is_free() => v,
        Ok(_) => return false,
        Err(e) => {
            debug!(record = name, error = %e, "reading a stale record failed");
            return false;
        }
    };
    let blanked = lock.update(blank(&v.record)).await;
    match &blanked {
        Ok(_) => {
            debug!(record = name, holder = %v.record.holder_identity, "blanked a stale record")
        }
        Err(e) => debug!(record = name, error = %e, "blanking a stale record failed"),
    }
    blanked.is_ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_record_is_first_seen_at_each_new_version_and_forgotten_when_gone() {
        let mut s = Sightings::default();
        let t0 = Instant::now();
        assert_eq!(s.first_seen("a", "1", t0), t0);
        let t1 = t0 + Duration::from_secs(1);
        // Unchanged: still the first sighting.
        assert_eq!(s.first_seen("a", "1", t1), t0);
        // A new version is a new sighting.
        assert_eq!(s.first_seen("a", "2", t1), t1);
        assert_eq!(s.first_seen("b", "7", t1), t1);
        // Gone from a listing: forgotten, so seen again it is new.
        s.keep(&BTreeSet::from(["b".to_owned()]));
        assert_eq!(s.iter().count(), 1);
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(s.first_seen("a", "2", t2), t2);
        assert_eq!(s.first_seen("b", "7", t2), t1);
        assert_eq!(s.get("b"), Some(&("7".to_owned(), t1)));
    }
}
