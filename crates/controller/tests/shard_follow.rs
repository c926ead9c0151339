//! A watch of the held shards (`Watch::follow_events`) under paused time, each shard's stream
//! served by a scripted server that lists a shard's namespaces after a latency and then sends
//! their changes: a replica holds only its shards' objects, a shard's term reconciles nothing
//! before the shard is listed (not even the keys its warm view kept from an earlier term), a
//! shard handed back is forgotten without a reconcile, and with the server ignoring the
//! selector the watch filters by itself.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::kube::{Object, Watch};
use ctrlq_controller::shard::{Sharding, ShardingError, field_hash, shard_of_hash};
use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use support::bounded;
use tokio::sync::mpsc;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

const SHARDS: u32 = 4;
const LIMIT: Duration = Duration::from_secs(3600);
/// How long the scripted server takes to answer a list.
const LIST_LATENCY: Duration = Duration::from_secs(1);
/// A join settles within the retry periods and the grace (see `tests/sharding.rs`); twice that.
const SETTLE: Duration = Duration::from_secs(2 * (2 + 9));

fn shard(namespace: &str) -> u32 {
    shard_of_hash(field_hash(namespace), SHARDS)
}

/// A scripted API server of ConfigMaps: each stream lists the objects of one shard (or all,
/// when it ignores the selector) after [`LIST_LATENCY`], then sends their changes.
#[derive(Clone)]
struct Server {
    state: Arc<Mutex<ServerState>>,
    ignores_selector: bool,
    list_latency: Duration,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            ignores_selector: false,
            list_latency: LIST_LATENCY,
        }
    }
}

#[derive(Default)]
struct ServerState {
    objects: BTreeMap<(String, String), ConfigMap>,
    version: u64,
    watchers: Vec<(u32, mpsc::UnboundedSender<Event<ConfigMap>>)>,
    lists: u64,
}

impl Server {
    fn apply(&self, namespace: &str, name: &str) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                resource_version: Some(state.version.to_string()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        state
            .objects
            .insert((namespace.into(), name.into()), cm.clone());
        let ignores = self.ignores_selector;
        state.watchers.retain(|(s, tx)| {
            if ignores || *s == shard(namespace) {
                tx.send(Event::Apply(cm.clone())).is_ok()
            } else {
                !tx.is_closed()
            }
        });
    }

    fn delete(&self, namespace: &str, name: &str) {
        let mut state = self.state.lock().unwrap();
        let cm = state
            .objects
            .remove(&(namespace.to_owned(), name.to_owned()))
            .unwrap();
        let ignores = self.ignores_selector;
        state.watchers.retain(|(s, tx)| {
            if ignores || *s == shard(namespace) {
                tx.send(Event::Delete(cm.clone())).is_ok()
            } else {
                !tx.is_closed()
            }
        });
    }

    fn version(&self, key: &str) -> Option<String> {
        let (ns, name) = key.split_once('/').unwrap();
        let state = self.state.lock().unwrap();
        let cm = state.objects.get(&(ns.to_owned(), name.to_owned()))?;
        cm.metadata.resource_version.clone()
    }

