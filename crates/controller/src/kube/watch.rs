//! [`Watch`]: one kube-runtime watch of a resource, shared by a reflector store and every key
//! source built on it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::kube::Resource;
use ::kube::api::Api;
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::reflector::store::Writer;
use ::kube::runtime::reflector::{ObjectRef, Store};
use ::kube::runtime::watcher::{self, Event};
use futures::future::BoxFuture;
use futures::stream::{AbortHandle as StreamAbort, BoxStream, SelectAll};
use futures::{FutureExt, Stream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::NotSynced;
use crate::priority::{LOW, NORMAL, Queued};
use crate::shard::{ShardFollower, ShardSelector, field_hash, shard_of_hash};

/// One watch of a resource, shared by its [reflector store](Store) and every key source made
/// from it ([`keys`](Self::keys), [`owners`](Self::owners), [`mapped`](Self::mapped),
/// [`resync`](Self::resync)).
///
/// - **A key follows the store**: each event is applied to the store first, and only then
///   turned into keys, so a reconcile started from a key finds in the store the version that
///   triggered it, or a later one. There is no second watch whose store could lag behind.
/// - **One watch for the run**: it starts at the first subscription (or
///   [`synced`](Self::synced)) and runs until the last clone of the `Watch` is dropped, however
///   often the controller subscribes its sources again (each term of a cold standby, a source
///   resubscribed after a failure). A new subscription starts with a key for every object in
///   the store and every [deleted](Object::Deleted) object still remembered, then follows the
///   watch: no second list, and no key missed between the two.
/// - **Deletions are never lost**: an object deleted while the watch was down is missing from
///   the relist that follows; its key is yielded, and [`get`](Self::get) answers
///   [`Object::Deleted`] with the object as the store last held it (client-go's
///   `DeletedFinalStateUnknown`). Deleted objects are remembered for
///   [`deleted_retention`](Self::deleted_retention) (5 minutes by default).
/// - **Failures are visible**: each watcher error is yielded by every source of the watch as an
///   `Err` item (so [`Controller::try_source`](crate::Controller::try_source) counts and reports
///   it), counted in [`status`](Self::status), and a watch failing for longer than a bound fails
///   [`check`](Self::check).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use ctrlq_controller::kube::{Object, Watch};
/// use ctrlq_controller::{Action, Context, Controller};
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use kube::runtime::reflector::ObjectRef;
/// use kube::runtime::watcher;
/// use kube::{Api, Client};
/// use tokio_util::sync::CancellationToken;
///
/// # async fn run(client: Client) {
/// let deployments = Watch::new(Api::<Deployment>::all(client.clone()), watcher::Config::default());
/// let replica_sets = Watch::new(Api::<ReplicaSet>::all(client), watcher::Config::default());
///
/// let reader = deployments.clone();
/// let reconcile = move |key: ObjectRef<Deployment>, _ctx: Context| {
///     let object = reader.get(&key);
///     async move {
///         match object {
///             Object::Present(deployment) => { let _ = deployment; /* act on it */ }
///             Object::Deleted(last) => { let _ = last; /* clean up after it */ }
///         }
///         Ok::<_, kube::Error>(Action::requeue_after(Duration::from_secs(300)))
///     }
/// };
/// let summary = Controller::new("deployments", reconcile)
///     .try_source(deployments.keys())
///     .try_source(replica_sets.owners::<Deployment>())
///     .try_source(deployments.resync(Duration::from_secs(600)))
///     .workers(4)
///     .run(CancellationToken::new())
///     .await;
/// # let _ = summary;
/// # }
/// ```
pub struct Watch<K: Watched> {
    shared: Arc<Shared<K>>,
    /// What a change must alter for the sources of this handle to yield its key.
    predicate: Option<Predicate<K>>,
}

type Predicate<K> = Arc<dyn Fn(&K) -> Option<u64> + Send + Sync>;

/// The resources a [`Watch`] serves: kube-rs's static types (k8s-openapi's types and
/// `#[derive(CustomResource)]` types, whose `DynamicType` is `()`).
pub trait Watched: Resource<DynamicType = ()> + Clone + fmt::Debug + Send + Sync + 'static {}

impl<K: Resource<DynamicType = ()> + Clone + fmt::Debug + Send + Sync + 'static> Watched for K {}

/// What every clone of a [`Watch`] shares.
struct Shared<K: Watched> {
    store: Store<K>,
    kind: String,
    state: Arc<Mutex<State<K>>>,
    status: watch::Sender<WatchStatus>,
    /// What the watch task reads and the store's writer, until the watch starts.
    pending: Mutex<Option<(Input<K>, Writer<K>)>>,
    /// The watch task, once started.
    task: Mutex<Option<AbortHandle>>,
    /// Which objects the watch keeps.
    filter: Filter,
    /// How a watch of the held shards is told its shards ([`Watch::follow_events`]).
    follow: Option<Follow>,
}

/// The watch's event stream, errors boxed.
pub(super) type Events<K> = BoxStream<'static, Result<Event<K>, BoxError>>;
pub(super) type BoxError = Box<dyn StdError + Send + Sync>;

/// Makes the event stream of one shard.
pub(super) type MakeEvents<K> = Box<dyn Fn(u32) -> Events<K> + Send + Sync>;

/// What the watch task reads: one event stream, or one per held shard.
enum Input<K: Watched> {
    Events(Events<K>),
    Follow {
        make: MakeEvents<K>,
        commands: mpsc::UnboundedReceiver<Command>,
    },
}

/// Which objects a watch keeps; an object another filter drops is counted in
/// [`WatchStatus::outside_shards`].
#[derive(Clone)]
enum Filter {
    All,
    /// The objects a shard selector selects ([`Watch::sharded`]).
    Selector(ShardSelector),
    /// Each shard's stream, the objects whose namespace is in that shard of `shards`.
    Namespaces {
        shards: u32,
    },
}

/// A shard gained (with its incarnation) or lost, as the runner tells the watch task.
#[derive(Debug, Clone, Copy)]
enum Command {
    Gain(u32, u64),
    Lose(u32),
}

/// A watch of the held shards: the commands to its task, and what each shard has listed.
struct Follow {
    commands: mpsc::UnboundedSender<Command>,
    /// The next incarnation to give out: each gain of a shard is a new one.
    incarnations: AtomicU64,
    /// Each shard whose stream has listed since its gain: its incarnation, and whether the
    /// list held objects of other shards (the server did not filter).
    listed: watch::Sender<HashMap<u32, (u64, bool)>>,
}

/// What the watch task and the subscriptions share, under one lock: applying an event to the
/// store and sending its keys happen under it, and so does a new subscription's snapshot, so a
/// subscriber sees every change exactly from where its snapshot stands.
struct State<K: Watched> {
    subscribers: Vec<mpsc::UnboundedSender<Change<K>>>,
    /// Whether the store holds a complete list (the first `InitDone` came; from the start for
    /// a watch of the held shards, whose terms wait for their own shard's list).
    synced: bool,
    /// The keys listed since the last `Init` of each part (shard; 0 for one stream), while a
    /// list is under way.
    listing: HashMap<u32, HashSet<ObjectRef<K>>>,
    /// Deleted objects as last held, with when they are forgotten.
    deleted: HashMap<ObjectRef<K>, (Arc<K>, Instant)>,
    /// The forget times in order (an entry is stale when the key was deleted again or applied).
    expiries: VecDeque<(Instant, ObjectRef<K>)>,
    retention: Duration,
    ended: bool,
}

/// What a subscription receives: an object whose key to yield (applied or listed, or deleted)
/// with the priority to queue it at ([`LOW`] from a listing, [`NORMAL`] from a live event), or
/// a watcher error.
enum Change<K> {
    Present(Arc<K>, i32),
    Deleted(Arc<K>, i32),
    Error(WatchError),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Present(o, p) => Self::Present(o.clone(), *p),
            Self::Deleted(o, p) => Self::Deleted(o.clone(), *p),
            Self::Error(e) => Self::Error(e.clone()),
        }
    }
}

