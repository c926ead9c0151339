//! The etcd lock: the record at one key, compare-and-set on the key's mod revision.

use std::time::{Duration, SystemTime};

use etcd_client::{Client, Compare, CompareOp, GetOptions, KeyValue, ResponseHeader, Txn, TxnOp};
use parking_lot::Mutex;

use crate::{DEFAULT_REQUEST_TIMEOUT, LeaderRecord, Lock, LockError, RequestTimedOut, Versioned};

/// A [`Lock`] on an etcd key (v3 API; works with etcd 3.4).
///
/// `create` is a transaction on `create_revision(key) == 0`, `update` one on
/// `mod_revision(key) ==` the revision this lock last saw. The value is a small line format:
/// `leaseDurationSeconds`, `acquireTime` and `renewTime` (Unix nanoseconds), `leaderTransitions`,
/// then the holder identity. Every request is bounded by the
/// [request timeout](Self::request_timeout) (default [`DEFAULT_REQUEST_TIMEOUT`]), so a stopped
/// or unreachable etcd fails requests instead of hanging them.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_leader::{EtcdLock, LeaderElectionConfig, LeaderElector};
/// use tokio_util::sync::CancellationToken;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = etcd_client::Client::connect(["http://127.0.0.1:2379"], None).await?;
/// let lock = EtcdLock::new(client, "/elections/my-controller", "pod-a");
/// let elector = LeaderElector::new(lock, LeaderElectionConfig::default())?;
/// elector.run(CancellationToken::new(), |leadership| async move {
///     leadership.token().cancelled().await;
/// }).await;
/// # Ok(())
/// # }
/// ```
pub struct EtcdLock {
    client: Client,
    key: String,
    identity: String,
    timeout: Duration,
    /// Whether `timeout` was set explicitly (else an elector fits it to its renew deadline).
    timeout_set: bool,
    /// The mod revision this lock last saw; guards `update`.
    last_seen: Mutex<Option<i64>>,
}

impl EtcdLock {
    /// A lock on `key` for the candidate `identity`.
    #[must_use]
    pub fn new(client: Client, key: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            client,
            key: key.into(),
            identity: identity.into(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            timeout_set: false,
            last_seen: Mutex::new(None),
        }
    }

    /// Bounds each request. By default [`DEFAULT_REQUEST_TIMEOUT`], and under an elector
    /// client-go's `max(1 s, renew deadline / 2)`, at most the renew deadline
    /// ([`Lock::fit_request_timeout`]). A bound set here must not exceed the renew deadline
    /// ([`LeaderElector::new`](crate::LeaderElector::new) refuses it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: etcd_client::Client) {
    /// use std::time::Duration;
    /// let lock = ctrlq_leader::EtcdLock::new(client, "/elections/x", "pod-a")
    ///     .request_timeout(Duration::from_secs(2));
    /// # }
    /// ```
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.timeout_set = true;
        self
    }

    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(r) => r.map_err(|e| LockError::Backend(Box::new(e))),
            Err(_) => Err(LockError::Backend(Box::new(RequestTimedOut(self.timeout)))),
        }
    }

    /// Writes `record` if `cmp` holds, else fails with `failed`; returns the new version.
    async fn put_if(
        &self,
        cmp: Compare,
        record: &LeaderRecord,
        failed: LockError,
    ) -> Result<String, LockError> {
        let put = TxnOp::put(self.key.clone(), encode(record), None);
        let txn = Txn::new().when([cmp]).and_then([put]);
        let resp = self.bounded(self.client.clone().txn(txn)).await?;
        let rev = resp.header().map_or(0, ResponseHeader::revision);
        if !resp.succeeded() {
            return Err(failed);
        }
        *self.last_seen.lock() = Some(rev);
        Ok(rev.to_string())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("malformed leader record at the etcd key")]
struct Malformed;

