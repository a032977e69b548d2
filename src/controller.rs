//! The operator shell, one kube-runtime Controller per training kind:
//! fetch → compile → apply → observe → status patch. Translation and status rules live in
//! `compile` and `status`; this module only talks to the cluster.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use jobset_types::JobSet;
use jobset_types::keys::{kueue, label as jobset_label, terminal_state};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::admission;
use crate::api::{
    CleanPodPolicy, JAXJob, JobStatus, MPIJob, PaddleJob, PyTorchJob, TFJob, TrainingJob,
    XGBoostJob,
};
use crate::compile::{
    Compile, CompileError, Compiled, JOB_NAME, MANAGED_BY, OPERATOR_NAME, Options, SshKeyPair,
    TRAINSET,
};
use crate::pod_labels;
use crate::status::{self, Observed, Subject};
use crate::suspend::{self, Control};
use crate::telemetry::{JobLabels, KindLabels, Metrics};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "trainset";
const JOBSET_CRD: &str = "jobsets.jobset.x-k8s.io";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        source: kube::Error,
    },
    #[error("{object} has no namespace")]
    NoNamespace { object: String },
    #[error("generating the SSH key pair: {0}")]
    SshKey(#[from] ssh_key::Error),
    #[error("the JobSet CRD {JOBSET_CRD} never became established")]
    NoJobSetCrd,
    #[error("compiling the job to resume its JobSet: {0}")]
    Compile(#[source] CompileError),
}

impl Error {
    /// Whether retrying the same request can never succeed: the apiserver refused its content
    /// (400 Bad Request, 413 Too Large, 422 Invalid). Such errors wait for a change of the job.
    fn is_permanent(&self) -> bool {
        match self {
            Self::Kube { source, .. } => refused_content(source),
            Self::Compile(_) => true,
            Self::NoNamespace { .. } => true,
            Self::SshKey(_) | Self::NoJobSetCrd => false,
        }
    }
}

/// The apiserver refused a request for what it contains, so sending it again cannot help.
fn refused_content(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 400 | 413 | 422))
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

/// Kueue's Workload API, looked up only to learn whether Kueue queues a training job itself.
fn workload_resource() -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".to_owned(),
        version: "v1beta2".to_owned(),
        api_version: "kueue.x-k8s.io/v1beta2".to_owned(),
        kind: "Workload".to_owned(),
        plural: "workloads".to_owned(),
    }
}

/// A training kind the controller serves.
pub trait Kind:
    TrainingJob + Compile + Resource<Scope = NamespaceResourceScope> + Debug + Send + Sync + 'static
{
}
impl<K> Kind for K where
    K: TrainingJob
        + Compile
        + Resource<Scope = NamespaceResourceScope>
        + Debug
        + Send
        + Sync
        + 'static
{
}

struct Context {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    /// v1's `CUSTOM_CLUSTER_DOMAIN`, for TF_CONFIG.
    cluster_domain: Option<String>,
    /// Consecutive failed reconciles per object, for the retry backoff.
    failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

impl Context {
    fn failures(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Retry delay after `failures` consecutive errors: 1 s doubling up to 5 minutes.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(9)).min(Duration::from_secs(300))
}

fn object_key<K: Kind>(job: &K) -> String {
    key::<K>(&job.namespace().unwrap_or_default(), &job.name_any())
}

fn key<K: Kind>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", K::kind(&()))
}

