//! Logs, Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    pub jobset_creation_seconds: Family<KindLabels, Histogram>,
    /// 1 when pods get v1's per-pod labels (the pod-labels policy is installed), else 0.
    pub pod_labels_policy: Gauge,
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
        let pod_labels_policy = Gauge::default();
        registry.register(
            "trainset_pod_labels_policy",
            "1 when the MutatingAdmissionPolicy trainset-pod-labels and its binding were found at startup",
            pod_labels_policy.clone(),
        );
        Self {
            pod_labels_policy,
            created,
            deleted,
            successful,
            failed,
            restarted,
            reconcile_seconds,
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

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// Serves `/metrics`, `/healthz` and `/readyz` (ready once `ready` is set) until `shutdown`.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(Shared { metrics, ready });
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
    if shared.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the JobSet CRD",
        )
    }
}
