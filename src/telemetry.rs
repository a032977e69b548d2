//! Logs, Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sets up `tracing` with `RUST_LOG`-style filtering (default `info`).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// v1's labels: bounded values only (no job names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job_namespace: String,
    pub framework: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub framework: String,
}

/// The controller's metrics, with v1's counter names.
pub struct Metrics {
    pub created: Family<JobLabels, Counter>,
    pub deleted: Family<JobLabels, Counter>,
    pub successful: Family<JobLabels, Counter>,
    pub failed: Family<JobLabels, Counter>,
    pub restarted: Family<JobLabels, Counter>,
    pub reconcile_seconds: Family<KindLabels, Histogram>,
    /// Objects the types could not read, each failed `InvalidSpec` once.
    pub unreadable: Family<KindLabels, Counter>,
    pub jobset_creation_seconds: Family<KindLabels, Histogram>,
    /// 1 when pods get v1's per-pod labels (the pod-labels policy is installed), else 0.
    pub pod_labels_policy: Gauge,
    /// 1 when MPIJobs are run as the API they were created through (the api-version policy is
    /// installed), else 0.
    pub api_version_policy: Gauge,
    /// 1 while this process leads (holds the Lease, or runs without election), else 0.
    pub leader: Gauge,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<JobLabels, Counter>::default();
            registry.register(name, help, family.clone());
            family
        };
        let created = counter(
            &mut registry,
            "training_operator_jobs_created",
            "Training jobs whose JobSet was created",
        );
        let deleted = counter(
            &mut registry,
            "training_operator_jobs_deleted",
            "Training jobs deleted by their TTL",
        );
        let successful = counter(
            &mut registry,
            "training_operator_jobs_successful",
            "Training jobs that succeeded",
        );
        let failed = counter(
            &mut registry,
            "training_operator_jobs_failed",
            "Training jobs that failed",
        );
        let restarted = counter(
            &mut registry,
            "training_operator_jobs_restarted",
            "Whole-gang restarts of training jobs",
        );
        let reconcile_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        registry.register(
            "trainset_reconcile_duration_seconds",
            "Time one reconcile took",
            reconcile_seconds.clone(),
        );
        let jobset_creation_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 2.0, 14))
        });
        registry.register(
            "trainset_jobset_creation_latency_seconds",
            "Time from a training job's creation to its JobSet's creation",
            jobset_creation_seconds.clone(),
        );
        let unreadable = Family::<KindLabels, Counter>::default();
        registry.register(
            "trainset_unreadable_objects",
            "Watched objects that could not be read (a value the types cannot hold), each failed InvalidSpec",
            unreadable.clone(),
        );
        let pod_labels_policy = Gauge::default();
        registry.register(
            "trainset_pod_labels_policy",
            "1 when the MutatingAdmissionPolicy trainset-pod-labels and its binding were found at startup",
            pod_labels_policy.clone(),
        );
        let api_version_policy = Gauge::default();
        registry.register(
            "trainset_api_version_policy",
            "1 when the MutatingAdmissionPolicy trainset-api-version and its binding were found at startup",
            api_version_policy.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "trainset_leader",
            "1 while this process leads and reconciles, 0 while it stands by",
            leader.clone(),
        );
        Self {
            pod_labels_policy,
            api_version_policy,
            leader,
            created,
            deleted,
            successful,
            failed,
            restarted,
            reconcile_seconds,
            unreadable,
            jobset_creation_seconds,
            registry,
        }
    }
}

impl Metrics {
    fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// What `/readyz` says. A standby is ready: it serves its part, waiting to lead, so a Deployment
/// of two replicas rolls out. A leader is ready once every watch has listed, and not while one
/// keeps failing.
#[derive(Default)]
pub struct Readiness {
    /// Starting (0), [`STANDBY`] or [`LEADING`].
    role: AtomicU8,
    listed: AtomicBool,
    failing: AtomicUsize,
}

const STANDBY: u8 = 1;
const LEADING: u8 = 2;

/// Consecutive errors after which a watch counts as failing (its backoff is then several seconds).
const FAILING_AFTER: u32 = 3;

impl Readiness {
    pub fn standby(&self) {
        self.role.store(STANDBY, Ordering::Relaxed);
    }

    pub fn leading(&self) {
        self.role.store(LEADING, Ordering::Relaxed);
    }

    /// Every watch has listed once.
    pub fn listed(&self) {
        self.listed.store(true, Ordering::Relaxed);
    }

    /// Why the process is not ready, if it is not.
    pub fn not_ready(&self) -> Option<String> {
        match self.role.load(Ordering::Relaxed) {
            STANDBY => None,
            LEADING if !self.listed.load(Ordering::Relaxed) => {
                Some("leading; the watches have not listed yet".to_owned())
            }
            LEADING => match self.failing.load(Ordering::Relaxed) {
                0 => None,
                n => Some(format!("leading; {n} watch(es) keep failing")),
            },
            _ => Some("starting".to_owned()),
        }
    }

    /// A tracker for one watch's errors.
    pub fn watch(self: &Arc<Self>) -> WatchHealth {
        WatchHealth {
            readiness: self.clone(),
            errors: 0,
        }
    }
}

/// One watch's consecutive errors, reported to [`Readiness`] when they reach [`FAILING_AFTER`].
pub struct WatchHealth {
    readiness: Arc<Readiness>,
    errors: u32,
}

impl WatchHealth {
    pub fn record<T, E>(&mut self, result: &Result<T, E>) {
        let was_failing = self.errors >= FAILING_AFTER;
        self.errors = match result {
            Ok(_) => 0,
            Err(_) => self.errors.saturating_add(1),
        };
        match (was_failing, self.errors >= FAILING_AFTER) {
            (false, true) => {
                self.readiness.failing.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.readiness.failing.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

impl Drop for WatchHealth {
    fn drop(&mut self) {
        if self.errors >= FAILING_AFTER {
            self.readiness.failing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
}

/// Serves `/metrics`, `/healthz` and `/readyz` (see [`Readiness`]) until `shutdown`.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(Shared { metrics, readiness });
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_handler(State(shared): State<Shared>) -> impl IntoResponse {
    match shared.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            text,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            String::new(),
        ),
    }
}

async fn ready_handler(State(shared): State<Shared>) -> impl IntoResponse {
    match shared.readiness.not_ready() {
        None => (StatusCode::OK, "ok".to_owned()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_ready_and_a_leader_once_its_watches_listed_and_while_none_keeps_failing() {
        let readiness = Arc::new(Readiness::default());
        assert!(readiness.not_ready().is_some(), "starting");
        readiness.standby();
        assert_eq!(readiness.not_ready(), None);
        readiness.leading();
        assert!(readiness.not_ready().is_some(), "not listed yet");
        readiness.listed();
        assert_eq!(readiness.not_ready(), None);
        let mut watch = readiness.watch();
        let failed: Result<(), ()> = Err(());
        for _ in 0..FAILING_AFTER - 1 {
            watch.record(&failed);
        }
        assert_eq!(readiness.not_ready(), None, "a passing error is no failure");
        watch.record(&failed);
        watch.record(&failed);
        assert!(readiness.not_ready().is_some());
        watch.record(&Ok::<(), ()>(()));
        assert_eq!(readiness.not_ready(), None);
        watch.record(&failed);
        watch.record(&failed);
        watch.record(&failed);
        drop(watch);
        assert_eq!(
            readiness.not_ready(),
            None,
            "a watch that ended fails nothing"
        );
    }
}