    fn keys(&self, shards: &BTreeSet<u32>) -> BTreeSet<String> {
        let state = self.state.lock().unwrap();
        state
            .objects
            .keys()
            .filter(|(ns, _)| shards.contains(&shard(ns)))
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    /// One shard's watch: its list after the latency, then its changes.
    fn stream(
        &self,
        shard_index: u32,
    ) -> impl Stream<Item = Result<Event<ConfigMap>, Infallible>> + use<> {
        let server = self.clone();
        futures::stream::once(sleep(self.list_latency)).flat_map(move |()| {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut state = server.state.lock().unwrap();
            state.lists += 1;
            let listed: Vec<_> = state
                .objects
                .iter()
                .filter(|((ns, _), _)| server.ignores_selector || shard(ns) == shard_index)
                .map(|(_, cm)| Event::InitApply(cm.clone()))
                .collect();
            state.watchers.push((shard_index, tx));
            let live = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
            futures::stream::iter([Event::Init])
                .chain(futures::stream::iter(listed))
                .chain(futures::stream::iter([Event::InitDone]))
                .chain(live)
                .map(Ok)
        })
    }
}

/// One reconcile: the replica, the key, and the version it read (`None`: absent).
type Log = Arc<Mutex<Vec<(&'static str, String, Option<String>)>>>;

struct Replica {
    watch: Watch<ConfigMap>,
    /// Each shard term's end: the shard, and whether it was lost.
    ended: Arc<Mutex<Vec<(u32, bool)>>>,
    registry: Registry,
    /// The lists of a shard the server did not filter, as the runner reported them.
    unfiltered: Arc<AtomicUsize>,
    held: tokio::sync::watch::Receiver<BTreeSet<u32>>,
    stop: CancellationToken,
    run: tokio::task::JoinHandle<ctrlq_controller::Summary>,
}

fn replica(
    id: &'static str,
    store: &MemoryStore,
    server: &Server,
    log: &Log,
    in_flight: &Arc<Mutex<BTreeSet<String>>>,
    overlaps: &Arc<AtomicUsize>,
) -> Replica {
    let s = store.clone();
    let sharding = Sharding::new(
        SHARDS,
        id,
        move |name: &str| s.named_lock(name, id),
        LeaderElectionConfig::default(),
    )
    .unwrap()
    .by_namespace();
    let source = server.clone();
    let watch =
        Watch::<ConfigMap>::follow_events(&sharding, move |shard| source.stream(shard)).unwrap();
    let held = sharding.subscribe_held();
    let unfiltered = Arc::new(AtomicUsize::new(0));
    let ended: Arc<Mutex<Vec<(u32, bool)>>> = Arc::default();
    let mut registry = Registry::default();
    let metrics = ctrlq_controller::prometheus::ControllerMetrics::register(&mut registry);
    let (log, in_flight, overlaps) = (log.clone(), in_flight.clone(), overlaps.clone());
    let controller = Controller::for_watch(
        "configmaps",
        &watch,
        move |key: ObjectRef<ConfigMap>, cm: Object<ConfigMap>, _ctx: Context| {
            let (log, in_flight, overlaps) = (log.clone(), in_flight.clone(), overlaps.clone());
            let key = format!("{}/{}", key.namespace.unwrap(), key.name);
            async move {
                // A panic here would be the runner's to catch: counted, checked at the end.
                if !in_flight.lock().unwrap().insert(key.clone()) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let version = cm.present().map(|cm| cm.resource_version().unwrap());
                log.lock().unwrap().push((id, key.clone(), version));
                sleep(Duration::from_millis(50)).await;
                in_flight.lock().unwrap().remove(&key);
                Ok::<_, Infallible>(Action::Done)
            }
        },
    )
    .workers(2)
    .grace_period(Duration::from_secs(2))
    .metrics(metrics)
    .on_event({
        let (unfiltered, ended) = (unfiltered.clone(), ended.clone());
        move |e| match e {
            ctrlq_controller::Event::ShardSelectorIgnored { .. } => {
                unfiltered.fetch_add(1, Ordering::SeqCst);
            }
            ctrlq_controller::Event::ShardEnded { shard, lost } => {
                ended.lock().unwrap().push((*shard, *lost));
            }
            _ => {}
        }
    })
    .sharded(sharding);
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    Replica {
        watch,
        ended,
        registry,
        unfiltered,
        held,
        stop,
        run,
    }
}

fn store_keys(watch: &Watch<ConfigMap>) -> BTreeSet<String> {
    watch
        .store()
        .state()
        .iter()
        .map(|cm| format!("{}/{}", cm.namespace().unwrap(), cm.name_any()))
        .collect()
}

/// Every object's last reconcile read its last version (a deleted one's, absent), and no
/// reconcile read a present object as absent (the objects deleted here are never created again).
fn check_log(log: &Log, server: &Server) {
    let log = log.lock().unwrap();
    let mut last: HashMap<&str, &Option<String>> = HashMap::new();
    for (id, key, version) in log.iter() {
        if version.is_none() {
            assert_eq!(
                server.version(key),
                None,
                "{id} reconciled {key} from a store without it"
            );
        }
        last.insert(key, version);
    }
    let all = server.keys(&(0..SHARDS).collect());
    for key in &all {
        assert_eq!(*last[key.as_str()], server.version(key), "{key}");
    }
    for (key, version) in last {
        if !all.contains(key) {
            assert_eq!(*version, None, "{key} was deleted");
        }
    }
}

fn unfiltered_lists(r: &Replica) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &r.registry).unwrap();
    let series = "ctrlq_controller_shard_selector_ignored_total{controller=\"configmaps\"}";
    // A counter never incremented has no series yet.
    if text.contains(series) {
        support::series_value(&text, series)
    } else {
        0.0
    }
}

