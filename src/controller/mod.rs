//! The operator shell: one kube-runtime Controller per served kind, each reconcile reading
//! fetch → plan → apply → report. The decisions are in [`plan`] (pure, unit-tested), the
//! translation and status rules in `compile` and `status`; this module only talks to the cluster.
//!
//! - [`startup`]: waits for the JobSet CRD, reports the pod-labels policy;
//! - [`caches`]: the process's one watch of JobSets and one of Jobs, cached and routed;
//! - [`fetch`] → [`plan`] → [`apply`] → [`report`]: one reconcile.

mod apply;
mod caches;
mod decode;
mod dry_run;
mod events;
mod fetch;
mod packed;
mod reconcile;

mod report;
mod startup;
mod takeover;
mod trainer;
mod v1;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Client;
use kube::runtime::controller::{Action, Config as ControllerConfig};

use crate::compile::gang::GangScheduler;
use crate::kinds::{Served, Visitor, visit_all};
use crate::plan::v1 as plan;
use crate::telemetry::{Metrics, Readiness};
pub use dry_run::{Row as DryRunRow, dry_run};
pub use startup::JOBSET_CRD;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "trainset";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        source: kube::Error,
    },
    #[error("encoding the status of {object}: {source}")]
    Encode {
        object: String,
        source: serde_json::Error,
    },
    #[error("{object} has no namespace")]
    NoNamespace { object: String },
    #[error("generating the SSH key pair: {0}")]
    SshKey(#[from] ssh_key::Error),
    #[error("the JobSet and Job watches stopped before they listed")]
    CachesClosed,
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("the JobSet {object} was missing, then existed when created")]
    CreateRace { object: String },
    #[error("{runtime}, which TrainJob {job} names, does not exist (yet); retrying")]
    RuntimeMissing { runtime: String, job: String },
    #[error("{runtime} cannot be read ({error}); retrying until it is fixed")]
    RuntimeUnreadable { runtime: String, error: String },
    #[error("{message}")]
    Waiting { message: String },
}

impl Error {
    /// The reason of the Warning event an error puts on the job.
    fn event_reason(&self) -> &'static str {
        match self {
            Self::RuntimeMissing { .. } => "TrainingRuntimeNotFound",
            Self::RuntimeUnreadable { .. } => "TrainingRuntimeUnreadable",
            Self::Waiting { .. } => "WaitingForEarlierJob",
            _ => "ReconcileError",
        }
    }

    /// Whether this is Kueue's webhook not yet knowing the job (see [`QUIET_RETRIES`]).
    fn is_owner_unseen(&self) -> bool {
        let Self::Kube {
            source: kube::Error::Api(status),
            ..
        } = self
        else {
            return false;
        };
        status.message.starts_with("admission webhook ") && status.message.ends_with("\" not found")
    }

    /// Whether retrying the same request can never succeed: the apiserver refused its content
    /// (400 Bad Request, 413 Too Large, 422 Invalid). Such errors wait for a change of the job.
    fn is_permanent(&self) -> bool {
        match self {
            Self::Kube { source, .. } => refused_content(source),
            Self::Plan(_) | Self::NoNamespace { .. } | Self::Encode { .. } => true,
            Self::SshKey(_)
            | Self::CachesClosed
            | Self::CreateRace { .. }
            | Self::RuntimeMissing { .. }
            | Self::RuntimeUnreadable { .. }
            | Self::Waiting { .. } => false,
        }
    }
}

/// Kueue's webhooks look a new JobSet's owner up in Kueue's cache, which may not have seen the job
/// created a moment ago: `admission webhook "vjobset.kb.io" denied the request:
/// pytorchjobs.kubeflow.org "demo" not found`. The first few such denials of a job are retried
/// quietly: no Warning event, no `Created` False, no warning in the log.
const QUIET_RETRIES: u32 = 3;

/// The apiserver refused a request for what it contains, so sending it again cannot help: 400
/// Bad Request, 413 Too Large, 422 Invalid, or an admission webhook's denial that names a field
/// of what was sent and what is wrong with it (Kueue's `metadata.labels[...]: Invalid value`).
/// Other webhook denials are for the moment (Kueue's JobSet webhook, until its cache has the
/// job), and are retried.
fn refused_content(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    match status.message.strip_prefix("admission webhook ") {
        Some(denial) => matches!(status.code, 400 | 403 | 413 | 422) && names_a_field(denial),
        None => matches!(status.code, 400 | 413 | 422),
    }
}