/// The value: the lease duration, the acquire and renew times (Unix nanoseconds; 0 before the
/// epoch), the leader transitions, then the holder identity, one per line.
fn encode(r: &LeaderRecord) -> String {
    let nanos = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    };
    let (acquired, renewed) = (nanos(r.acquire_time), nanos(r.renew_time));
    let (duration, transitions) = (r.lease_duration_seconds, r.leader_transitions);
    let holder = &r.holder_identity;
    format!("{duration}\n{acquired}\n{renewed}\n{transitions}\n{holder}")
}

/// The record at `kv` and its version.
fn versioned(kv: &KeyValue) -> Result<Versioned, LockError> {
    let record = decode(kv.value()).ok_or_else(|| LockError::Backend(Box::new(Malformed)))?;
    let version = kv.mod_revision().to_string();
    Ok(Versioned { record, version })
}

fn decode(v: &[u8]) -> Option<LeaderRecord> {
    let s = std::str::from_utf8(v).ok()?;
    let mut it = s.splitn(5, '\n');
    let time = |x: &str| -> Option<SystemTime> {
        let n: u64 = x.parse().ok()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(n))
    };
    Some(LeaderRecord {
        lease_duration_seconds: it.next()?.parse().ok()?,
        acquire_time: time(it.next()?)?,
        renew_time: time(it.next()?)?,
        leader_transitions: it.next()?.parse().ok()?,
        holder_identity: it.next()?.to_owned(),
    })
}

#[async_trait::async_trait]
impl Lock for EtcdLock {
    async fn get(&self) -> Result<Versioned, LockError> {
        let resp = self
            .bounded(self.client.clone().get(self.key.clone(), None))
            .await?;
        let kv = resp.kvs().first().ok_or(LockError::NotFound)?;
        let versioned = versioned(kv)?;
        *self.last_seen.lock() = Some(kv.mod_revision());
        Ok(versioned)
    }

    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        let cmp = Compare::create_revision(self.key.clone(), CompareOp::Equal, 0);
        self.put_if(cmp, &record, LockError::AlreadyExists).await
    }

    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        let last = self.last_seen.lock().ok_or(LockError::Conflict)?;
        let cmp = Compare::mod_revision(self.key.clone(), CompareOp::Equal, last);
        self.put_if(cmp, &record, LockError::Conflict).await
    }

    /// The etcd revision of the acquiring write: etcd's revision counts every write of the
    /// cluster, is durable and never goes back, so it strictly increases over grants even across
    /// server restarts and a deleted and recreated key.
    fn fencing_token(&self, granted: &Versioned) -> u64 {
        granted
            .version
            .parse()
            .unwrap_or_else(|_| u64::from(granted.record.leader_transitions))
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("etcd:{}", self.key)
    }

    fn request_timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn fit_request_timeout(&mut self, renew_deadline: Duration) {
        if !self.timeout_set {
            self.timeout = crate::error::fitted_request_timeout(renew_deadline);
        }
    }

    /// One prefix range read: the keys starting with `prefix` (full keys), in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, LockError> {
        let options = GetOptions::new().with_prefix();
        let mut client = self.client.clone();
        let resp = self.bounded(client.get(prefix, Some(options))).await?;
        let named = |kv: &KeyValue| Ok((String::from_utf8_lossy(kv.key()).into(), versioned(kv)?));
        resp.kvs().iter().map(named).collect()
    }
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("key", &self.key)
            .field("identity", &self.identity)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_should_round_trip_through_the_value_format() {
        let r = LeaderRecord {
            holder_identity: "a\nb".into(),
            lease_duration_seconds: 15,
            acquire_time: SystemTime::UNIX_EPOCH + Duration::from_nanos(5),
            renew_time: SystemTime::UNIX_EPOCH + Duration::from_secs(7),
            leader_transitions: 3,
        };
        assert_eq!(decode(encode(&r).as_bytes()), Some(r));
        assert_eq!(decode(b"x"), None);
    }
}