type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Runs the six controllers until `shutdown` resolves; `ready` turns true once the JobSet CRD is
/// established and the controllers start.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    cluster_domain: Option<String>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown: Shutdown = shutdown.boxed().shared();
    if !wait_for_jobset_crd(&client, shutdown.clone()).await? {
        return Ok(());
    }
    let labels = pod_labels_support(&client).await;
    metrics.pod_labels_policy.set(i64::from(labels.active()));
    if labels.active() {
        tracing::info!("{}", labels.message());
    } else {
        tracing::warn!("{}", labels.message());
    }
    ready.store(true, Ordering::Relaxed);
    let reporter = Reporter {
        controller: FIELD_MANAGER.to_owned(),
        instance: None,
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        metrics,
        cluster_domain,
        failures: Default::default(),
    });
    futures::join!(
        controller::<TFJob>(&ctx, shutdown.clone()),
        controller::<PyTorchJob>(&ctx, shutdown.clone()),
        controller::<XGBoostJob>(&ctx, shutdown.clone()),
        controller::<PaddleJob>(&ctx, shutdown.clone()),
        controller::<JAXJob>(&ctx, shutdown.clone()),
        controller::<MPIJob>(&ctx, shutdown.clone()),
    );
    tracing::info!("controllers stopped");
    Ok(())
}

/// Whether the pod-labels policy and its binding are installed (read once, at startup).
async fn pod_labels_support(client: &Client) -> pod_labels::Support {
    use pod_labels::{BINDING, POLICY, POLICY_API, POLICY_NAME, Support};
    let served = match client.list_api_group_resources(POLICY_API).await {
        Ok(list) => list.resources.iter().any(|r| r.name == POLICY.1),
        Err(kube::Error::Api(error)) if error.code == 404 => false,
        Err(error) => return Support::Unknown(error.to_string()),
    };
    if !served {
        return Support::ApiMissing;
    }
    for (kind, plural) in [POLICY, BINDING] {
        let (group, version) = POLICY_API.split_once('/').unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.get_opt(POLICY_NAME).await {
            Ok(Some(_)) => {}
            Ok(None) => return Support::NotInstalled { missing: kind },
            Err(error) => return Support::Unknown(error.to_string()),
        }
    }
    Support::Installed
}

/// Waits, logging why, until the JobSet CRD is established. Returns false on shutdown.
async fn wait_for_jobset_crd(client: &Client, shutdown: Shutdown) -> Result<bool, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let established = match crds.get_opt(JOBSET_CRD).await {
            Ok(Some(crd)) => crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }),
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(%error, "cannot read the JobSet CRD yet");
                false
            }
        };
        if established {
            return Ok(true);
        }
        tracing::info!(
            crd = JOBSET_CRD,
            "waiting for the JobSet CRD to be established; is JobSet installed?"
        );
        tokio::select! {
            () = &mut shutdown => return Ok(false),
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

async fn controller<K: Kind>(ctx: &Arc<Context>, shutdown: Shutdown) {
    let jobsets = watcher::Config::default().labels(&format!("{MANAGED_BY}={TRAINSET}"));
    let jobs = watcher::Config::default().labels(&format!(
        "{MANAGED_BY}={TRAINSET},{OPERATOR_NAME}={}",
        K::OPERATOR_NAME
    ));
    Controller::new(
        Api::<K>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<JobSet>::all(ctx.client.clone()), jobsets)
    .watches(Api::<Job>::all(ctx.client.clone()), jobs, |job| {
        let name = job.labels().get(jobset_label::JOBSET_NAME).cloned();
        name.zip(job.namespace())
            .map(|(name, ns)| ObjectRef::<K>::new(&name).within(&ns))
    })
    .graceful_shutdown_on(shutdown)
    .run(reconcile::<K>, error_policy::<K>, ctx.clone())
    .for_each(|result| {
        let ctx = ctx.clone();
        async move {
            match result {
                Ok(_) => {}
                // The training job is gone (a Job or JobSet outlived it): forget its retries.
                Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                    tracing::debug!(%object, "training job is gone");
                    let key = key::<K>(
                        object.namespace.as_deref().unwrap_or_default(),
                        &object.name,
                    );
                    ctx.failures().remove(&key);
                }
                Err(error) => {
                    tracing::warn!(kind = K::kind(&()).as_ref(), %error, "reconcile failed")
                }
            }
        }
    })
    .await;
}