/// Whether a denial reads as the apiserver's field errors (`<path>: <type>: <detail>`), of a type
/// the same request meets again.
fn names_a_field(denial: &str) -> bool {
    const FINAL: [&str; 7] = [
        ": Invalid value",
        ": Required value",
        ": Unsupported value",
        ": Duplicate value",
        ": Too long",
        ": Too many",
        ": Forbidden",
    ];
    FINAL.iter().any(|kind| denial.contains(kind))
}

fn kube_error(
    action: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> Error {
    let object = object.into();
    move |source| Error::Kube {
        action,
        object,
        source,
    }
}

struct Context {
    /// For requests that end (reads and writes), at most [`REQUESTS_IN_FLIGHT`] at once.
    client: Client,
    /// For watches, which last.
    watch_client: Client,
    /// How every watch lists before it watches.
    listing: caches::Listing,
    /// trainset's JobSets and Jobs, from the process's one watch of each.
    caches: caches::Caches,
    recorder: events::Recorder,
    metrics: Arc<Metrics>,
    /// Told when a watch keeps failing.
    readiness: Arc<Readiness>,
    /// v1's `CUSTOM_CLUSTER_DOMAIN`, for TF_CONFIG.
    cluster_domain: Option<String>,
    /// The image of an MPIJob `kubeflow.org/v1` launcher's `kubectl-delivery` init container.
    kubectl_delivery_image: String,
    /// The gang scheduler that places v1 jobs.
    gang_scheduler: GangScheduler,
    /// Consecutive failed reconciles per object, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// This process's last status write of each job the job cache may not show yet.
    status_writes: Mutex<HashMap<String, StatusWrite>>,
    /// The rules this process last wrote into each MPIJob `kubeflow.org/v1` launcher's Role, by
    /// job: a Role is read and written only when its job's pods change.
    launcher_roles: Mutex<HashMap<String, Vec<PolicyRule>>>,
    /// The generation of each job whose gang objects (PodGroups that follow the spec) this
    /// process last made or wrote: a running job's gang is compiled and compared only once its
    /// spec changed, or once after a restart.
    gang_generations: Mutex<HashMap<String, i64>>,
}

/// A status this process wrote: when (see `plan::COUNTS_INTERVAL`), and, until the job cache
/// shows a newer version of the job, what it wrote over which version. Until then the written
/// status is the job's: a reconcile woken by the JobSet or a Job before the job's own watch
/// delivers the write would otherwise plan from the old status and write again (a second
/// `Created`, a second end). Once the cache caught up only the time is kept, a few bytes per job.
#[derive(Clone)]
struct StatusWrite {
    at: Instant,
    unseen: Option<UnseenWrite>,
}

#[derive(Clone)]
struct UnseenWrite {
    over: Option<String>,
    status: crate::api::JobStatus,
}

impl StatusWrite {
    /// The status written, while the cached job, at `version`, is the one it was planned from.
    fn newer_than(&self, version: Option<&str>) -> Option<&crate::api::JobStatus> {
        let unseen = self.unseen.as_ref()?;
        (unseen.over.is_some() && unseen.over.as_deref() == version).then_some(&unseen.status)
    }
}

impl Context {
    fn compiling(&self) -> fetch::Compiling<'_> {
        fetch::Compiling {
            cluster_domain: self.cluster_domain.as_deref(),
            gang_scheduler: &self.gang_scheduler,
            kubectl_delivery_image: &self.kubectl_delivery_image,
        }
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `error` on the object `key` is retried without a word (see [`QUIET_RETRIES`]).
    fn quiet(&self, key: &str, error: &Error) -> bool {
        error.is_owner_unseen() && self.failures().get(key).is_none_or(|n| *n < QUIET_RETRIES)
    }

    /// What to do after `error` on the object `key` (both families' error policy): retry
    /// transient errors with backoff, counting them; wait for a change after a permanent one.
    fn after_error(&self, key: String, error: &Error) -> Action {
        let mut failures = self.failures();
        if error.is_permanent() {
            failures.remove(&key);
            return Action::await_change();
        }
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        Action::requeue(backoff(*count))
    }

    fn status_writes(&self) -> MutexGuard<'_, HashMap<String, StatusWrite>> {
        self.status_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn launcher_roles(&self) -> MutexGuard<'_, HashMap<String, Vec<PolicyRule>>> {
        self.launcher_roles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn gang_generations(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.gang_generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Retry delay after `failures` consecutive errors: 1 s doubling up to 5 minutes.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(9)).min(Duration::from_secs(300))
}

type Shutdown = Shared<BoxFuture<'static, ()>>;

/// How long a stopping process goes on writing the events its last reconciles queued.
const EVENTS_AT_STOP: Duration = Duration::from_secs(5);

/// How the controllers run, from `trainset run`'s flags.
pub struct Settings {
    /// v1's `CUSTOM_CLUSTER_DOMAIN`, for TF_CONFIG.
    pub cluster_domain: Option<String>,
    /// `--mpi-kubectl-delivery-image`.
    pub kubectl_delivery_image: String,
    /// Reconciles of each kind running at once.
    pub max_concurrent_reconciles: u16,
    /// The gang scheduler that places v1 jobs.
    pub gang_scheduler: GangScheduler,
}

/// Requests (reads and writes, not watches) in flight at once. The apiserver's fair queuing keeps
/// a queue of limited length for each client, and answers 429 Too Many Requests once it is full:
/// at 256 reconciles at once a tenth of trainset's requests were refused, each a retry and a
/// delay. Queued here, none are; and 64 requests of tens of milliseconds each carry hundreds a
/// second, more than a thousand jobs arriving at once ask for.
pub const REQUESTS_IN_FLIGHT: usize = 64;

/// The clients of the controllers, made from one configuration.
pub struct Clients {
    /// Every request but watches passes through a limit of [`REQUESTS_IN_FLIGHT`], and waits at
    /// most [`REQUEST_TIMEOUT`] for its answer.
    pub requests: Client,
    pub watches: Client,
}

/// How long a request (not a watch) waits for its answer. The apiserver answers every request
/// but a watch within its `--request-timeout` (60 s by default); a request it never answers (one
/// it took while restarting, whose handler timed out without writing a response) would
/// otherwise hold its reconcile and its place among [`REQUESTS_IN_FLIGHT`] for ever, and enough
/// of them stop every controller.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

impl Clients {
    pub fn new(config: kube::Config) -> Result<Self, kube::Error> {
        let limit = tower::limit::ConcurrencyLimitLayer::new(REQUESTS_IN_FLIGHT);
        let mut answered = config.clone();
        answered.read_timeout = Some(REQUEST_TIMEOUT);
        // Counted from when the request is sent, not from when its pooled connection idled.
        answered.reset_reader_on_write = true;
        Ok(Self {
            requests: kube::client::ClientBuilder::try_from(answered)?
                .with_layer(&limit)
                .build(),
            watches: Client::try_from(config)?,
        })
    }
}

/// Runs a controller per served kind until `shutdown` resolves; `readiness` learns when the
/// caches have listed (just before the controllers start) and when a watch keeps failing.
pub async fn run(
    clients: Clients,
    metrics: Arc<Metrics>,
    settings: Settings,
    readiness: Arc<Readiness>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown: Shutdown = shutdown.boxed().shared();
    let Clients {
        requests: client,
        watches: watch_client,
    } = clients;
    if !startup::wait_for_jobset_crd(&client, shutdown.clone()).await {
        return Ok(());
    }
    for (policy, gauge) in [
        (&crate::pod_labels::SHIPPED, &metrics.pod_labels_policy),
        (&crate::api_version::SHIPPED, &metrics.api_version_policy),
    ] {
        let support = startup::policy_support(&client, policy).await;
        gauge.set(i64::from(support.active()));
        if support.active() {
            tracing::info!("{}", support.message(policy));
        } else {
            tracing::warn!("{}", support.message(policy));
        }
    }
    let listing = startup::listing(&watch_client).await;
    tracing::info!(?listing, "watches list what exists");
    let mut watches = caches::Watches::new();
    let (recorder, writing_events) = events::Recorder::new(client.clone(), FIELD_MANAGER);
    let writing_events = tokio::spawn(writing_events);
    let ctx = Arc::new(Context {
        recorder,
        client: client.clone(),
        watch_client: watch_client.clone(),
        listing,
        caches: watches.caches(),
        metrics,
        readiness: readiness.clone(),
        cluster_domain: settings.cluster_domain,
        kubectl_delivery_image: settings.kubectl_delivery_image,
        gang_scheduler: settings.gang_scheduler,
        failures: Default::default(),
        status_writes: Default::default(),
        launcher_roles: Default::default(),
        gang_generations: Default::default(),
    });

    // TrainJobs are served when the Trainer CRDs were installed before trainset started.
    let trainjobs_served = trainer::served(&client)
        .await
        .map_err(|source| Error::Kube {
            action: "asking the apiserver whether it serves",
            object: "TrainJobs".to_owned(),
            source,
        })?;

    /// Each kind's controller, not yet started, subscribed to the shared watches.
    struct Controllers<'a> {
        ctx: &'a Arc<Context>,
        watches: &'a mut caches::Watches,
        config: ControllerConfig,
        shutdown: &'a Shutdown,
        trainjobs_served: bool,
        all: Vec<BoxFuture<'static, ()>>,
    }
    impl Visitor for Controllers<'_> {
        fn v1<K: Served>(&mut self) {
            let triggers = self.watches.triggers::<K>();
            let run = v1::controller::<K>(
                self.ctx.clone(),
                triggers,
                self.config.clone(),
                self.shutdown.clone(),
            );
            self.all.push(run.boxed());
        }

        fn trainer(&mut self) {
            if !self.trainjobs_served {
                tracing::warn!(
                    "the apiserver serves no TrainJobs (trainer.kubeflow.org CRDs not installed): \
                     TrainJobs are not served until trainset restarts after they are"
                );
                return;
            }
            let run = trainer::run(
                self.ctx.clone(),
                self.watches.jobset_trigger("TrainJob"),
                self.config.clone(),
                self.shutdown.clone(),
            );
            self.all.push(run.boxed());
        }
    }
    let mut controllers = Controllers {
        ctx: &ctx,
        watches: &mut watches,
        config: ControllerConfig::default().concurrency(settings.max_concurrent_reconciles),
        shutdown: &shutdown,
        trainjobs_served,
        all: Vec::new(),
    };
    visit_all(&mut controllers);
    let controllers = controllers.all;

    let caches = ctx.caches.clone();
    watches.start(&watch_client, listing, &readiness, shutdown.clone());
    tokio::select! {
        listed = caches.ready() => if !listed {
            return Err(Error::CachesClosed);
        },
        () = shutdown.clone() => return Ok(()),
    }
    readiness.listed();
    futures::future::join_all(controllers).await;
    tracing::info!("controllers stopped");
    ctx.recorder.close();
    if tokio::time::timeout(EVENTS_AT_STOP, writing_events)
        .await
        .is_err()
    {
        tracing::warn!("stopping before every queued event was written");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api_error(code: u16) -> Error {
        denied(code, "refused")
    }

    fn denied(code: u16, message: &str) -> Error {
        let status: kube::core::Status =
            serde_json::from_value(json!({"code": code, "message": message})).unwrap_or_default();
        Error::Kube {
            action: "creating JobSet",
            object: "demo".to_owned(),
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn only_refused_content_waits_for_a_change() {
        let permanent: Vec<u16> = [400, 403, 404, 409, 413, 422, 429, 500, 503]
            .into_iter()
            .filter(|code| api_error(*code).is_permanent())
            .collect();
        assert_eq!(permanent, [400, 413, 422]);
        let webhook = "admission webhook \"vjobset.kb.io\" denied the request: \
            pytorchjobs.kubeflow.org \"demo\" not found";
        assert!(denied(403, webhook).is_owner_unseen());
        assert!(!denied(403, "admission webhook \"x\" denied the request: no").is_owner_unseen());
        assert!(!denied(422, webhook).is_permanent());
        assert!(!denied(403, webhook).is_permanent());
        let queue_name = "admission webhook \"vjobset.kb.io\" denied the request: \
            metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: \"team_a\": a lowercase \
            RFC 1123 subdomain must consist of lower case alphanumeric characters";
        assert!(denied(403, queue_name).is_permanent());
        assert!(denied(422, queue_name).is_permanent());
        assert!(!denied(503, queue_name).is_permanent());
        assert!(!Error::CachesClosed.is_permanent());
    }

    #[test]
    fn an_own_status_write_counts_until_the_cache_shows_a_newer_version() {
        let write = |over: Option<&str>| StatusWrite {
            at: Instant::now(),
            unseen: Some(UnseenWrite {
                over: over.map(str::to_owned),
                status: crate::api::JobStatus::default(),
            }),
        };
        assert!(write(Some("41")).newer_than(Some("41")).is_some());
        assert!(write(Some("41")).newer_than(Some("42")).is_none());
        assert!(write(Some("41")).newer_than(None).is_none());
        assert!(write(None).newer_than(None).is_none());
        let seen = StatusWrite {
            unseen: None,
            ..write(Some("41"))
        };
        assert!(seen.newer_than(Some("41")).is_none());
    }

    #[test]
    fn retries_back_off_from_one_second_to_five_minutes() {
        let delays: Vec<u64> = [1, 2, 3, 8, 9, 10, 100]
            .map(|n| backoff(n).as_secs())
            .to_vec();
        assert_eq!(delays, [2, 4, 8, 256, 300, 300, 300]);
    }
}
