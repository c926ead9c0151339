//! Server-side sharded list and watch (KEP-5866) on a real kube-apiserver: the objects the
//! server returns for a shard selector are exactly those our shard functions put in those
//! shards, by namespace and by uid; a sharded `Watch` holds only its shards, from the list and
//! live; and with the feature gate off the watch filters by itself and says so. Control planes
//! from `ctrlq-envtest` (binaries from `scripts/install-controlplane`); real time, every wait
//! bounded.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use ctrlq_controller::kube::{Watch, shard_client};
use ctrlq_controller::shard::{ShardField, ShardSelector, field_hash, shard_of_hash};
use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use support::bounded;
use tokio::sync::OnceCell;

const GATE: &str = "--feature-gates=ShardedListAndWatch=true";

/// One control plane with the gate on for the tests of this binary that need it.
async fn gated() -> &'static ControlPlane {
    static PLANE: OnceCell<ControlPlane> = OnceCell::const_new();
    PLANE.get_or_init(|| ControlPlane::start_with([GATE])).await
}

/// `namespaces` namespaces named `{i}-{suffix}`, each with `per` ConfigMaps. The number comes
/// first: FNV-1a moves its high bits little for a last byte, so names that differ only at their
/// end share a shard (see `ShardField::Namespace`).
async fn fill(admin: &Client, suffix: &str, namespaces: usize, per: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..namespaces {
        let ns = format!("{i}-{suffix}");
        create_namespace(admin, &ns).await;
        let api = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
        for j in 0..per {
            api.create(&PostParams::default(), &config_map(&format!("cm-{j}")))
                .await
                .unwrap();
        }
        names.push(ns);
    }
    names
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// `namespace/name` of each ConfigMap in the namespaces ending with `-{suffix}`.
fn keys<'a>(items: impl IntoIterator<Item = &'a ConfigMap>, suffix: &str) -> BTreeSet<String> {
    let ending = format!("-{suffix}");
    items
        .into_iter()
        .filter(|cm| cm.namespace().is_some_and(|ns| ns.ends_with(&ending)))
        .map(|cm| format!("{}/{}", cm.namespace().unwrap(), cm.name_any()))
        .collect()
}

/// The raw list of ConfigMaps with `selector`: its keys and its `metadata.shardInfo.selector`.
async fn raw_list(
    client: &Client,
    selector: &ShardSelector,
    suffix: &str,
) -> (BTreeSet<String>, Option<String>) {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", &selector.to_string())
        .finish();
    let request = http::Request::get(format!("/api/v1/configmaps?{query}"))
        .body(Vec::new())
        .unwrap();
    let list: serde_json::Value = client.request(request).await.unwrap();
    let items: Vec<ConfigMap> = serde_json::from_value(list["items"].clone()).unwrap();
    let echoed = list["metadata"]["shardInfo"]["selector"]
        .as_str()
        .map(str::to_owned);
    (keys(&items, suffix), echoed)
}

/// For both fields, each of 4 shards and a union of two apart: the server lists exactly the
/// objects our hash puts there (computed from the full list), echoes the selector, and the
/// shards tile the collection.
#[tokio::test]
async fn the_server_selects_exactly_the_objects_our_shards_hold() {
    let plane = gated().await;
    let admin = plane.client(ADMIN);
    let suffix = "tile";
    fill(&admin, suffix, 12, 4).await;
    let all = Api::<ConfigMap>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let everything = keys(&all, suffix);
    assert_eq!(everything.len(), 48);
    for field in [ShardField::Namespace, ShardField::Uid] {
        let mut union = BTreeSet::new();
        for held in [vec![0], vec![1], vec![2], vec![3], vec![0, 2]] {
            let selector = ShardSelector::for_shards(field, held.clone(), 4).unwrap();
            let expected = keys(all.iter().filter(|cm| selector.matches_object(*cm)), suffix);
            // The same, computed from the field as the runner would: shard_of_hash.
            let by_hash = keys(
                all.iter().filter(|cm| {
                    let value = match field {
                        ShardField::Namespace => cm.namespace().unwrap_or_default(),
                        ShardField::Uid => cm.uid().unwrap_or_default(),
                    };
                    held.contains(&shard_of_hash(field_hash(&value), 4))
                }),
                suffix,
            );
            assert_eq!(expected, by_hash);
            let (listed, echoed) = raw_list(&admin, &selector, suffix).await;
            assert_eq!(listed, expected, "{field:?} shards {held:?}: {selector}");
            assert_eq!(echoed.as_deref(), Some(&*selector.to_string()));
            // Through kube-rs's own list, on the shard client.
            let through_client = Api::<ConfigMap>::all(shard_client(admin.clone(), &selector))
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            assert_eq!(keys(&through_client, suffix), expected);
            if held.len() == 1 {
                assert!(union.is_disjoint(&listed), "{field:?}: shards overlap");
                union.extend(listed);
            }
        }
        assert_eq!(
            union, everything,
            "{field:?}: the 4 shards hold every object"
        );
    }
}

