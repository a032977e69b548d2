use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube::api::Api;
use tokio::sync::watch;
use trainset::compile::DEFAULT_KUBECTL_DELIVERY_IMAGE;
use trainset::compile::gang::GangScheduler;
use trainset::controller::{Clients, Settings};
use trainset::leader::Elector;
use trainset::telemetry::{LogFormat, Metrics, Readiness};

/// Serves the Kubeflow training APIs on JobSet.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster config).
    Run {
        /// Address of the /metrics, /healthz and /readyz endpoints.
        #[arg(long, env = "TRAINSET_METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
        metrics_address: SocketAddr,
        /// Log format.
        #[arg(long, env = "TRAINSET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        #[command(flatten)]
        leader: LeaderArgs,
        #[command(flatten)]
        compile: CompileArgs,
        /// Reconciles of each kind that run at once (different jobs; one job is never
        /// reconciled twice at once).
        #[arg(long, env = "TRAINSET_MAX_CONCURRENT_RECONCILES", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
        max_concurrent_reconciles: u16,
        #[command(flatten)]
        gang: GangArgs,
    },
    /// Compile training job manifests into the objects the controller would create.
    Render {
        /// The manifest file, or - for standard input.
        #[arg(short = 'f', long = "filename", env = "TRAINSET_RENDER_FILE")]
        file: PathBuf,
        /// Namespace for manifests that name none.
        #[arg(
            short = 'n',
            long,
            env = "TRAINSET_RENDER_NAMESPACE",
            default_value = "default"
        )]
        namespace: String,
        /// Output format.
        #[arg(short = 'o', long = "output", env = "TRAINSET_RENDER_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
        /// What `trainset run` is started with, to compile as it would.
        #[command(flatten)]
        compile: CompileArgs,
        /// A file of TrainingRuntimes and ClusterTrainingRuntimes that TrainJobs may name
        /// (repeatable; runtimes in the manifest file count too).
        #[arg(long = "runtime")]
        runtimes: Vec<PathBuf>,
        #[command(flatten)]
        gang: GangArgs,
    },
    /// Say what trainset will do with each training job already in the cluster of the current
    /// kubeconfig, before it runs there: follow, restart, adopt, start, held, finished, wait,
    /// skip or refuse (docs/migration.md). Exits 1 if any job would be refused.
    Takeover {
        /// Read only: the one mode offered; trainset takes jobs over when `trainset run` starts.
        #[arg(long, required = true)]
        dry_run: bool,
        /// Only this namespace (default: every namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// What `trainset run` will be started with, to plan as it will.
        #[command(flatten)]
        compile: CompileArgs,
        #[command(flatten)]
        gang: GangArgs,
    },
    /// Print the CRDs of every training kind, or write one file each into a directory.
    Crds {
        /// Write `<group>_<plural>.yaml` files into this directory instead of printing.
        #[arg(long, env = "TRAINSET_CRDS_DIR")]
        dir: Option<PathBuf>,
    },
    /// Print the MutatingAdmissionPolicy and binding that record the API version each MPIJob
    /// was created through (`deploy/api-version.yaml`).
    ApiVersion,
    /// Print the MutatingAdmissionPolicy and binding that give pods v1's per-pod labels
    /// (`deploy/pod-labels.yaml`).
    PodLabels,
    /// Print the ValidatingAdmissionPolicies and bindings that refuse a TrainJob whose pod names
    /// would be too long (`deploy/trainjob-names.yaml`).
    TrainjobNames,
}

/// Settings that change what a job compiles to.
#[derive(clap::Args)]
struct CompileArgs {
    /// Cluster domain appended to TF_CONFIG endpoints (`<host>.<ns>.svc.<domain>`).
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    cluster_domain: Option<String>,
    /// The image that gives an MPIJob `kubeflow.org/v1` launcher its `kubectl` (training-operator
    /// v1.9.4's flag).
    #[arg(long, env = "TRAINSET_MPI_KUBECTL_DELIVERY_IMAGE", default_value = DEFAULT_KUBECTL_DELIVERY_IMAGE)]
    mpi_kubectl_delivery_image: String,
}

/// Leader election on a coordination.k8s.io Lease, so several replicas can run.
#[derive(clap::Args)]
struct LeaderArgs {
    /// Reconcile only while holding the Lease.
    #[arg(long, env = "TRAINSET_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, env = "TRAINSET_LEASE_NAME", default_value = "trainset")]
    lease_name: String,
    /// Namespace of the Lease (in a cluster: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Lease (in a cluster: the pod name); defaults to the host
    /// name plus a random suffix, so two processes on one host never share it.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
}

