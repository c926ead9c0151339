//! A watch of some shards only: the API server filters by the [`ShardSelector`] (KEP-5866),
//! and the watch checks each object again, so it stays correct where the server ignores the
//! selector.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::kube::client::Body;
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher;
use ::kube::{Api, Client, Resource};
use http::{Request, Response, Uri};

use futures::StreamExt;

use crate::shard::{ShardField, ShardSelector, Sharding, ShardingError};

use super::watch::{BoxError, Watch, Watched};

/// A client that adds `shardSelector` to every request it sends: build it for list and watch
/// requests only (a [`Watch::sharded`] does).
///
/// A kube-apiserver with the `ShardedListAndWatch` feature gate returns only the selected
/// objects and events, and marks a list it filtered with `metadata.shardInfo`; one without the
/// gate ignores the parameter and returns everything, so a reader of this client's responses
/// checks each object ([`ShardSelector::matches_object`]), as [`Watch::sharded`] does.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_controller::kube::shard_client;
/// use ctrlq_controller::shard::{ShardField, ShardSelector};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, ListParams};
///
/// # async fn f(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let half = ShardSelector::for_shards(ShardField::Namespace, [0], 2)?;
/// let listed = Api::<ConfigMap>::all(shard_client(client, &half))
///     .list(&ListParams::default())
///     .await?;
/// let mine = listed.items.iter().filter(|cm| half.matches_object(*cm)).count();
/// # let _ = mine;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub fn shard_client(client: Client, selector: &ShardSelector) -> Client {
    let namespace = client.default_namespace().to_owned();
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", &selector.to_string())
        .finish();
    Client::new(
        WithShardSelector {
            inner: client,
            query: Arc::from(query),
        },
        namespace,
    )
}

/// The service behind [`shard_client`]: the inner client, with the selector in each query.
#[derive(Clone)]
struct WithShardSelector {
    inner: Client,
    /// `shardSelector=…`, URL-encoded.
    query: Arc<str>,
}

type Sent = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower_service::Service<Request<Body>> for WithShardSelector {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client waits for its own readiness in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        parts.uri = with_query(&parts.uri, &self.query);
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(Request::from_parts(parts, body)).await })
    }
}