/// Transient errors are retried with backoff (the count resets on success and is forgotten with
/// the object); an error that waiting cannot heal waits for a change of the job instead.
fn error_policy<K: Kind>(job: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    if error.is_permanent() {
        ctx.failures().remove(&object_key(job.as_ref()));
        return Action::await_change();
    }
    let mut failures = ctx.failures();
    let count = failures.entry(object_key(job.as_ref())).or_insert(0);
    *count = count.saturating_add(1);
    Action::requeue(backoff(*count))
}

async fn reconcile<K: Kind>(job: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let reconciler = Reconciler {
        job: job.as_ref(),
        ctx: &ctx,
    };
    let result = reconciler.reconcile().await;
    if result.is_ok() {
        ctx.failures().remove(&object_key(job.as_ref()));
    }
    if let Err(error) = &result {
        // Visible on the job itself (kubectl describe), not only in trainset's log.
        reconciler
            .event(EventType::Warning, "ReconcileError", error.to_string())
            .await;
    }
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&KindLabels {
            framework: K::FRAMEWORK.to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    result
}

struct Reconciler<'a, K> {
    job: &'a K,
    ctx: &'a Context,
}

impl<K: Kind> Reconciler<'_, K> {
    fn name(&self) -> String {
        self.job.name_any()
    }

    fn labels(&self) -> JobLabels {
        JobLabels {
            job_namespace: self.job.namespace().unwrap_or_default(),
            framework: K::FRAMEWORK.to_owned(),
        }
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        let name = self.name();
        let namespace = self.job.namespace().ok_or_else(|| Error::NoNamespace {
            object: name.clone(),
        })?;
        if !self.managed_here() {
            return Ok(Action::await_change());
        }
        let kind = K::kind(&());
        let present: Vec<&str> = K::REPLICA_TYPES
            .iter()
            .copied()
            .filter(|t| self.job.replica_specs().get(t).is_some())
            .collect();
        let subject = Subject {
            kind: &kind,
            name: &name,
            operator_name: K::OPERATOR_NAME,
            replica_types: &present,
            selector: K::REPLICA_SELECTOR,
            detailed_failure: K::DETAILED_FAILURE_REASON,
        };
        let previous = self.job.job_status();
        if previous.is_some_and(status::is_terminal) {
            return self.finish(previous, &namespace).await;
        }

        let jobsets: Api<JobSet> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let jobset = match jobsets
            .get_opt(&name)
            .await
            .map_err(kube_error("getting JobSet", &name))?
        {
            Some(jobset) => {
                self.sync_suspend(&namespace, &jobsets, &jobset).await?;
                jobset
            }
            None => match self.create(&namespace, previous).await? {
                Some(jobset) => jobset,
                None => return Ok(Action::await_change()),
            },
        };

        let jobs: Api<Job> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let selector = format!("{}={name}", jobset_label::JOBSET_NAME);
        let owned = jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(kube_error("listing Jobs of", &name))?;
        let now = Time(Timestamp::now());
        let observed = Observed {
            jobset: Some(&jobset),
            jobs: &owned.items,
        };
        let mut next = status::derive(&subject, previous, &observed, &now);
        let deadline = status::deadline_left(
            self.job
                .run_policy()
                .and_then(|p| p.active_deadline_seconds),
            &next,
            jobset.spec.suspend == Some(true),
            &now,
        );
        if deadline.is_some_and(|left| left.is_zero()) {
            let seconds = self
                .job
                .run_policy()
                .and_then(|p| p.active_deadline_seconds)
                .unwrap_or_default();
            let message = format!(
                "{kind} {name} was active longer than its activeDeadlineSeconds ({seconds}s)."
            );
            let cause = subject.failure("DeadlineExceeded");
            next = status::fail(&subject, Some(&next), cause, &message, &now);
        }
        self.write_status(previous, &next).await?;

        if status::is_terminal(&next) {
            // The terminal state is recorded; only now may the pods go.
            if !jobset_finished(&jobset) {
                jobsets
                    .delete(&name, &DeleteParams::foreground())
                    .await
                    .map_err(kube_error("deleting JobSet", &name))?;
            }
            return self.finish(Some(&next), &namespace).await;
        }
        Ok(match deadline {
            Some(left) => Action::requeue(left + Duration::from_secs(1)),
            None => Action::await_change(),
        })
    }

    /// Hands off a job whose `runPolicy.managedBy` names another controller (MultiKueue).
    fn managed_here(&self) -> bool {
        match self.job.run_policy().and_then(|p| p.managed_by.as_deref()) {
            None => true,
            // The kind's first allowed value is trainset's own.
            Some(manager) => K::MANAGED_BY_VALUES.first() == Some(&manager),
        }
    }

    /// Compiles and creates the JobSet (and MPI objects). `None` when the spec is invalid: the
    /// job is then marked Failed and waits for a change.
    async fn create(
        &self,
        namespace: &str,
        previous: Option<&JobStatus>,
    ) -> Result<Option<JobSet>, Error> {
        let name = self.name();
        // Checked as the apiserver would, so a job stored under an older CRD fails the same way.
        let admitted = serde_json::to_value(self.job)
            .map_err(|e| e.to_string())
            .and_then(|value| admission::admit(&value).map_err(|e| e.to_string()));
        let compiled = match admitted {
            Ok(()) => self.compile(namespace).await?.map_err(|e| e.to_string()),
            Err(reason) => Err(reason),
        };
        let compiled = match compiled {
            Ok(compiled) => compiled,
            Err(reason) => {
                self.invalid(previous, &reason).await?;
                return Ok(None);
            }
        };
        let jobset = match self.write_compiled(namespace, &compiled).await {
            Ok(jobset) => jobset,
            // The apiserver refused what the job compiled to (a pod template field only
            // Kubernetes checks, an object too large): no retry can change that.
            Err(Error::Kube {
                action,
                object,
                source,
            }) if refused_content(&source) => {
                let reason = format!("{action} {object} was refused: {source}");
                self.invalid(previous, &reason).await?;
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let recreated =
            previous.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == status::CREATED));
        if recreated {
            self.event(
                EventType::Warning,
                "JobSetRecreated",
                format!(
                    "JobSet {name} was deleted while the job was not finished; created it again"
                ),
            )
            .await;
        } else {
            self.ctx.metrics.created.get_or_create(&self.labels()).inc();
            if let Some(created) = self.job.meta().creation_timestamp.as_ref() {
                let latency = Timestamp::now().duration_since(created.0).as_secs_f64();
                self.ctx
                    .metrics
                    .jobset_creation_seconds
                    .get_or_create(&KindLabels {
                        framework: K::FRAMEWORK.to_owned(),
                    })
                    .observe(latency.max(0.0));
            }
            self.event(
                EventType::Normal,
                "JobSetCreated",
                format!("Created JobSet {name}"),
            )
            .await;
        }
        Ok(Some(jobset))
    }

    /// Creates the auxiliary objects once, then applies the JobSet.
    async fn write_compiled(&self, namespace: &str, compiled: &Compiled) -> Result<JobSet, Error> {
        let name = self.name();
        if let Some(config_map) = &compiled.config_map {
            let api: Api<ConfigMap> = Api::namespaced(self.ctx.client.clone(), namespace);
            create_once(&api, config_map).await?;
        }
        if let Some(secret) = &compiled.secret {
            let api: Api<Secret> = Api::namespaced(self.ctx.client.clone(), namespace);
            create_once(&api, secret).await?;
        }
        let jobsets: Api<JobSet> = Api::namespaced(self.ctx.client.clone(), namespace);
        jobsets
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&compiled.jobset),
            )
            .await
            .map_err(kube_error("creating JobSet", &name))
    }

    /// Compiles the job (pure); an MPIJob reuses the key of its existing SSH Secret.
    async fn compile(&self, namespace: &str) -> Result<Result<Compiled, CompileError>, Error> {
        let key = if K::NEEDS_SSH_KEY {
            Some(self.ssh_key(namespace).await?)
        } else {
            None
        };
        let options = Options {
            default_namespace: Some(namespace),
            ssh_key: key.as_ref(),
            cluster_domain: self.ctx.cluster_domain.as_deref(),
        };
        Ok(self.job.compile(&options))
    }

    /// The key of an existing `<name>-ssh` Secret (so a recreated JobSet keeps it), or a new one.
    async fn ssh_key(&self, namespace: &str) -> Result<SshKeyPair, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), namespace);
        let name = format!("{}-ssh", self.name());
        let existing = secrets
            .get_opt(&name)
            .await
            .map_err(kube_error("getting Secret", &name))?;
        let text = |secret: &Secret, key: &str| {
            secret
                .data
                .as_ref()?
                .get(key)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
        };
        if let Some(secret) = existing
            && let (Some(private_key), Some(public_key)) = (
                text(&secret, "ssh-privatekey"),
                text(&secret, "ssh-publickey"),
            )
        {
            return Ok(SshKeyPair {
                private_key,
                public_key,
            });
        }
        Ok(SshKeyPair::generate()?)
    }

    async fn invalid(&self, previous: Option<&JobStatus>, error: &str) -> Result<(), Error> {
        let kind = K::kind(&());
        let name = self.name();
        let present: Vec<&str> = Vec::new();
        let subject = Subject {
            kind: &kind,
            name: &name,
            operator_name: K::OPERATOR_NAME,
            replica_types: &present,
            selector: K::REPLICA_SELECTOR,
            detailed_failure: K::DETAILED_FAILURE_REASON,
        };
        let message = format!("{kind} {name} has an invalid spec: {error}");
        let next = status::fail(
            &subject,
            previous,
            "InvalidSpec",
            &message,
            &Time(Timestamp::now()),
        );
        self.write_status(previous, &next).await?;
        self.event(EventType::Warning, "InvalidSpec", message).await;
        Ok(())
    }

    /// Sets the JobSet's `spec.suspend` to the job's where trainset controls it (see
    /// [`suspend`]); a resume also carries the pod-template fields a suspended JobSet may change.
    async fn sync_suspend(
        &self,
        namespace: &str,
        jobsets: &Api<JobSet>,
        jobset: &JobSet,
    ) -> Result<(), Error> {
        let wanted = self
            .job
            .run_policy()
            .and_then(|p| p.suspend)
            .unwrap_or(false);
        let current = jobset.spec.suspend.unwrap_or(false);
        if wanted == current {
            return Ok(());
        }
        let queued = jobset.labels().contains_key(kueue::QUEUE_NAME);
        let control = Control::of(queued, queued && self.has_own_workload().await?);
        let name = self.name();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..Default::default()
        };
        match suspend::change(wanted, current, control) {
            None => {}
            Some(true) => {
                let patch = json!({"spec": {"suspend": true}});
                jobsets
                    .patch(&name, &params, &Patch::Merge(&patch))
                    .await
                    .map_err(kube_error("suspending JobSet", &name))?;
            }
            Some(false) => {
                let compiled = self.compile(namespace).await?.map_err(Error::Compile)?;
                let patch = suspend::resume_patch(jobset, &compiled.jobset);
                jobsets
                    .patch(&name, &params, &Patch::Json::<()>(patch))
                    .await
                    .map_err(kube_error("resuming JobSet", &name))?;
            }
        }
        Ok(())
    }

    /// Whether Kueue queues the training job itself: a Workload carries the job's uid. A
    /// cluster without Kueue has no Workload API, which means no.
    async fn has_own_workload(&self) -> Result<bool, Error> {
        let name = self.name();
        let (Some(namespace), Some(uid)) = (self.job.namespace(), self.job.uid()) else {
            return Ok(false);
        };
        let workloads: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &namespace, &workload_resource());
        let params = ListParams::default()
            .labels(&format!("{}={uid}", kueue::JOB_UID))
            .limit(1);
        match workloads.list_metadata(&params).await {
            Ok(list) => Ok(!list.items.is_empty()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(source) => Err(Error::Kube {
                action: "listing Kueue Workloads of",
                object: name,
                source,
            }),
        }
    }

    /// Patches the status when it changed (timestamps aside) and reports what happened.
    async fn write_status(
        &self,
        previous: Option<&JobStatus>,
        next: &JobStatus,
    ) -> Result<(), Error> {
        let empty = JobStatus::default();
        let previous = previous.unwrap_or(&empty);
        if !status::changed(previous, next) {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(
            self.ctx.client.clone(),
            &self.job.namespace().unwrap_or_default(),
        );
        // Server-side apply: a field this manager stops sending (a count back at 0) is removed.
        let mut body =
            json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": next});
        applicable(&mut body["status"]);
        api.patch_status(
            &self.name(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(kube_error("patching status of", self.name()))?;
        self.report_transitions(previous, next).await;
        Ok(())
    }

    async fn report_transitions(&self, previous: &JobStatus, next: &JobStatus) {
        let became = |type_: &str| {
            let is = |s: &JobStatus| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == "True")
            };
            (!is(previous) && is(next))
                .then(|| next.conditions.iter().find(|c| c.type_ == type_))
                .flatten()
        };
        let note = |c: &crate::api::JobCondition| c.message.clone().unwrap_or_default();
        if let Some(c) = became(status::SUCCEEDED) {
            self.ctx
                .metrics
                .successful
                .get_or_create(&self.labels())
                .inc();
            self.event(
                EventType::Normal,
                c.reason.as_deref().unwrap_or("Succeeded"),
                note(c),
            )
            .await;
        }
        if let Some(c) = became(status::FAILED) {
            self.ctx.metrics.failed.get_or_create(&self.labels()).inc();
            self.event(
                EventType::Warning,
                c.reason.as_deref().unwrap_or("Failed"),
                note(c),
            )
            .await;
        }
        if next.restarts.unwrap_or(0) > previous.restarts.unwrap_or(0) {
            self.ctx
                .metrics
                .restarted
                .get_or_create(&self.labels())
                .inc();
            let message = format!(
                "The JobSet restarted every pod (restart {})",
                next.restarts.unwrap_or(0)
            );
            self.event(
                EventType::Warning,
                &format!("{}Restarting", K::kind(&())),
                message,
            )
            .await;
        }
    }

    /// After the terminal state: `cleanPodPolicy`, then `ttlSecondsAfterFinished`.
    async fn finish(&self, status: Option<&JobStatus>, namespace: &str) -> Result<Action, Error> {
        let name = self.name();
        let policy = self.job.run_policy();
        let selector = format!(
            "{JOB_NAME}={},{OPERATOR_NAME}={}",
            name.replace('/', "-"),
            K::OPERATOR_NAME
        );
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), namespace);
        match policy
            .and_then(|p| p.clean_pod_policy)
            .unwrap_or(CleanPodPolicy::None)
        {
            CleanPodPolicy::None => {}
            clean => {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(kube_error("listing pods of", &name))?;
                for pod in list.items {
                    let phase = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.as_deref())
                        .unwrap_or_default();
                    let running = matches!(phase, "Running" | "Pending");
                    if (clean == CleanPodPolicy::All || running)
                        && pod.metadata.deletion_timestamp.is_none()
                    {
                        let pod_name = pod.name_any();
                        pods.delete(&pod_name, &DeleteParams::background())
                            .await
                            .map_err(kube_error("deleting pod", pod_name))?;
                    }
                }
            }
        }
        let Some(ttl) = policy.and_then(|p| p.ttl_seconds_after_finished) else {
            return Ok(Action::await_change());
        };
        let Some(done) = status.and_then(|s| s.completion_time.as_ref()) else {
            return Ok(Action::await_change());
        };
        let elapsed = Timestamp::now().duration_since(done.0).as_secs();
        let left = i64::from(ttl) - elapsed;
        if left > 0 {
            return Ok(Action::requeue(Duration::from_secs(
                left.unsigned_abs() + 1,
            )));
        }
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), namespace);
        api.delete(&name, &DeleteParams::background())
            .await
            .map_err(kube_error("deleting", &name))?;
        self.ctx.metrics.deleted.get_or_create(&self.labels()).inc();
        tracing::info!(%name, namespace, "deleted after ttlSecondsAfterFinished");
        Ok(Action::await_change())
    }

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(event_note(note)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(error) = self
            .ctx
            .recorder
            .publish(&event, &self.job.object_ref(&()))
            .await
        {
            tracing::warn!(%error, reason, "cannot publish event");
        }
    }
}

