//! The main example: a controller built from the workspace's crates (queues, limiters, leader
//! election, the runner).
//!
//! Three replicas of a controller built with `ctrlq`'s controller runner share a lease on the
//! in-memory lock (or on etcd with `--etcd URL`, or on a real cluster's Lease with `--kube
//! NS/NAME`); the leader reconciles a synthetic cluster's
//! objects, failures are retried with backoff; midway the leader is killed and another replica
//! takes over warm (its queue filled from what its own watch yielded while it followed, with no
//! listing); at the end the leader drains. Then a scheduling queue places
//! pods that wait in backoff or unschedulable until an event helps.
//!
//! Run with `cargo run -p examples --example controller` (`-- --help` for the flags).

use std::process::ExitCode;
use std::sync::Arc;

use examples::cli::{Args, HELP};
use examples::controller::{self, Summary};
use examples::{scheduler, sharded};

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async_main(args))
}

async fn async_main(args: Args) -> ExitCode {
    if let Some(shards) = args.shards {
        return sharded(&args, shards).await;
    }
    let registry = args.metrics.then(examples::metrics::Registry::new);
    let mut options = args.options.clone();
    options.controller_metrics = registry.as_ref().map(|r| r.controller_metrics());
    options.leader_metrics = registry.as_ref().map(|r| r.leader_metrics());
    let o = &options;
    println!(
        "== controller: {} replicas, {} objects + {} updates, {} workers, failure rate {}, seed {}",
        o.replicas, o.objects, o.updates, o.workers, o.failure_rate, o.seed
    );
    let provider = registry.as_ref().map(|r| r.provider());
    let result: Result<Summary, Box<dyn std::error::Error>> = match (&args.etcd, &args.kube) {
        (Some(_), Some(_)) => Err("--etcd and --kube are alternatives: give one".into()),
        (Some(url), None) => run_on_etcd(o, provider, url).await,
        (None, Some((ns, name))) => run_on_kube(o, provider, ns, name).await,
        (None, None) => controller::run_in_memory(o, provider)
            .await
            .map_err(Into::into),
    };
    let summary: Summary = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("\n== summary\n{}", summary.render());

    println!("\n== scheduling queue: 6 pods, one node with 3 slots, then a node is added");
    let report = scheduler::run(6, 3).await;
    for line in &report.log {
        println!("{line}");
    }

    if let Some(registry) = registry {
        println!("\n== metrics (Prometheus text format)");
        print!("{}", registry.encode());
    }
    let ok = summary.stale == 0
        && summary.max_concurrent_leaders <= 1
        && summary.failover.is_none_or(|f| f <= summary.failover_bound);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--shards N`: replicas split the objects into shards; a kill and a join move them.
async fn sharded(args: &Args, shards: u32) -> ExitCode {
    let o = sharded::ShardedOptions {
        shards,
        replicas: args.options.replicas.max(2),
        objects: u32::try_from(args.options.objects).unwrap_or(u32::MAX),
        seed: args.options.seed,
        verbose: true,
        ..sharded::ShardedOptions::default()
    };
    println!(
        "== sharded controller: {} replicas, {} shards, {} objects, seed {}",
        o.replicas, o.shards, o.objects, o.seed
    );
    let result = match &args.etcd {
        Some(url) => sharded_on_etcd(&o, url).await,
        None => {
            let store = ctrlq_leader::MemoryStore::new();
            sharded::run(&o, move |id, name| store.named_lock(name, id)).await
        }
    };
    match result {
        Ok(summary) => {
            println!("\n== summary\n{}", summary.render());
            if summary.overlaps == 0 && summary.stale == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "etcd")]
async fn sharded_on_etcd(
    o: &sharded::ShardedOptions,
    url: &str,
) -> Result<sharded::ShardedSummary, Box<dyn std::error::Error + Send + Sync>> {
    let client = etcd_client::Client::connect([url], None).await?;
    let o = sharded::ShardedOptions {
        record_prefix: format!("/ctrlq/example-{}/", o.seed),
        ..o.clone()
    };
    sharded::run(&o, move |id, name| {
        ctrlq_leader::EtcdLock::new(client.clone(), name, id)
            .request_timeout(controller::REQUEST_TIMEOUT)
    })
    .await
}

#[cfg(not(feature = "etcd"))]
async fn sharded_on_etcd(
    _o: &sharded::ShardedOptions,
    _url: &str,
) -> Result<sharded::ShardedSummary, Box<dyn std::error::Error + Send + Sync>> {
    Err("this build has no etcd support: run with `--features etcd`".into())
}

#[cfg(feature = "etcd")]
async fn run_on_etcd(
    o: &controller::Options,
    provider: Option<Arc<dyn ctrlq_queue_async::metrics::MetricsProvider>>,
    url: &str,
) -> Result<Summary, Box<dyn std::error::Error>> {
    let client = etcd_client::Client::connect([url], None).await?;
    let key = format!("/ctrlq/example/leader-{}", o.seed);
    Ok(controller::run(o, provider, |id| {
        ctrlq_leader::EtcdLock::new(client.clone(), key.clone(), id)
            .request_timeout(controller::REQUEST_TIMEOUT)
    })
    .await?)
}

#[cfg(not(feature = "etcd"))]
async fn run_on_etcd(
    _o: &controller::Options,
    _provider: Option<Arc<dyn ctrlq_queue_async::metrics::MetricsProvider>>,
    _url: &str,
) -> Result<Summary, Box<dyn std::error::Error>> {
    Err("this build has no etcd support: run with `--features etcd`".into())
}

#[cfg(feature = "kube")]
async fn run_on_kube(
    o: &controller::Options,
    provider: Option<Arc<dyn ctrlq_queue_async::metrics::MetricsProvider>>,
    namespace: &str,
    name: &str,
) -> Result<Summary, Box<dyn std::error::Error>> {
    let client = kube::Client::try_default().await?;
    Ok(controller::run(o, provider, |id| {
        ctrlq_leader::LeaseLock::new(client.clone(), namespace, name, id)
            .request_timeout(controller::REQUEST_TIMEOUT)
    })
    .await?)
}

#[cfg(not(feature = "kube"))]
async fn run_on_kube(
    _o: &controller::Options,
    _provider: Option<Arc<dyn ctrlq_queue_async::metrics::MetricsProvider>>,
    _namespace: &str,
    _name: &str,
) -> Result<Summary, Box<dyn std::error::Error>> {
    Err("this build has no Kubernetes support: run with `--features kube`".into())
}