/// How long a deleted object's last state is kept for [`Watch::get`] by default: 5 minutes,
/// client-go's default unschedulable and resync scale, ample for a reconcile queued behind a
/// backlog.
pub const DEFAULT_DELETED_RETENTION: Duration = Duration::from_secs(300);

/// An object as a [`Watch`] holds it: present in the store, or deleted with the state the
/// store last held (`None` once forgotten after
/// [`deleted_retention`](Watch::deleted_retention), or for a key the watch never saw).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use ctrlq_controller::kube::Object;
/// use k8s_openapi::api::core::v1::Pod;
/// let gone: Object<Pod> = Object::Deleted(Some(Arc::new(Pod::default())));
/// assert!(gone.present().is_none() && gone.last_known().is_some());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Object<K> {
    /// In the store: the latest version the watch delivered.
    Present(Arc<K>),
    /// Not in the store: deleted (or never seen), with its last known state when remembered.
    Deleted(Option<Arc<K>>),
}

impl<K> Object<K> {
    /// The object when present.
    #[must_use]
    pub fn present(&self) -> Option<&Arc<K>> {
        match self {
            Self::Present(o) => Some(o),
            Self::Deleted(_) => None,
        }
    }

    /// The object when present, else its last known state when remembered.
    #[must_use]
    pub fn last_known(&self) -> Option<&Arc<K>> {
        match self {
            Self::Present(o) | Self::Deleted(Some(o)) => Some(o),
            Self::Deleted(None) => None,
        }
    }
}

/// A watcher error, as every source of a [`Watch`] yields it: the resource's kind and the
/// error.
///
/// # Examples
///
/// ```
/// let e = ctrlq_controller::kube::WatchError::new("ConfigMap", std::io::Error::other("403"));
/// assert_eq!(e.to_string(), "watch of ConfigMap failed: 403");
/// ```
#[derive(Debug, Clone)]
pub struct WatchError {
    kind: Arc<str>,
    error: Arc<dyn StdError + Send + Sync>,
}

impl WatchError {
    /// An error of the watch of `kind`.
    pub fn new(kind: &str, error: impl StdError + Send + Sync + 'static) -> Self {
        Self::boxed(kind, Box::new(error))
    }

    fn boxed(kind: &str, error: BoxError) -> Self {
        Self {
            kind: kind.into(),
            error: Arc::from(error),
        }
    }

    /// The watched resource's kind.
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "watch of {} failed: {}", self.kind, self.error)
    }
}

impl StdError for WatchError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.error)
    }
}