/// Server-side apply stores an empty object as null, which the CRD refuses: an empty
/// `replicaStatuses` is left out (the field is then removed), and a replica status with nothing
/// to say (v1 omits zero counts) says `active: 0`.
fn applicable(status: &mut Value) {
    let Some(fields) = status.as_object_mut() else {
        return;
    };
    if fields
        .get("replicaStatuses")
        .and_then(Value::as_object)
        .is_some_and(serde_json::Map::is_empty)
    {
        fields.remove("replicaStatuses");
    }
    if let Some(replicas) = fields
        .get_mut("replicaStatuses")
        .and_then(Value::as_object_mut)
    {
        for replica in replicas.values_mut() {
            if replica.as_object().is_some_and(serde_json::Map::is_empty) {
                replica["active"] = json!(0);
            }
        }
    }
}

/// The apiserver refuses an event whose note exceeds this many bytes.
const MAX_EVENT_NOTE: usize = 1024;

/// `note` cut to what an event may carry (a reconcile error quoting the apiserver runs longer),
/// at a character boundary, marked with an ellipsis.
fn event_note(mut note: String) -> String {
    if note.len() > MAX_EVENT_NOTE {
        let mut end = MAX_EVENT_NOTE - '…'.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

/// Creates `object` unless it exists: auxiliary objects are written once and never updated.
async fn create_once<T>(api: &Api<T>, object: &T) -> Result<(), Error>
where
    T: Resource + Clone + Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..Default::default()
            },
            object,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube {
            action: "creating",
            object: name,
            source,
        }),
    }
}