async fn follow(ignores_selector: bool) {
    let server = Server {
        ignores_selector,
        ..Server::default()
    };
    let namespaces: Vec<String> = (0..8).map(|i| format!("{i}-ns")).collect();
    let shards: BTreeSet<u32> = namespaces.iter().map(|ns| shard(ns)).collect();
    assert!(shards.len() >= 2, "the namespaces span more than one shard");
    for ns in &namespaces {
        for j in 0..3 {
            server.apply(ns, &format!("cm-{j}"));
        }
        server.apply(ns, "gone");
    }
    let (store, log, in_flight) = (MemoryStore::new(), Log::default(), Arc::default());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let a = replica("a", &store, &server, &log, &in_flight, &overlaps);
    sleep(Duration::from_secs(30)).await;
    assert_eq!(
        a.held.borrow().len(),
        SHARDS as usize,
        "a holds every shard"
    );
    assert_eq!(store_keys(&a.watch), server.keys(&(0..SHARDS).collect()));
    check_log(&log, &server);
    // Deleted: a remembers each one's last state.
    for ns in &namespaces {
        server.delete(ns, "gone");
    }
    sleep(Duration::from_secs(1)).await;
    let gone = |ns: &str| ObjectRef::<ConfigMap>::new("gone").within(ns);
    for ns in &namespaces {
        assert!(
            matches!(a.watch.get(&gone(ns)), Object::Deleted(Some(_))),
            "{ns}"
        );
    }
    check_log(&log, &server);

    // b joins: each holds only its shards' objects; a forgot the shards it handed over
    // without reconciling them.
    let b = replica("b", &store, &server, &log, &in_flight, &overlaps);
    sleep(SETTLE).await;
    let (held_a, held_b) = (a.held.borrow().clone(), b.held.borrow().clone());
    assert!(
        !held_a.is_empty() && !held_b.is_empty(),
        "{held_a:?} {held_b:?}"
    );
    assert!(held_a.is_disjoint(&held_b));
    assert_eq!(held_a.len() + held_b.len(), SHARDS as usize);
    assert_eq!(store_keys(&a.watch), server.keys(&held_a));
    assert_eq!(store_keys(&b.watch), server.keys(&held_b));
    check_log(&log, &server);
    // What a handed over it forgot, deleted objects too; what it kept, it remembers.
    for ns in &namespaces {
        let remembered = matches!(a.watch.get(&gone(ns)), Object::Deleted(Some(_)));
        assert_eq!(remembered, held_a.contains(&shard(ns)), "{ns}");
    }
    assert!(
        a.ended.lock().unwrap().iter().all(|(_, lost)| !lost),
        "handed over, not lost"
    );

    // Changes everywhere, then b leaves: a takes its shards back, lists them again before it
    // reconciles their keys (its warm view kept them from its first term), and reconciles every
    // change.
    for ns in &namespaces {
        server.apply(ns, "cm-0");
    }
    sleep(Duration::from_secs(1)).await;
    let lists_before = server.state.lock().unwrap().lists;
    b.stop.cancel();
    bounded(LIMIT, b.run).await.unwrap();
    for ns in &namespaces {
        server.apply(ns, "cm-1");
    }
    sleep(SETTLE).await;
    assert_eq!(a.held.borrow().len(), SHARDS as usize, "a took b's shards");
    assert_eq!(store_keys(&a.watch), server.keys(&(0..SHARDS).collect()));
    let lists = server.state.lock().unwrap().lists - lists_before;
    assert_eq!(
        lists,
        held_b.len() as u64,
        "a listed b's shards, and only those"
    );
    check_log(&log, &server);
    let outside = a.watch.status().outside_shards;
    let unfiltered = a.unfiltered.load(Ordering::SeqCst);
    if ignores_selector {
        assert!(outside > 0, "the watch dropped the other shards' objects");
        // Every shard a won was listed unfiltered: 4 at the start, b's again.
        assert_eq!(unfiltered, SHARDS as usize + held_b.len());
    } else {
        assert_eq!((outside, unfiltered), (0, 0));
    }
    assert_eq!(unfiltered_lists(&a), unfiltered as f64);
    a.stop.cancel();
    bounded(LIMIT, a.run).await.unwrap();
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key in two reconciles at once"
    );
}

#[tokio::test(start_paused = true)]
async fn replicas_hold_their_shards_objects_and_list_a_shard_before_reconciling_it() {
    follow(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_ignores_the_selector_changes_nothing_but_the_traffic() {
    follow(true).await;
}

/// A shard handed back before its watcher listed it: its term never reconciled anything, and
/// it ended drained, not lost.
#[tokio::test(start_paused = true)]
async fn a_shard_handed_back_before_its_list_ended_without_a_reconcile() {
    let server = Server {
        list_latency: Duration::from_secs(600),
        ..Server::default()
    };
    for i in 0..8 {
        server.apply(&format!("{i}-ns"), "cm");
    }
    let (store, log, in_flight) = (MemoryStore::new(), Log::default(), Arc::default());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let a = replica("a", &store, &server, &log, &in_flight, &overlaps);
    sleep(Duration::from_secs(30)).await;
    assert_eq!(a.held.borrow().len(), SHARDS as usize, "a won every shard");
    let b = replica("b", &store, &server, &log, &in_flight, &overlaps);
    sleep(SETTLE).await;
    let ended = a.ended.lock().unwrap().clone();
    assert!(!ended.is_empty(), "a handed shards to b");
    assert!(ended.iter().all(|(_, lost)| !lost), "{ended:?}");
    assert!(
        log.lock().unwrap().is_empty(),
        "nothing listed, nothing reconciled"
    );
    for r in [a, b] {
        r.stop.cancel();
        bounded(LIMIT, r.run).await.unwrap();
    }
}

#[test]
fn a_watch_of_the_held_shards_needs_keys_sharded_by_namespace() {
    let store = MemoryStore::new();
    let sharding = Sharding::new(
        SHARDS,
        "a",
        move |name: &str| store.named_lock(name, "a"),
        LeaderElectionConfig::default(),
    )
    .unwrap();
    let watch = Watch::<ConfigMap>::follow_events(&sharding, |_| {
        futures::stream::empty::<Result<Event<ConfigMap>, Infallible>>()
    });
    assert_eq!(watch.err(), Some(ShardingError::NotByNamespace));
}