/// What a [`Watch`] has seen, as [`Watch::status`] and [`Watch::subscribe_status`] publish it.
///
/// # Examples
///
/// ```
/// let status = ctrlq_controller::kube::WatchStatus::default();
/// assert!(!status.synced && status.failing_since.is_none());
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WatchStatus {
    /// Whether the store holds a complete list (set by the first list's end, kept after).
    pub synced: bool,
    /// Lists completed (the first and every relist after a watch restarted).
    pub lists: u64,
    /// Watcher errors, in all.
    pub errors: u64,
    /// When the current run of errors began: set by an error, cleared by the next event that
    /// shows the API server answered (an object, or a list's end).
    pub failing_since: Option<Instant>,
    /// The last watcher error, kept after recovery.
    pub last_error: Option<WatchError>,
    /// Objects a [sharded](Watch::sharded) watch received outside its shards and dropped: 0
    /// while the API server filters by the shard selector, growing when it ignores it.
    pub outside_shards: u64,
}

/// [`Watch::check`] failed: the watch has failed without a successful event for longer than
/// the bound.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the watch of {kind} has failed for {failing_for:?}: {last_error}")]
pub struct WatchUnhealthy {
    /// The watched resource's kind.
    pub kind: String,
    /// How long the errors have lasted.
    pub failing_for: Duration,
    /// The last error.
    pub last_error: WatchError,
}

// ===== impl Watch =====

impl<K: Watched> Watch<K> {
    /// A watch of `api` with `config` (kube-runtime's [`watcher`](watcher::watcher()) with its default
    /// backoff, so it retries forever and reports each failure). Nothing is sent to the API
    /// server until the first subscription.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: kube::Client) {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let cms = ctrlq_controller::kube::Watch::new(
    ///     kube::Api::<ConfigMap>::namespaced(client, "default"),
    ///     kube::runtime::watcher::Config::default().labels("app=web"),
    /// );
    /// # let _ = cms;
    /// # }
    /// ```
    pub fn new(api: Api<K>, config: watcher::Config) -> Self
    where
        K: k8s_openapi::serde::de::DeserializeOwned,
    {
        Self::from_events(watcher::watcher(api, config).default_backoff())
    }

    /// A watch over any stream of watcher events (a [`watcher`](watcher::watcher()) with settings of
    /// your own, or a recorded stream in tests). The stream is polled from the first
    /// subscription on; when it ends, every source of the watch ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::kube::Watch;
    /// use futures::StreamExt;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube::runtime::reflector::ObjectRef;
    /// use kube::runtime::watcher::Event;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut pod = Pod::default();
    /// pod.metadata.name = Some("web".into());
    /// let events = [Event::Init, Event::InitApply(pod), Event::InitDone];
    /// let pods = Watch::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// let keys: Vec<_> = (pods.keys())().map(|q| q.unwrap().key).collect().await;
    /// assert_eq!(keys, [ObjectRef::<Pod>::new("web")]);
    /// assert!(pods.get(&keys[0]).present().is_some());
    /// # }
    /// ```
    pub fn from_events<S, E>(events: S) -> Self
    where
        S: Stream<Item = Result<Event<K>, E>> + Send + 'static,
        E: StdError + Send + Sync + 'static,
    {
        let events = events
            .map(|e| e.map_err(|e| Box::new(e) as BoxError))
            .boxed();
        Self::with_input(Input::Events(events), Filter::All, None)
    }

    /// As [`from_events`](Self::from_events), keeping only the objects `shards` selects.
    pub(super) fn with_shards(events: Events<K>, shards: ShardSelector) -> Self {
        Self::with_input(Input::Events(events), Filter::Selector(shards), None)
    }

    /// A watch of the shards `sharding`'s replica leads, `make` giving the event stream of one
    /// shard: the stream of the objects whose namespace is in that shard (the watch checks
    /// each object again, and drops and counts in
    /// [`WatchStatus::outside_shards`] the others). [`Watch::for_shards`] is this with a
    /// watcher per shard that the API server filters.
    ///
    /// While the replica leads no shard, the watch holds nothing. When it wins a shard's
    /// lease, the watch subscribes the shard's stream, and the shard's term reconciles nothing
    /// until that stream has listed; when the shard's term ends, the stream is dropped and the
    /// store forgets the shard's objects (without yielding their keys: they were not deleted).
    /// The other shards' streams run on, with no relist. A key yielded from a shard's list
    /// comes at [`LOW`] priority, as any listing's.
    ///
    /// # Errors
    ///
    /// [`ShardingError::NotByNamespace`](crate::shard::ShardingError::NotByNamespace) unless
    /// `sharding` routes keys by namespace ([`Sharding::by_namespace`](crate::shard::Sharding::by_namespace)),
    /// as this watch divides objects.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::kube::Watch;
    /// use ctrlq_controller::shard::Sharding;
    /// use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::watcher::Event;
    ///
    /// let store = MemoryStore::new();
    /// let sharding = Sharding::new(4, "replica-a", move |name: &str| store.named_lock(name, "replica-a"),
    ///     LeaderElectionConfig::default()).unwrap().by_namespace();
    /// // Each shard's stream: here a recorded one, listing nothing.
    /// let configmaps = Watch::<ConfigMap>::follow_events(&sharding, |_shard| {
    ///     futures::stream::iter([Event::Init, Event::InitDone].map(Ok::<_, std::io::Error>))
    /// })
    /// .unwrap();
    /// assert!(configmaps.store().is_empty());
    /// ```
    pub fn follow_events<L, F, S, E>(
        sharding: &crate::shard::Sharding<L>,
        make: F,
    ) -> Result<Self, crate::shard::ShardingError>
    where
        F: Fn(u32) -> S + Send + Sync + 'static,
        S: Stream<Item = Result<Event<K>, E>> + Send + 'static,
        E: StdError + Send + Sync + 'static,
    {
        Self::follow_boxed(
            sharding,
            Box::new(move |shard| {
                make(shard)
                    .map(|e| e.map_err(|e| Box::new(e) as BoxError))
                    .boxed()
            }),
        )
    }