/// `uri` with `query` appended to its query.
fn with_query(uri: &Uri, query: &str) -> Uri {
    let appended = match uri.query() {
        Some(q) if !q.is_empty() => format!("{}?{q}&{query}", uri.path()),
        _ => format!("{}?{query}", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    // A path and query made of a valid one and URL-encoded pairs parses again.
    parts.path_and_query = appended.parse().ok().or(parts.path_and_query);
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

impl ShardSelector {
    /// Whether `object`'s field ([`ShardField`]: its namespace, empty when cluster-scoped, or
    /// its uid, empty when it has none) hashes into the selected shards, as the server decides.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::shard::{ShardField, ShardSelector, field_hash, shard_of_hash};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.namespace = Some("team-a".into());
    /// let selector = ShardSelector::for_shards(ShardField::Namespace, [0], 2).unwrap();
    /// assert_eq!(selector.matches_object(&cm), shard_of_hash(field_hash("team-a"), 2) == 0);
    /// ```
    #[must_use]
    pub fn matches_object<K: Resource>(&self, object: &K) -> bool {
        let meta = object.meta();
        let value = match self.field() {
            ShardField::Namespace => meta.namespace.as_deref(),
            ShardField::Uid => meta.uid.as_deref(),
        };
        self.matches_value(value.unwrap_or(""))
    }
}

impl<K: Watched> Watch<K> {
    /// A watch of the objects of every namespace that `selector` selects: the API server is
    /// asked to filter ([`shard_client`]), and every object is checked again here, so a server
    /// that ignores the selector (no `ShardedListAndWatch` gate, an older version) costs the
    /// traffic of the whole collection but no correctness. The objects the check drops are
    /// counted in [`WatchStatus::outside_shards`](super::WatchStatus::outside_shards), and the
    /// first is logged as a warning: a sign that the server does not filter. An object never
    /// changes its namespace or uid, so it never moves between shards while it exists.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_controller::kube::Watch;
    /// use ctrlq_controller::shard::{ShardField, ShardSelector};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::watcher;
    ///
    /// # fn f(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// // This replica's half of the namespaces.
    /// let mine = ShardSelector::for_shards(ShardField::Namespace, [1], 2)?;
    /// let configmaps = Watch::<ConfigMap>::sharded(client, watcher::Config::default(), mine);
    /// # let _ = configmaps;
    /// # Ok(())
    /// # }
    /// ```
    pub fn sharded(client: Client, config: watcher::Config, selector: ShardSelector) -> Self
    where
        K: k8s_openapi::serde::de::DeserializeOwned,
    {
        let api = Api::<K>::all_with(shard_client(client, &selector), &());
        let events = watcher::watcher(api, config)
            .default_backoff()
            .map(|e| e.map_err(|e| Box::new(e) as BoxError))
            .boxed();
        Self::with_shards(events, selector)
    }

    /// A watch of the objects in the namespaces of the shards `sharding`'s replica leads, for
    /// the sources of a controller [sharded](crate::Controller::sharded) on it: one watcher per
    /// held shard, which the API server filters by the shard's selector
    /// ([`Watch::sharded`]), started when the replica wins the shard's lease and dropped when
    /// its term there ends, the other shards' watchers kept without a relist. A shard's term
    /// reconciles nothing until the shard's watcher has listed. See
    /// [`follow_events`](Self::follow_events) for the whole behavior; with the API server's
    /// `ShardedListAndWatch` gate off, each watcher receives every object and the watch drops
    /// (and counts in [`WatchStatus::outside_shards`](super::WatchStatus::outside_shards)) the
    /// other shards'.
    ///
    /// Shard every watch whose objects map to keys in their own namespace (the controller's
    /// objects, the objects it owns): their keys go to the replica that watches them. A watch
    /// whose objects map to keys in other namespaces ([`Controller::watches`](crate::Controller::watches)
    /// across namespaces) must watch every namespace ([`Watch::new`]), or a key would be
    /// triggered on a replica that does not hold its shard.
    ///
    /// # Errors
    ///
    /// [`ShardingError::NotByNamespace`] unless `sharding` routes keys by namespace
    /// ([`Sharding::by_namespace`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_controller::kube::{Object, Watch};
    /// use ctrlq_controller::shard::Sharding;
    /// use ctrlq_controller::{Action, Controller};
    /// use ctrlq_leader::{LeaderElectionConfig, LeaseLock};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::watcher;
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # async fn run(client: kube::Client, identity: String) -> Result<(), Box<dyn std::error::Error>> {
    /// let leases = client.clone();
    /// let me = identity.clone();
    /// let sharding = Sharding::new(16, identity, move |name: &str| {
    ///     LeaseLock::new(leases.clone(), "operators", name, &me)
    /// }, LeaderElectionConfig::default())?
    /// .by_namespace();
    /// let configmaps = Watch::<ConfigMap>::for_shards(client, watcher::Config::default(), &sharding)?;
    /// Controller::for_watch("configmaps", &configmaps, |_key, cm: Object<ConfigMap>, _ctx| async move {
    ///     let _ = cm; // act on it
    ///     Ok::<_, kube::Error>(Action::Done)
    /// })
    /// .sharded(sharding)
    /// .run(CancellationToken::new())
    /// .await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_shards<L>(
        client: Client,
        config: watcher::Config,
        sharding: &Sharding<L>,
    ) -> Result<Self, ShardingError>
    where
        K: k8s_openapi::serde::de::DeserializeOwned,
    {
        let shards = sharding.shards;
        let make =
            move |shard| match ShardSelector::for_shards(ShardField::Namespace, [shard], shards) {
                Ok(selector) => {
                    let api = Api::<K>::all_with(shard_client(client.clone(), &selector), &());
                    watcher::watcher(api, config.clone())
                        .default_backoff()
                        .map(|e| e.map_err(|e| Box::new(e) as BoxError))
                        .boxed()
                }
                // A shard the runner holds is below the count: never, but not a panic.
                Err(e) => {
                    futures::stream::once(std::future::ready(Err(Box::new(e) as BoxError))).boxed()
                }
            };
        Self::follow_boxed(sharding, Box::new(make))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_joins_the_query_whatever_it_held() {
        let q = "shardSelector=x";
        for (uri, want) in [
            ("/api/v1/pods", "/api/v1/pods?shardSelector=x"),
            ("/api/v1/pods?", "/api/v1/pods?shardSelector=x"),
            (
                "/api/v1/pods?limit=500",
                "/api/v1/pods?limit=500&shardSelector=x",
            ),
            (
                "https://h:6443/api/v1/pods?watch=true",
                "https://h:6443/api/v1/pods?watch=true&shardSelector=x",
            ),
        ] {
            assert_eq!(with_query(&uri.parse().unwrap(), q).to_string(), want);
        }
    }
}
