//! One replica of a sharded controller on etcd or on Kubernetes Leases, as its own process: what
//! the multi-process tests (`tests/processes_etcd.rs`, `tests/processes_apiserver.rs`) start,
//! freeze, duplicate and kill. It reconciles the keys
//! `0..--keys` again and again (each reconcile awaits 10 ms, then requeues the key 50 ms later)
//! and prints one line per event on stdout, with the wall-clock time in nanoseconds (`end` also
//! for a reconcile dropped mid-way on a lost lease):
//!
//! ```text
//! start <ns> <key> <shard> <fencing token>
//! end <ns> <key>
//! held <ns> <shard>,<shard>,...
//! ```
//!
//! Flags: `--etcd URL` or (with the `kube` feature) `--kube URL --token-file F --ca-file F
//! --namespace NS` (Leases labelled `ctrlq.io/controller=replica`), then `--identity ID --prefix
//! P --shards N --keys K`; it runs until killed, or until stdin closes (then it shuts down
//! gracefully).

use std::io::Write;
use std::time::{Duration, SystemTime};

use ctrlq_controller::shard::{Sharding, shard_of};
use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::{EtcdLock, LeaderElectionConfig};
use tokio_util::sync::CancellationToken;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The test reads every line; a closed pipe means the test is gone.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints `end` for its key when dropped.
struct Ended(u32);

impl Drop for Ended {
    fn drop(&mut self) {
        say(&format!("end {} {}", now_ns(), self.0));
    }
}

/// The election timing of the outside review: LD 2 s, RD 1.2 s, RP 0.3 s.
fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .name("replica")
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1_200))
        .retry_period(Duration::from_millis(300))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut etcd, mut identity, mut prefix, mut shards, mut keys) =
        (String::new(), String::new(), String::new(), 6u32, 60u32);
    let mut kube: [String; 4] = Default::default();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--etcd" => etcd = value,
            "--kube" => kube[0] = value,
            "--token-file" => kube[1] = value,
            "--ca-file" => kube[2] = value,
            "--namespace" => kube[3] = value,
            "--identity" => identity = value,
            "--prefix" => prefix = value,
            "--shards" => shards = value.parse()?,
            "--keys" => keys = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if !kube[0].is_empty() {
        #[cfg(feature = "kube")]
        {
            let [url, token_file, ca_file, namespace] = kube;
            let mut kube_config = kube::Config::new(url.parse()?);
            kube_config.root_cert_file = Some(ca_file.into());
            kube_config.auth_info.token_file = Some(token_file);
            let client = kube::Client::try_from(kube_config)?;
            let me = identity.clone();
            let locks = move |name: &str| {
                ctrlq_leader::LeaseLock::new(client.clone(), &namespace, name, &me)
                    .label("ctrlq.io/controller", "replica")
                    .request_timeout(examples::controller::REQUEST_TIMEOUT)
            };
            let sharding = Sharding::new(shards, identity, locks, config())?.record_prefix(prefix);
            return run(sharding, shards, keys).await;
        }
        #[cfg(not(feature = "kube"))]
        return Err("--kube needs the `kube` feature".into());
    }
    let client = etcd_client::Client::connect([etcd.as_str()], None).await?;
    let me = identity.clone();
    let locks = move |name: &str| {
        EtcdLock::new(client.clone(), name, me.clone())
            .request_timeout(examples::controller::REQUEST_TIMEOUT)
    };
    let sharding = Sharding::new(shards, identity, locks, config())?.record_prefix(prefix);
    run(sharding, shards, keys).await
}

/// Runs the sharded controller on `sharding` until stdin closes.
async fn run<L: ctrlq_leader::Lock>(
    sharding: Sharding<L>,
    shards: u32,
    keys: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut held = sharding.subscribe_held();
    tokio::spawn(async move {
        while held.changed().await.is_ok() {
            let shards: Vec<String> = held
                .borrow_and_update()
                .iter()
                .map(u32::to_string)
                .collect();
            say(&format!("held {} {}", now_ns(), shards.join(",")));
        }
    });
    let reconcile = move |key: u32, ctx: Context| async move {
        let token = ctx.fencing_token().unwrap_or(0);
        say(&format!(
            "start {} {key} {} {token}",
            now_ns(),
            shard_of(&key, shards)
        ));
        // Printed when the reconcile ends, also when it is dropped mid-way (a lost lease).
        let _end = Ended(key);
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok::<_, std::convert::Infallible>(Action::requeue_after(Duration::from_millis(50)))
    };
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    // A closed stdin asks for a graceful shutdown.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        stop.cancel();
    });
    Controller::new("replica", reconcile)
        .source(move || futures::stream::iter(0..keys))
        .workers(4)
        .sharded(sharding)
        .run(shutdown)
        .await;
    Ok(())
}