    /// [`follow_events`](Self::follow_events) over streams made boxed.
    pub(super) fn follow_boxed<L>(
        sharding: &crate::shard::Sharding<L>,
        make: MakeEvents<K>,
    ) -> Result<Self, crate::shard::ShardingError> {
        if !sharding.by_namespace {
            return Err(crate::shard::ShardingError::NotByNamespace);
        }
        let (commands, receiver) = mpsc::unbounded_channel();
        let follow = Follow {
            commands,
            incarnations: AtomicU64::new(0),
            listed: watch::Sender::new(HashMap::new()),
        };
        let input = Input::Follow {
            make,
            commands: receiver,
        };
        let filter = Filter::Namespaces {
            shards: sharding.shards,
        };
        let watch = Self::with_input(input, filter, Some(follow));
        // Nothing to list until a shard is held: complete as it is.
        watch.shared.state.lock().synced = true;
        watch.shared.status.send_modify(|s| s.synced = true);
        let follower = Arc::downgrade(&watch.shared);
        let follower: std::sync::Weak<dyn ShardFollower> = follower;
        sharding.follow(follower);
        Ok(watch)
    }

    fn with_input(input: Input<K>, filter: Filter, follow: Option<Follow>) -> Self {
        let writer = Writer::<K>::default();
        Self {
            shared: Arc::new(Shared {
                store: writer.as_reader(),
                kind: K::kind(&()).into_owned(),
                state: Arc::new(Mutex::new(State {
                    subscribers: Vec::new(),
                    synced: false,
                    listing: HashMap::new(),
                    deleted: HashMap::new(),
                    expiries: VecDeque::new(),
                    retention: DEFAULT_DELETED_RETENTION,
                    ended: false,
                })),
                status: watch::Sender::new(WatchStatus::default()),
                pending: Mutex::new(Some((input, writer))),
                task: Mutex::new(None),
                filter,
                follow,
            }),
            predicate: None,
        }
    }

    /// Sets how long a deleted object's last state is kept for [`get`](Self::get) (default
    /// [`DEFAULT_DELETED_RETENTION`]); its key is yielded at once either way.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// let pods = ctrlq_controller::kube::Watch::<Pod>::from_events(futures::stream::empty::<Result<_, std::io::Error>>())
    ///     .deleted_retention(Duration::from_secs(3600));
    /// # let _ = pods;
    /// ```
    #[must_use]
    pub fn deleted_retention(self, retention: Duration) -> Self {
        self.shared.state.lock().retention = retention;
        self
    }

    /// A handle on the same watch whose sources yield a present object's key only when
    /// `predicate`'s value for it differs from the value its key last passed with (per
    /// subscription; an object for which it gives `None` always passes, and so does every
    /// deletion), as kube-runtime's `predicate_filter` and controller-runtime's predicates. With
    /// [`predicates::generation`](super::predicates::generation), the controller's own status
    /// writes (which leave `metadata.generation` as it is) do not trigger another reconcile.
    /// The store, [`get`](Self::get) and the other handles see every change.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::kube::{Watch, predicates};
    /// use futures::StreamExt;
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use kube::runtime::watcher::Event;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut d = Deployment::default();
    /// d.metadata.name = Some("web".into());
    /// d.metadata.generation = Some(1);
    /// let mut status_written = d.clone();
    /// status_written.metadata.resource_version = Some("2".into());
    /// let events = [Event::Init, Event::InitApply(d), Event::InitDone, Event::Apply(status_written)];
    /// let deployments = Watch::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// let specs = deployments.with_predicate(predicates::generation);
    /// let keys: Vec<_> = (specs.keys())().collect().await;
    /// assert_eq!(keys.len(), 1, "the status write yields no key");
    /// # }
    /// ```
    #[must_use]
    pub fn with_predicate(
        &self,
        predicate: impl Fn(&K) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        Self {
            shared: self.shared.clone(),
            predicate: Some(Arc::new(predicate)),
        }
    }

    /// The reflector store this watch keeps: every object of the last list and every change
    /// since, applied before any key for it is yielded.
    #[must_use]
    pub fn store(&self) -> Store<K> {
        self.shared.store.clone()
    }

    /// The object behind `key`: present with its latest version, or deleted with the state the
    /// store last held while that is remembered.
    #[must_use]
    pub fn get(&self, key: &ObjectRef<K>) -> Object<K> {
        if let Some(o) = self.shared.store.get(key) {
            return Object::Present(o);
        }
        let mut state = self.shared.state.lock();
        state.expire(Instant::now());
        Object::Deleted(state.deleted.get(key).map(|(o, _)| o.clone()))
    }

    /// A source of the keys of this watch's objects, for
    /// [`Controller::try_source`](crate::Controller::try_source): one per applied, listed or
    /// deleted object (an object missing from a relist counts as deleted), each after the store
    /// holds the change; watcher errors as `Err` items. Each key comes with its priority
    /// ([`crate::priority`]): [`LOW`] from a listing (the initial list, a relist, the snapshot
    /// a new subscription starts with), [`NORMAL`] from a live event.
    ///
    /// # Examples
    ///
    /// See [`Watch`].
    pub fn keys(
        &self,
    ) -> impl FnMut() -> BoxStream<'static, Result<Queued<ObjectRef<K>>, WatchError>> + Send + 'static
    {
        self.mapped(|o: &K| [ObjectRef::from_obj(o)])
    }

