//! The main example's command line (no dependency: a handful of flags).

use std::io::IsTerminal;
use std::time::Duration;

use crate::controller::Options;

/// `--help` text.
pub const HELP: &str = "\
controller: three replicas of a controller (`ctrlq`'s controller runner) share a lease; a
synthetic cluster creates and updates objects; the leader reconciles them, failed attempts are
retried with backoff; midway the leader is killed and another replica takes over warm, its
queue filled from what its own watch yielded while it followed, with no listing; at the end
every replica shuts down and the leader drains. Events are printed as they
happen, then a summary. Then a scheduling queue places pods that wait in backoff or
unschedulable until an event helps them.

USAGE:
    cargo run -p examples --example controller -- [FLAGS]

FLAGS:
    --objects N        objects the synthetic cluster creates [300]
    --updates N        updates of random existing objects [objects / 2]
    --failure-rate F   probability that one reconcile attempt fails, in [0, 1) [0.2]
    --workers N        concurrent reconciles of the leader [4]
    --replicas N       controller replicas contending for the lease [3]
    --seed S           seed of the events and of the failures [1]
    --no-kill          do not kill the leader midway
    --shards N         instead: the replicas split the objects into N shards, each held through
                       its own lease; one replica is killed and another joins, and the shards
                       follow (in memory, or on etcd with --etcd)
    --metrics          print the queue's, controller's and elector's Prometheus metrics at the end
    --etcd URL         elect the leader on a real etcd (build with `--features etcd`)
    --kube NS/NAME     elect the leader on a real cluster's Lease NS/NAME, through the
                       kubeconfig or the in-cluster config (build with `--features kube`)
    -q, --quiet        no live progress line (drawn only when stderr is a terminal)
    -h, --help         this text
";

/// Parsed flags.
///
/// # Examples
///
/// ```
/// let args = examples::cli::Args::parse(["--objects", "50", "--metrics"]).unwrap();
/// assert_eq!(args.options.objects, 50);
/// assert_eq!(args.options.updates, 25);
/// assert!(args.metrics);
/// assert!(examples::cli::Args::parse(["--workers", "0"]).is_err());
/// assert_eq!(examples::cli::Args::parse(["--shards", "12"]).unwrap().shards, Some(12));
/// assert!(examples::cli::Args::parse(["--shards", "0"]).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Args {
    /// The run's shape.
    pub options: Options,
    /// Print the Prometheus text at the end.
    pub metrics: bool,
    /// Elect on this etcd endpoint instead of the in-memory lock.
    pub etcd: Option<String>,
    /// Elect on this Lease (`namespace/name`) of a real cluster instead of the in-memory lock.
    pub kube: Option<(String, String)>,
    /// `--shards N`: the sharded mode with N shards.
    pub shards: Option<u32>,
    /// `--help` was asked for.
    pub help: bool,
}

impl Args {
    /// Parses the flags (without the program name).
    ///
    /// # Errors
    ///
    /// A message naming the bad flag or value.
    pub fn parse<I, S>(args: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut options = Options {
            progress: std::io::stderr().is_terminal(),
            verbose: true,
            ..Options::default()
        };
        let (mut metrics, mut etcd, mut help, mut updates) = (false, None, false, None);
        let mut kube = None;
        let mut shards = None;
        let mut it = args.into_iter().map(Into::into);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--objects" => options.objects = number(&flag, &value()?)?,
                "--updates" => updates = Some(number(&flag, &value()?)?),
                "--failure-rate" => {
                    let v = value()?;
                    options.failure_rate = v
                        .parse()
                        .map_err(|_| format!("{flag}: {v:?} is not a number"))?;
                }
                "--workers" => options.workers = number(&flag, &value()?)?,
                "--replicas" => options.replicas = number(&flag, &value()?)?,
                "--seed" => options.seed = number(&flag, &value()?)? as u64,
                "--no-kill" => options.kill_leader = false,
                "--metrics" => metrics = true,
                "--etcd" => etcd = Some(value()?),
                "--kube" => {
                    let v = value()?;
                    let (ns, name) = v
                        .split_once('/')
                        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                        .ok_or_else(|| format!("{flag}: {v:?} is not NAMESPACE/NAME"))?;
                    kube = Some((ns.to_owned(), name.to_owned()));
                }
                "--shards" => {
                    let n = number(&flag, &value()?)?;
                    let n = u32::try_from(n)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("{flag}: {n} is not in 1..=4294967295"))?;
                    shards = Some(n);
                }
                "-q" | "--quiet" => options.progress = false,
                "-h" | "--help" => help = true,
                other => return Err(format!("unknown flag {other:?} (see --help)")),
            }
        }
        options.updates = updates.unwrap_or(options.objects / 2);
        if options.workers == 0 || options.replicas == 0 {
            return Err("--workers and --replicas must be at least 1".into());
        }
        if !(0.0..1.0).contains(&options.failure_rate) {
            return Err(format!(
                "--failure-rate {} is outside [0, 1)",
                options.failure_rate
            ));
        }
        if options.objects == 0 {
            return Err("--objects must be at least 1".into());
        }
        // Keep the default run a few seconds long whatever the size.
        options.event_interval = Duration::from_micros(
            (1_200_000 / (options.objects + options.updates) as u64).clamp(50, 4_000),
        );
        Ok(Self {
            options,
            metrics,
            etcd,
            kube,
            shards,
            help,
        })
    }
}

fn number(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a non-negative integer"))
}