/// Gang scheduling of v1 jobs (see docs/gang-scheduling.md).
#[derive(clap::Args)]
struct GangArgs {
    /// The gang scheduler that places v1 jobs: none, scheduler-plugins, volcano or native
    /// (Kubernetes' Workload API).
    #[arg(long, env = "TRAINSET_GANG_SCHEDULER", value_parser = ["none", "scheduler-plugins", "volcano", "native"])]
    gang_scheduler: Option<String>,
    /// training-operator's flag, for drop-in deployments: `volcano`, or the name of the
    /// scheduler-plugins scheduler pods are sent to.
    #[arg(long, env = "TRAINSET_GANG_SCHEDULER_NAME")]
    gang_scheduler_name: Option<String>,
}

impl GangArgs {
    fn scheduler(&self) -> anyhow::Result<GangScheduler> {
        GangScheduler::from_flags(
            self.gang_scheduler.as_deref(),
            self.gang_scheduler_name.as_deref(),
        )
        .map_err(anyhow::Error::msg)
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Yaml,
    Json,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run {
            metrics_address,
            log_format,
            leader,
            compile,
            max_concurrent_reconciles,
            gang,
        } => run(
            metrics_address,
            log_format,
            leader,
            Settings {
                cluster_domain: compile.cluster_domain,
                kubectl_delivery_image: compile.mpi_kubectl_delivery_image,
                max_concurrent_reconciles,
                gang_scheduler: gang.scheduler()?,
            },
        ),
        Command::Render {
            file,
            namespace,
            output,
            compile,
            runtimes,
            gang,
        } => render(
            &file,
            &runtimes,
            &namespace,
            &trainset::render::Operator {
                cluster_domain: compile.cluster_domain.as_deref(),
                gang_scheduler: Some(&gang.scheduler()?),
                kubectl_delivery_image: Some(&compile.mpi_kubectl_delivery_image),
            },
            output,
        ),
        Command::Takeover {
            dry_run: _,
            namespace,
            compile,
            gang,
        } => takeover_dry_run(
            namespace.as_deref(),
            &Settings {
                cluster_domain: compile.cluster_domain,
                kubectl_delivery_image: compile.mpi_kubectl_delivery_image,
                max_concurrent_reconciles: 1,
                gang_scheduler: gang.scheduler()?,
            },
        ),
        Command::Crds { dir } => print_crds(dir),
        Command::ApiVersion => {
            print!("{}", trainset::api_version::to_yaml()?);
            Ok(())
        }
        Command::PodLabels => {
            print!("{}", trainset::pod_labels::to_yaml()?);
            Ok(())
        }
        Command::TrainjobNames => {
            print!("{}", trainset::trainjob_names::to_yaml()?);
            Ok(())
        }
    }
}