    /// A source of the keys of the owners of kind `Owner` of this watch's objects, through
    /// their owner references (the object's namespace, the reference's name; references to
    /// other kinds skipped), for a controller of `Owner` that watches what it owns.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::kube::Watch;
    /// use ctrlq_controller::priority::Queued;
    /// use futures::StreamExt;
    /// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    /// use kube::runtime::reflector::ObjectRef;
    /// use kube::runtime::watcher::Event;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut rs = ReplicaSet::default();
    /// rs.metadata.name = Some("web-5d9c".into());
    /// rs.metadata.namespace = Some("prod".into());
    /// rs.metadata.owner_references = Some(vec![OwnerReference {
    ///     api_version: "apps/v1".into(),
    ///     kind: "Deployment".into(),
    ///     name: "web".into(),
    ///     uid: "1".into(),
    ///     ..OwnerReference::default()
    /// }]);
    /// let events = [Event::Init, Event::InitApply(rs), Event::InitDone];
    /// let replica_sets = Watch::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// let keys: Vec<_> = (replica_sets.owners::<Deployment>())().map(Result::unwrap).collect().await;
    /// // Listed: at the low priority.
    /// assert_eq!(keys, [Queued::low(ObjectRef::<Deployment>::new("web").within("prod"))]);
    /// # }
    /// ```
    pub fn owners<Owner>(
        &self,
    ) -> impl FnMut() -> BoxStream<'static, Result<Queued<ObjectRef<Owner>>, WatchError>> + Send + 'static
    where
        Owner: Resource<DynamicType = ()> + Send + Sync + 'static,
    {
        self.mapped(|child: &K| {
            let ns = child.meta().namespace.as_deref();
            child
                .meta()
                .owner_references
                .iter()
                .flatten()
                .filter_map(|o| ObjectRef::from_owner_ref(ns, o, ()))
                .collect::<Vec<_>>()
        })
    }

    /// A source of the keys `map` gives for each of this watch's objects (applied, listed or
    /// deleted), for a controller whose objects depend on this resource (for example the
    /// objects that reference a changed `ConfigMap`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::kube::Watch;
    /// use futures::StreamExt;
    /// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    /// use kube::runtime::reflector::ObjectRef;
    /// use kube::runtime::watcher::Event;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("web-config".into());
    /// let events = [Event::Init, Event::InitApply(cm), Event::InitDone];
    /// let config_maps = Watch::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// // By convention here, `<name>-config` configures pod `<name>`.
    /// let keys: Vec<ObjectRef<Pod>> = (config_maps.mapped(|cm: &ConfigMap| {
    ///     let name = cm.metadata.name.as_deref().unwrap_or_default();
    ///     name.strip_suffix("-config").map(ObjectRef::new)
    /// }))()
    /// .map(|q| q.unwrap().key)
    /// .collect()
    /// .await;
    /// assert_eq!(keys, [ObjectRef::new("web")]);
    /// # }
    /// ```
    pub fn mapped<T, F, I>(
        &self,
        map: F,
    ) -> impl FnMut() -> BoxStream<'static, Result<Queued<T>, WatchError>> + Send + 'static
    where
        T: Send + 'static,
        F: Fn(&K) -> I + Send + Sync + 'static,
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
    {
        let (watch, map) = (self.clone(), Arc::new(map));
        move || {
            let map = map.clone();
            let mut passed = Passed::new(watch.predicate.clone());
            watch
                .subscribe()
                .filter_map(move |change| std::future::ready(passed.pass(change)))
                .flat_map(move |change| match change {
                    Ok((o, priority)) => futures::stream::iter(map(&o))
                        .map(move |key| Ok(Queued::new(key, priority)))
                        .left_stream(),
                    Err(e) => futures::stream::iter([Err(e)]).right_stream(),
                })
                .boxed()
        }
    }

    /// A source of every key in the store, every `period` (the first time one period after
    /// the subscription): controller-runtime's periodic resync. Subscribing it starts the
    /// watch too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_controller::kube::Watch;
    /// use futures::StreamExt;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube::runtime::reflector::ObjectRef;
    /// use kube::runtime::watcher::Event;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut pod = Pod::default();
    /// pod.metadata.name = Some("web".into());
    /// let events = [Event::Init, Event::InitApply(pod), Event::InitDone];
    /// let pods = Watch::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// pods.synced(Duration::from_secs(1)).await.unwrap();
    /// let start = tokio::time::Instant::now();
    /// let keys: Vec<_> = (pods.resync(Duration::from_secs(60)))().take(2).collect().await;
    /// assert_eq!(keys.len(), 2);
    /// assert_eq!(start.elapsed(), Duration::from_secs(120));
    /// # }
    /// ```
    pub fn resync(
        &self,
        period: Duration,
    ) -> impl FnMut() -> BoxStream<'static, Result<Queued<ObjectRef<K>>, WatchError>> + Send + 'static
    {
        let watch = self.clone();
        move || {
            // Its keys come from the store, which the watch fills: started by the first
            // subscription of any of its sources.
            watch.shared.start();
            let store = watch.store();
            let start = tokio::time::Instant::now() + period;
            let ticks = tokio::time::interval_at(start, period.max(Duration::from_millis(1)));
            futures::stream::unfold(ticks, |mut ticks| async move {
                ticks.tick().await;
                Some(((), ticks))
            })
            .flat_map(move |()| {
                let keys: Vec<_> = store
                    .state()
                    .iter()
                    .map(|o| Ok(Queued::low(ObjectRef::from_obj(&**o))))
                    .collect();
                debug!(keys = keys.len(), "resync");
                futures::stream::iter(keys)
            })
            .boxed()
        }
    }