/// Whether the JobSet reached a terminal state.
fn jobset_finished(jobset: &JobSet) -> bool {
    jobset
        .status
        .as_ref()
        .and_then(|s| s.terminal_state.as_deref())
        .is_some_and(|s| s == terminal_state::COMPLETED || s == terminal_state::FAILED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        let status: kube::core::Status =
            serde_json::from_value(json!({"code": code, "message": "refused"})).unwrap_or_default();
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
        assert!(!Error::NoJobSetCrd.is_permanent());
    }

    #[test]
    fn retries_back_off_from_one_second_to_five_minutes() {
        let delays: Vec<u64> = [1, 2, 3, 8, 9, 10, 100]
            .map(|n| backoff(n).as_secs())
            .to_vec();
        assert_eq!(delays, [2, 4, 8, 256, 300, 300, 300]);
    }

    #[test]
    fn a_status_is_applied_without_empty_objects() {
        let mut created_suspended = json!({"replicaStatuses": {}, "state": "Suspended"});
        applicable(&mut created_suspended);
        assert_eq!(created_suspended, json!({"state": "Suspended"}));
        let mut ended = json!({"replicaStatuses": {"Worker": {}, "Launcher": {"succeeded": 1}}});
        applicable(&mut ended);
        assert_eq!(
            ended,
            json!({"replicaStatuses": {"Worker": {"active": 0}, "Launcher": {"succeeded": 1}}})
        );
    }

    #[test]
    fn event_notes_are_cut_to_what_the_apiserver_takes() {
        assert_eq!(event_note("short".to_owned()), "short");
        let long = event_note("é".repeat(2000));
        assert!(long.len() <= MAX_EVENT_NOTE, "{}", long.len());
        assert!(long.ends_with('…'));
    }
}