/// Prints a table of every job's verdict; fails if any would be refused.
fn takeover_dry_run(namespace: Option<&str>, settings: &Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let rows = runtime.block_on(async {
        let config = kube::Config::infer()
            .await
            .context("reading the cluster's configuration")?;
        let client = kube::Client::try_from(config).context("connecting to the cluster")?;
        trainset::controller::dry_run(client, namespace, settings)
            .await
            .context("reading the cluster")
    })?;
    let width = |field: fn(&trainset::controller::DryRunRow) -> &str, title: &str| {
        rows.iter()
            .map(|r| field(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let (ns, kind, name) = (
        width(|r| &r.namespace, "NAMESPACE"),
        width(|r| &r.kind, "KIND"),
        width(|r| &r.name, "NAME"),
    );
    println!(
        "{:ns$}  {:kind$}  {:name$}  {:8}  WHY",
        "NAMESPACE", "KIND", "NAME", "WILL"
    );
    for row in &rows {
        println!(
            "{:ns$}  {:kind$}  {:name$}  {:8}  {}",
            row.namespace,
            row.kind,
            row.name,
            row.verdict.word(),
            row.why
        );
    }
    let refused = rows
        .iter()
        .filter(|r| r.verdict == trainset::plan::v1::takeover::Verdict::Refuse)
        .count();
    if refused > 0 {
        anyhow::bail!("{refused} of {} jobs would be refused", rows.len());
    }
    Ok(())
}

/// How long in-flight reconciles may go on after SIGTERM: the process exits well inside a
/// Deployment's 30 s grace period whatever its watches are doing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

fn run(
    metrics_address: SocketAddr,
    log_format: LogFormat,
    leader: LeaderArgs,
    settings: Settings,
) -> anyhow::Result<()> {
    trainset::telemetry::init_logging(log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let result = runtime.block_on(serve_and_lead(metrics_address, leader, settings));
    // Whatever is still running (a request on a silent connection) does not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Serves the endpoints, waits to lead, runs the controllers while leading, and stops on
/// SIGTERM (releasing the Lease) or at once when leadership is lost.
async fn serve_and_lead(
    metrics_address: SocketAddr,
    leader: LeaderArgs,
    settings: Settings,
) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster's configuration")?;
    let clients = Clients::new(config).context("connecting to the cluster")?;
    // Renewals never queue behind the reconciles' requests.
    let lease_client = clients.watches.clone();
    let metrics = Arc::new(Metrics::default());
    let readiness = Arc::new(Readiness::default());
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    tokio::spawn(trainset::telemetry::serve(
        metrics_address,
        metrics.clone(),
        readiness.clone(),
        until(stopped.clone(), true),
    ));
    tracing::info!(%metrics_address, "trainset starting");

    let mut elected = None;
    if leader.leader_elect {
        let identity = leader.identity.clone().unwrap_or_else(unique_identity);
        let leases = Api::namespaced(lease_client, &leader.lease_namespace);
        let elector = Elector::new(leases, &leader.lease_name, &identity);
        readiness.standby();
        tracing::info!(lease = %leader.lease_name, namespace = %leader.lease_namespace, %identity, "waiting to lead");
        tokio::select! {
            held = elector.acquire() => elected = Some((elector, held)),
            () = until(stopped.clone(), true) => return Ok(()),
        }
        tracing::info!(%identity, "leading");
    }
    readiness.leading();
    metrics.leader.set(1);

    let (halt, halted) = watch::channel(false);
    let controllers = trainset::controller::run(
        clients,
        metrics.clone(),
        settings,
        readiness,
        until(halted, true),
    );
    let mut controllers = std::pin::pin!(controllers);
    let lost = async {
        match &mut elected {
            Some((elector, held)) => elector.hold(held).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        ended = &mut controllers => ended?,
        // Another may lead already, or will once the Lease lapses: stop writing now.
        lost = lost => {
            metrics.leader.set(0);
            anyhow::bail!("{lost}; exiting so that another replica leads");
        }
        () = until(stopped, true) => {
            let _ = halt.send(true);
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await.is_err() {
                tracing::warn!("reconciles still running after {SHUTDOWN_GRACE:?}; stopping them");
            }
        }
    }
    metrics.leader.set(0);
    if let Some((elector, held)) = &elected {
        elector.release(held).await;
    }
    Ok(())
}

/// `<host name>-<pid>-<random>`: unique per process even on one host.
fn unique_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "trainset".to_owned());
    // RandomState is seeded from the operating system's randomness in every process.
    let random = std::hash::RandomState::new().build_hasher().finish();
    format!("{host}-{}-{random:016x}", std::process::id())
}

/// Resolves once the watched value equals `value` (or its sender is gone).
async fn until(mut rx: watch::Receiver<bool>, value: bool) {
    let _ = rx.wait_for(|current| *current == value).await;
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn render(
    file: &Path,
    runtime_files: &[PathBuf],
    namespace: &str,
    operator: &trainset::render::Operator<'_>,
    output: Output,
) -> anyhow::Result<()> {
    let input = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let mut runtimes = String::new();
    for path in runtime_files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        runtimes.push_str("---\n");
        runtimes.push_str(&text);
        runtimes.push('\n');
    }
    let format = match output {
        Output::Yaml => trainset::render::Format::Yaml,
        Output::Json => trainset::render::Format::Json,
    };
    match trainset::render::render(&input, &runtimes, namespace, operator, format) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            std::process::exit(1);
        }
    }
}

fn print_crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let crds = trainset::crds::all()?;
    match dir {
        Some(dir) => {
            for crd in &crds {
                let path = dir.join(trainset::crds::file_name(crd));
                std::fs::write(&path, trainset::crds::to_yaml(crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        None => {
            for crd in &crds {
                print!("---\n{}", trainset::crds::to_yaml(crd)?);
            }
        }
    }
    Ok(())
}