    /// Waits until the store holds a complete list (starting the watch if no source has yet),
    /// at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`NotSynced`] when `timeout` passes first.
    ///
    /// # Examples
    ///
    /// See [`resync`](Self::resync).
    pub async fn synced(&self, timeout: Duration) -> Result<(), NotSynced> {
        let mut status = self.shared.status.subscribe();
        self.shared.start();
        match tokio::time::timeout(timeout, status.wait_for(|s| s.synced)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(NotSynced {
                name: format!("the watch of {}", self.shared.kind),
                timeout,
                last_error: self.status().last_error.map(|e| e.error.to_string()),
            }),
        }
    }

    /// What the watch has seen so far.
    #[must_use]
    pub fn status(&self) -> WatchStatus {
        self.shared.status.borrow().clone()
    }

    /// A watch of [`status`](Self::status), changed at each list, error and recovery.
    #[must_use]
    pub fn subscribe_status(&self) -> watch::Receiver<WatchStatus> {
        self.shared.status.subscribe()
    }

    /// A health check: fails when the watch has yielded only errors for longer than `bound`
    /// (since its first error with no successful event after it). kube-runtime's default
    /// backoff retries a failing watch within 800 ms at first and every 30 s at most, so a
    /// bound of a minute or more fails only a watch that keeps failing.
    ///
    /// # Errors
    ///
    /// [`WatchUnhealthy`] with how long it has failed and the last error.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use k8s_openapi::api::core::v1::Pod;
    /// let pods = ctrlq_controller::kube::Watch::<Pod>::from_events(futures::stream::empty::<Result<_, std::io::Error>>());
    /// assert!(pods.check(Duration::from_secs(60)).is_ok());
    /// ```
    pub fn check(&self, bound: Duration) -> Result<(), WatchUnhealthy> {
        let status = self.shared.status.borrow();
        match (&status.failing_since, &status.last_error) {
            (Some(since), Some(e)) if since.elapsed() > bound => Err(WatchUnhealthy {
                kind: self.shared.kind.clone(),
                failing_for: since.elapsed(),
                last_error: e.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// A new subscription: a change for every object in the store and every remembered deleted
    /// one, then every change the watch makes after.
    fn subscribe(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let (tx, mut rx) = mpsc::unbounded_channel();
        {
            let mut state = self.shared.state.lock();
            state.expire(Instant::now());
            if state.synced {
                for o in self.shared.store.state() {
                    let _ = tx.send(Change::Present(o, LOW));
                }
                for (o, _) in state.deleted.values() {
                    let _ = tx.send(Change::Deleted(o.clone(), LOW));
                }
            }
            // A watch that ended sends nothing more: the sender is dropped, the stream ends.
            if !state.ended {
                state.subscribers.push(tx);
            }
        }
        self.shared.start();
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}

impl<K: Watched> Shared<K> {
    /// Starts the watch task, once.
    fn start(&self) {
        let Some((input, writer)) = self.pending.lock().take() else {
            return;
        };
        let task = Task {
            writer,
            store: self.store.clone(),
            kind: self.kind.clone(),
            state: self.state.clone(),
            status: self.status.clone(),
            filter: self.filter.clone(),
            listed: self.follow.as_ref().map(|f| f.listed.clone()),
            unfiltered: HashSet::new(),
        };
        let task = tokio::spawn(task.run(input));
        *self.task.lock() = Some(task.abort_handle());
    }
}

impl<K: Watched> ShardFollower for Shared<K> {
    fn gain(&self, shard: u32) -> BoxFuture<'static, bool> {
        let Some(follow) = &self.follow else {
            return futures::future::ready(false).boxed();
        };
        // A new one at each gain: the stream of an earlier gain of the shard is told apart.
        let incarnation = follow.incarnations.fetch_add(1, Ordering::Relaxed);
        let mut listed = follow.listed.subscribe();
        // The task outlives every command it is sent while the watch is alive.
        let _ = follow.commands.send(Command::Gain(shard, incarnation));
        self.start();
        async move {
            let wait = listed.wait_for(|l| l.get(&shard).is_some_and(|(i, _)| *i == incarnation));
            let unfiltered = match wait.await {
                Ok(l) => l.get(&shard).map(|(_, unfiltered)| *unfiltered),
                Err(_) => None,
            };
            match unfiltered {
                Some(unfiltered) => unfiltered,
                // The watch is gone: nothing will list the shard.
                None => std::future::pending().await,
            }
        }
        .boxed()
    }

    fn lose(&self, shard: u32) {
        if let Some(follow) = &self.follow {
            let _ = follow.commands.send(Command::Lose(shard));
        }
    }
}

impl<K: Watched> Clone for Watch<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            predicate: self.predicate.clone(),
        }
    }
}

/// One subscription's filter by its handle's predicate: the value each key last passed with.
struct Passed<K: Watched> {
    predicate: Option<Predicate<K>>,
    last: HashMap<ObjectRef<K>, u64>,
}

impl<K: Watched> Passed<K> {
    fn new(predicate: Option<Predicate<K>>) -> Self {
        Self {
            predicate,
            last: HashMap::new(),
        }
    }

