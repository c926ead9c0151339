//! A Kubernetes scheduler on ctrlq's scheduling queue (`examples::pod_scheduler`): it binds
//! the Pods whose `spec.schedulerName` is `--scheduler-name` to Nodes with room for their CPU
//! and memory requests, leader-elected on the Lease `<--lease-namespace>/<--scheduler-name>`.
//! It prints one line per bind, and a summary on SIGTERM or Ctrl-C.
//!
//! ```text
//! cargo run -p examples --features kube --bin pod_scheduler -- \
//!     [--kubeconfig FILE] [--context NAME] [--scheduler-name ctrlq-scheduler] \
//!     [--id ID] [--lease-namespace kube-system] [--nodes LABEL_SELECTOR]
//! ```
//!
//! Without `--kubeconfig` it takes the cluster kube-rs finds (`$KUBECONFIG`, `~/.kube/config`,
//! or the in-cluster service account); `--id` defaults to `$POD_NAME`, then `$HOSTNAME`;
//! `--nodes pool=batch` places pods only on the Nodes with that label.

use std::time::Duration;

use ctrlq_controller::kube::shutdown_on_signal;
use examples::pod_scheduler::{Scheduler, SchedulerConfig};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut kubeconfig, mut context, mut nodes) = (None, None, None);
    let mut name = "ctrlq-scheduler".to_owned();
    let mut lease_namespace = "kube-system".to_owned();
    let mut id = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("pod-scheduler-{}", std::process::id()));
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--kubeconfig" => kubeconfig = Some(value),
            "--context" => context = Some(value),
            "--scheduler-name" => name = value,
            "--id" => id = value,
            "--lease-namespace" => lease_namespace = value,
            "--nodes" => nodes = Some(value),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let client = match kubeconfig {
        Some(path) => {
            let options = KubeConfigOptions {
                context,
                ..KubeConfigOptions::default()
            };
            let config = Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options);
            Client::try_from(config.await?)?
        }
        None => Client::try_default().await?,
    };
    let mut config = SchedulerConfig::new(&name, &id).lease(lease_namespace, &name);
    if let Some(selector) = nodes {
        config = config.nodes(selector);
    }
    let scheduler = Scheduler::new(client, config)?;
    let stop = shutdown_on_signal();
    println!("{id}: scheduling the pods of scheduler {name}");
    let mut run = std::pin::pin!(scheduler.run(stop));
    let mut printed = 0;
    let terms = loop {
        tokio::select! {
            terms = &mut run => break terms,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let report = scheduler.report();
        for bound in &report.bound[printed..] {
            println!(
                "bound {} to {} (attempt {})",
                bound.pod, bound.node, bound.attempts
            );
        }
        printed = report.bound.len();
    };
    println!("{id}: led {terms} terms; {:?}", scheduler.report());
    Ok(())
}