/// Waits until `watch`'s store holds exactly `expected` among the `suffix` namespaces.
async fn store_holds(watch: &Watch<ConfigMap>, expected: &BTreeSet<String>, suffix: &str) {
    let store = watch.store();
    bounded(Duration::from_secs(20), async {
        loop {
            let held = keys(store.state().iter().map(|cm| &**cm), suffix);
            if &held == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A watch of one namespace shard of two, its keys subscribed: its store holds exactly that
/// shard's objects after the list and after live creates in every namespace.
async fn watch_one_shard(plane: &ControlPlane, suffix: &str) -> Watch<ConfigMap> {
    let admin = plane.client(ADMIN);
    let namespaces = fill(&admin, suffix, 8, 3).await;
    let selector = ShardSelector::for_shards(ShardField::Namespace, [1], 2).unwrap();
    let mine: Vec<&String> = namespaces
        .iter()
        .filter(|ns| selector.matches_value(ns))
        .collect();
    assert!(
        !mine.is_empty() && mine.len() < namespaces.len(),
        "both shards hold a namespace: {mine:?}"
    );
    let watch = Watch::<ConfigMap>::sharded(admin.clone(), watcher::Config::default(), selector);
    let mut keys_yielded = (watch.keys())();
    watch.synced(Duration::from_secs(20)).await.unwrap();
    let mut expected: BTreeSet<String> = mine
        .iter()
        .flat_map(|ns| (0..3).map(move |j| format!("{ns}/cm-{j}")))
        .collect();
    store_holds(&watch, &expected, suffix).await;
    for ns in &namespaces {
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &config_map("live"))
            .await
            .unwrap();
    }
    expected.extend(mine.iter().map(|ns| format!("{ns}/live")));
    store_holds(&watch, &expected, suffix).await;
    // The keys yielded of these namespaces are the shard's: the listed ones, then the live ones
    // (other tests' objects may share the shard).
    let ending = format!("-{suffix}");
    let mut yielded = BTreeSet::new();
    bounded(Duration::from_secs(20), async {
        while yielded != expected {
            let key = keys_yielded.next().await.unwrap().unwrap().key;
            let namespace = key.namespace.unwrap_or_default();
            if namespace.ends_with(&ending) {
                let key = format!("{namespace}/{}", key.name);
                assert!(expected.contains(&key), "{key} is not in the shard");
                yielded.insert(key);
            }
        }
    })
    .await;
    watch
}

#[tokio::test]
async fn a_sharded_watch_holds_only_its_shard_and_the_server_sends_nothing_else() {
    let plane = gated().await;
    let watch = watch_one_shard(plane, "gate-on").await;
    assert_eq!(watch.status().outside_shards, 0, "the server filtered");
}

/// The control plane the other tests start has the gate on; this one has it off: the server
/// lists everything without `shardInfo`, and the watch keeps the same objects by itself,
/// counting what it dropped.
#[tokio::test]
async fn without_the_gate_the_watch_filters_by_itself_and_counts_it() {
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    let watch = watch_one_shard(plane, "gate-off").await;
    assert!(
        watch.status().outside_shards > 0,
        "the server sent the other shard's objects, and they were dropped"
    );
    let selector = ShardSelector::for_shards(ShardField::Namespace, [1], 2).unwrap();
    let (listed, echoed) = raw_list(&admin, &selector, "gate-off").await;
    assert_eq!(
        echoed, None,
        "no shardInfo from a server that ignored the selector"
    );
    assert_eq!(listed.len(), 8 * 4, "every object listed");
}