    /// The object of `change` if its key is to be yielded, or its error: a present object
    /// passes when the predicate has no value for it or a value other than the last one
    /// passed for its key; a deleted one always does.
    fn pass(&mut self, change: Change<K>) -> Option<Result<(Arc<K>, i32), WatchError>> {
        let Some(predicate) = &self.predicate else {
            return Some(match change {
                Change::Present(o, p) | Change::Deleted(o, p) => Ok((o, p)),
                Change::Error(e) => Err(e),
            });
        };
        match change {
            Change::Present(o, p) => {
                let Some(value) = predicate(&o) else {
                    return Some(Ok((o, p)));
                };
                let changed = self.last.insert(ObjectRef::from_obj(&*o), value) != Some(value);
                changed.then_some(Ok((o, p)))
            }
            Change::Deleted(o, p) => {
                self.last.remove(&ObjectRef::from_obj(&*o));
                Some(Ok((o, p)))
            }
            Change::Error(e) => Some(Err(e)),
        }
    }
}

impl<K: Watched> fmt::Debug for Watch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.shared.status.borrow();
        f.debug_struct("Watch")
            .field("kind", &self.shared.kind)
            .field("synced", &status.synced)
            .field("errors", &status.errors)
            .finish_non_exhaustive()
    }
}

impl<K: Watched> Drop for Shared<K> {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

// ===== the watch task =====

/// The task that polls the events, applies each to the store and sends its keys.
struct Task<K: Watched> {
    writer: Writer<K>,
    store: Store<K>,
    kind: String,
    state: Arc<Mutex<State<K>>>,
    status: watch::Sender<WatchStatus>,
    filter: Filter,
    /// A watch of the held shards: the incarnation each shard has listed.
    listed: Option<watch::Sender<HashMap<u32, (u64, bool)>>>,
    /// The shards whose current list brought objects of other shards.
    unfiltered: HashSet<u32>,
}

/// One event of a shard's stream (0 for a watch of one stream), with the incarnation of the
/// shard's gain that made the stream.
type Tagged<K> = (u32, u64, Result<Event<K>, BoxError>);

impl<K: Watched> Task<K> {
    async fn run(mut self, input: Input<K>) {
        match input {
            Input::Events(mut events) => {
                while let Some(event) = events.next().await {
                    self.handle(0, 0, event);
                }
            }
            Input::Follow { make, commands } => self.follow(&make, commands).await,
        }
        debug!(kind = %self.kind, "the watch's event stream ended");
        let mut state = self.state.lock();
        state.ended = true;
        state.subscribers.clear();
    }

    /// Runs one stream per held shard, as the runner gains and loses them.
    async fn follow(
        &mut self,
        make: &MakeEvents<K>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        let mut streams: SelectAll<BoxStream<'static, Tagged<K>>> = SelectAll::new();
        // Each running shard's incarnation and the handle that ends its stream.
        let mut running: HashMap<u32, (u64, StreamAbort)> = HashMap::new();
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(Command::Gain(shard, incarnation)) => {
                        if let Some((_, stream)) = running.remove(&shard) {
                            stream.abort();
                            self.forget(shard);
                        }
                        let (events, stream) = futures::stream::abortable(make(shard));
                        streams.push(events.map(move |e| (shard, incarnation, e)).boxed());
                        running.insert(shard, (incarnation, stream));
                        debug!(kind = %self.kind, shard, "watching a shard");
                    }
                    Some(Command::Lose(shard)) => {
                        if let Some((_, stream)) = running.remove(&shard) {
                            stream.abort();
                        }
                        self.forget(shard);
                        debug!(kind = %self.kind, shard, "stopped watching a shard");
                    }
                    None => return,
                },
                Some((shard, incarnation, event)) = streams.next(), if !streams.is_empty() => {
                    // An aborted stream yields nothing more; a later one of the shard is
                    // another incarnation.
                    if running.get(&shard).is_some_and(|(i, _)| *i == incarnation) {
                        self.handle(shard, incarnation, event);
                    }
                }
            }
        }
    }

    fn handle(&mut self, part: u32, incarnation: u64, event: Result<Event<K>, BoxError>) {
        match event {
            Ok(event) if self.outside(part, &event) => {}
            Ok(event) => self.apply(part, incarnation, event),
            Err(error) => self.failed(error),
        }
    }

    /// The part (shard) of the watch `object` belongs to: 0 unless the watch follows shards.
    fn part_of(&self, object: &K) -> u32 {
        match self.filter {
            Filter::Namespaces { shards } => {
                let namespace = object.meta().namespace.as_deref().unwrap_or("");
                shard_of_hash(field_hash(namespace), shards)
            }
            Filter::All | Filter::Selector(_) => 0,
        }
    }

    /// Whether `event` carries an object outside the shards of the stream `part` it came in
    /// on: counted, and the first one logged, since a server that filters sends none.
    fn outside(&mut self, part: u32, event: &Event<K>) -> bool {
        let (Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) = event else {
            return false;
        };
        let inside = match &self.filter {
            Filter::All => return false,
            Filter::Selector(selector) => selector.matches_object(o),
            Filter::Namespaces { .. } => self.part_of(o) == part,
        };
        if inside {
            return false;
        }
        if matches!(event, Event::InitApply(_)) {
            self.unfiltered.insert(part);
        }
        self.status.send_modify(|s| s.outside_shards += 1);
        if self.status.borrow().outside_shards == 1 {
            warn!(
                kind = %self.kind,
                "the API server sent an object outside the shard selector: it does not filter \
                 (is its ShardedListAndWatch feature gate on?); the watch filters instead"
            );
        }
        true
    }

    fn failed(&mut self, error: BoxError) {
        let error = WatchError::boxed(&self.kind, error);
        warn!(%error, "watch error; the watcher retries");
        self.status.send_modify(|s| {
            s.errors += 1;
            s.failing_since.get_or_insert_with(Instant::now);
            s.last_error = Some(error.clone());
        });
        self.state.lock().send(&Change::Error(error));
    }

    /// Forgets the objects of a shard no longer watched: out of the store and the deleted
    /// objects, no key yielded (they were not deleted, only handed to another replica).
    fn forget(&mut self, part: u32) {
        let mut state = self.state.lock();
        state.listing.remove(&part);
        let shards: Vec<_> = self
            .store
            .state()
            .into_iter()
            .filter(|o| self.part_of(o) == part)
            .collect();
        let forgotten = shards.len();
        for o in shards {
            self.writer
                .apply_watcher_event(&Event::Delete((*o).clone()));
        }
        state.deleted.retain(|_, (o, _)| self.part_of(o) != part);
        drop(state);
        if let Some(listed) = &self.listed {
            listed.send_if_modified(|l| l.remove(&part).is_some());
        }
        debug!(kind = %self.kind, shard = part, forgotten, "forgot a shard's objects");
    }

    fn apply(&mut self, part: u32, incarnation: u64, event: Event<K>) {
        let answered = !matches!(event, Event::Init);
        // A watch of the held shards lists each shard into the store as it goes (the others'
        // objects stay); one stream lists into the writer's buffer, swapped in at its end.
        let by_part = self.listed.is_some();
        let now = Instant::now();
        let mut state = self.state.lock();
        state.expire(now);
        let key = |o: &K| ObjectRef::from_obj(o);
        match event {
            Event::Apply(o) => {
                let key = key(&o);
                self.writer.apply_watcher_event(&Event::Apply(o));
                state.deleted.remove(&key);
                if let Some(o) = self.store.get(&key) {
                    state.send(&Change::Present(o, NORMAL));
                }
            }
            Event::Delete(o) => {
                let key = key(&o);
                self.writer.apply_watcher_event(&Event::Delete(o.clone()));
                let o = Arc::new(o);
                state.remember(key, o.clone(), now);
                state.send(&Change::Deleted(o, NORMAL));
            }
            Event::Init => {
                state.listing.insert(part, HashSet::new());
                self.unfiltered.remove(&part);
                if !by_part {
                    self.writer.apply_watcher_event(&Event::Init);
                }
            }
            Event::InitApply(o) => {
                state.listing.entry(part).or_default().insert(key(&o));
                let event = if by_part {
                    Event::Apply(o)
                } else {
                    Event::InitApply(o)
                };
                self.writer.apply_watcher_event(&event);
            }
            Event::InitDone => {
                let listed = state.listing.remove(&part).unwrap_or_default();
                // What the store held of the part and the list lacks was deleted while the
                // watch was down.
                let gone: Vec<_> = self
                    .store
                    .state()
                    .into_iter()
                    .filter(|o| self.part_of(o) == part && !listed.contains(&key(o)))
                    .collect();
                if by_part {
                    for o in &gone {
                        self.writer
                            .apply_watcher_event(&Event::Delete((**o).clone()));
                    }
                } else {
                    self.writer.apply_watcher_event(&Event::InitDone);
                }
                for o in &gone {
                    state.remember(key(o), o.clone(), now);
                }
                for key in &listed {
                    state.deleted.remove(key);
                }
                state.synced = true;
                let present: Vec<_> = self
                    .store
                    .state()
                    .into_iter()
                    .filter(|o| self.part_of(o) == part)
                    .collect();
                debug!(kind = %self.kind, shard = part, listed = present.len(), gone = gone.len(), "listed");
                for o in present {
                    state.send(&Change::Present(o, LOW));
                }
                for o in gone {
                    state.send(&Change::Deleted(o, LOW));
                }
                self.status.send_modify(|s| {
                    s.synced = true;
                    s.lists += 1;
                });
                if let Some(l) = &self.listed {
                    l.send_modify(|l| {
                        l.insert(part, (incarnation, self.unfiltered.remove(&part)));
                    });
                }
            }
        }
        drop(state);
        // An event carrying objects, or a list's end, is an answer of the API server: a run of
        // errors is over. (`Init` is not: the watcher emits it before it sends the list.)
        if answered {
            self.status
                .send_if_modified(|s| s.failing_since.take().is_some());
        }
    }
}

impl<K: Watched> State<K> {
    fn send(&mut self, change: &Change<K>) {
        self.subscribers
            .retain(|tx| tx.send(change.clone()).is_ok());
    }

    fn remember(&mut self, key: ObjectRef<K>, object: Arc<K>, now: Instant) {
        let until = now + self.retention;
        self.expiries.push_back((until, key.clone()));
        self.deleted.insert(key, (object, until));
    }

    /// Forgets the deleted objects whose retention has passed.
    fn expire(&mut self, now: Instant) {
        while let Some((until, _)) = self.expiries.front()
            && *until <= now
        {
            let (until, key) = self.expiries.pop_front().expect("a front entry");
            if self.deleted.get(&key).is_some_and(|(_, u)| *u == until) {
                self.deleted.remove(&key);
            }
        }
    }
}
