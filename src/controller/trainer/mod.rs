//! The TrainJob controller (Kubeflow Trainer v2's API), beside the v1 kinds' in the same process:
//! the same JobSet watch, leader election, events and metrics. A reconcile reads fetch → plan →
//! apply → report like a v1 one; the runtimes come from watches of their own, and a TrainJob
//! waiting for its runtime is woken when that runtime appears.

mod runtimes;

use std::sync::Arc;

use futures::StreamExt;
use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use runtimes::{Runtimes, naming};

use super::apply::{self, Applied};
use super::caches::Trigger;
use super::decode::{Decoded, Undecodable};
use super::reconcile::{self, Family, Lookup, Writes};
use super::{Context, Error, Shutdown, kube_error, report};
use crate::api::trainer::{ClusterTrainingRuntime, TrainJob, TrainJobStatus, TrainingRuntime};
use crate::compile::trainer::{self, Runtime, RuntimeKind, snapshot};
use crate::compile::{MANAGED_BY, SshKeyPair, TRAINSET};
use crate::plan::trainer::{
    self as plan, Compiled, Facts, Plan, RUNTIME_NOT_SUPPORTED, Unrunnable,
};
use crate::plan::{
    Happened, Holder, RESOURCE_EXISTS, holder, resource_exists, waiting_for_earlier,
};

/// The `framework` label of TrainJob metrics whose runtime is not known (any more).
const FRAMEWORK: &str = "trainjob";

/// Whether the apiserver serves TrainJobs (the Trainer CRDs are installed).
pub async fn served(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&TrainJob::api_version(&()))
        .await
    {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == TrainJob::plural(&()))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

struct TrainJobContext {
    base: Arc<Context>,
    runtimes: Runtimes,
}

impl Family for TrainJobContext {
    type Job = TrainJob;

    fn base(&self) -> &Context {
        &self.base
    }

    fn framework(&self) -> &str {
        FRAMEWORK
    }

    async fn reconcile_job(&self, job: &TrainJob) -> Result<Action, Error> {
        fetch_plan_apply_report(job, self).await
    }
}

/// Runs the TrainJob controller until `shutdown`.
pub async fn run(
    base: Arc<Context>,
    jobsets: Trigger<JobSet>,
    config: ControllerConfig,
    shutdown: Shutdown,
) {
    let client = base.watch_client.clone();
    let (jobs, changes) = reconcile::jobs::<TrainJob>(&base);
    let (namespaced, namespaced_writer) = reflector::store();
    let (cluster, cluster_writer) = reflector::store();
    let ctx = Arc::new(TrainJobContext {
        base,
        runtimes: Runtimes {
            namespaced,
            cluster,
        },
    });
    let (mut namespaced_health, mut cluster_health) =
        (ctx.base.readiness.watch(), ctx.base.readiness.watch());
    let namespaced_runtimes = watcher(
        Api::<Decoded<TrainingRuntime>>::all(client.clone()),
        ctx.base.listing.config(),
    )
    .default_backoff()
    .inspect(move |event| namespaced_health.record(event))
    .modify(|r| r.managed_fields_mut().clear())
    .reflect(namespaced_writer)
    .applied_objects();
    let cluster_runtimes = watcher(
        Api::<Decoded<ClusterTrainingRuntime>>::all(client),
        ctx.base.listing.config(),
    )
    .default_backoff()
    .inspect(move |event| cluster_health.record(event))
    .modify(|r| r.managed_fields_mut().clear())
    .reflect(cluster_writer)
    .applied_objects();
    let (waiting_namespaced, waiting_cluster) = (jobs.clone(), jobs.clone());
    let controller = Controller::for_stream(changes, jobs)
        .with_config(config)
        .owns_stream(jobsets)
        .watches_stream(
            namespaced_runtimes,
            move |runtime: Decoded<TrainingRuntime>| {
                let namespace = runtime.namespace();
                naming(
                    &waiting_namespaced,
                    RuntimeKind::Namespaced,
                    Some(namespace.as_deref().unwrap_or_default()),
                    &runtime.name_any(),
                )
            },
        )
        .watches_stream(
            cluster_runtimes,
            move |runtime: Decoded<ClusterTrainingRuntime>| {
                naming(
                    &waiting_cluster,
                    RuntimeKind::Cluster,
                    None,
                    &runtime.name_any(),
                )
            },
        );
    reconcile::drive(controller, ctx, shutdown).await;
}

async fn fetch_plan_apply_report(job: &TrainJob, ctx: &TrainJobContext) -> Result<Action, Error> {
    if !plan::managed_here(job) {
        return Ok(Action::await_change());
    }
    let namespace = job.namespace().ok_or_else(|| Error::NoNamespace {
        object: job.name_any(),
    })?;
    let now = Time(Timestamp::now());
    let plan = reconcile::settle(ctx, job, &namespace, &now).await?;
    let framework = ctx.runtimes.framework(job);
    report::report_as(job, &framework, &plan.happened, &ctx.base).await;
    Ok(reconcile::next(plan.requeue))
}

/// The plan of a TrainJob that cannot run, for the reason `unrunnable` gives.
fn unrunnable(job: &TrainJob, unrunnable: Unrunnable, now: &Time) -> Plan {
    plan::plan(Facts {
        job,
        jobset: None,
        compiled: Some(Err(unrunnable)),
        now: now.clone(),
        creation_failure: None,
    })
}

impl Writes for TrainJobContext {
    type Plan = Plan;

    async fn plan(
        &self,
        job: &TrainJob,
        namespace: &str,
        lookup: Lookup,
        now: &Time,
    ) -> Result<Plan, Error> {
        let name = job.name_any();
        let jobset = match lookup {
            Lookup::Cache => self.base.caches.jobset(namespace, &name),
            Lookup::Live => Api::<JobSet>::namespaced(self.base.client.clone(), namespace)
                .get_opt(&name)
                .await
                .map_err(kube_error("getting JobSet", &name))?,
        };
        plan_with(job, jobset.as_ref(), namespace, now, self).await
    }

    async fn write(&self, job: &TrainJob, namespace: &str, plan: &Plan) -> Result<Applied, Error> {
        apply(job, namespace, plan, self).await
    }

    fn refused(&self, job: &TrainJob, reason: String, now: &Time) -> Plan {
        unrunnable(job, plan::invalid(&job.name_any(), reason), now)
    }

    fn taken(&self, job: &TrainJob, message: String, now: &Time) -> Plan {
        let taken = Unrunnable {
            reason: RESOURCE_EXISTS,
            message,
        };
        unrunnable(job, taken, now)
    }

    fn earlier(&self, job: &TrainJob, object: &str) -> Plan {
        plan::wait_for_earlier(&job.name_any(), object)
    }

    fn unreadable(&self, name: &str, unreadable: &Undecodable, now: &Time) -> Plan {
        plan::unreadable(name, unreadable, now)
    }

    async fn write_status(
        &self,
        job: &ObjectMeta,
        namespace: &str,
        plan: &Plan,
    ) -> Result<bool, Error> {
        let Some(status) = &plan.status else {
            return Ok(false);
        };
        write_status(job, namespace, status, &self.base).await?;
        Ok(true)
    }

    fn happened(plan: &Plan) -> &[Happened] {
        &plan.happened
    }
}

async fn plan_with(
    job: &TrainJob,
    jobset: Option<&JobSet>,
    namespace: &str,
    now: &Time,
    ctx: &TrainJobContext,
) -> Result<Plan, Error> {
    let compiled = if plan::needs_compiled(job, jobset) {
        Some(compile(job, namespace, ctx).await?)
    } else {
        None
    };
    Ok(plan::plan(Facts {
        job,
        jobset,
        compiled,
        now: now.clone(),
        creation_failure: jobset.and_then(|js| ctx.base.caches.creation_failure(js)),
    }))
}

/// The TrainJob compiled against its runtime: the snapshot when the TrainJob has one, else the
/// runtime as the watch has it (and a snapshot of it to create). A runtime that does not exist
/// (yet) is an error to retry, not a failure of the TrainJob.
async fn compile(
    job: &TrainJob,
    namespace: &str,
    ctx: &TrainJobContext,
) -> Result<Result<Compiled, Unrunnable>, Error> {
    let name = job.name_any();
    let (kind, runtime_name) = match trainer::runtime_ref(job) {
        Ok(reference) => reference,
        Err(error) => {
            return Ok(Err(Unrunnable {
                reason: RUNTIME_NOT_SUPPORTED,
                message: format!("TrainJob {name}: {error}"),
            }));
        }
    };
    let snapshot_name = snapshot::name(&name);
    let kept = Api::<ConfigMap>::namespaced(ctx.base.client.clone(), namespace)
        .get_opt(&snapshot_name)
        .await
        .map_err(kube_error("getting ConfigMap", &snapshot_name))?;
    let described = format!("ConfigMap {snapshot_name}");
    let kept = match kept
        .as_ref()
        .map(|cm| holder(cm.meta(), "TrainJob", &name, job.uid().as_deref()))
    {
        None => None,
        Some(Holder::This) => kept,
        // Left by an earlier TrainJob of this name: its runtime is not this one's.
        Some(Holder::Earlier) => {
            return Err(Error::Waiting {
                message: waiting_for_earlier(&described, "TrainJob", &name),
            });
        }
        Some(Holder::Foreign(holder)) => {
            return Ok(Err(Unrunnable {
                reason: RESOURCE_EXISTS,
                message: resource_exists(&described, &holder, "TrainJob", &name),
            }));
        }
    };
    let (runtime, new_snapshot) = match kept {
        Some(config_map) => match snapshot::restore(&config_map, kind, runtime_name) {
            Ok(runtime) => (runtime, None),
            Err(error) => return Ok(Err(plan::invalid(&name, error))),
        },
        None => {
            let runtime = ctx
                .runtimes
                .get(kind, namespace, runtime_name)
                .ok_or_else(|| Error::RuntimeMissing {
                    runtime: format!("{kind} {runtime_name}"),
                    job: format!("{namespace}/{name}"),
                })?
                .map_err(|error| Error::RuntimeUnreadable {
                    runtime: format!("{kind} {runtime_name}"),
                    error,
                })?;
            match snapshot::snapshot(job, &runtime) {
                Ok(config_map) => (runtime, Some(config_map)),
                Err(error) => return Ok(Err(plan::invalid(&name, error))),
            }
        }
    };
    let resolved = Runtime {
        kind,
        name: runtime_name,
        spec: runtime.spec(),
    };
    let ssh_key = match trainer::ssh_secret(&name, resolved.spec) {
        Some(secret) => new_ssh_key(&secret, namespace, ctx).await?,
        None => None,
    };
    Ok(trainer::compile_trainjob(job, &resolved, ssh_key.as_ref())
        .map(|objects| Compiled {
            snapshot: new_snapshot,
            objects,
        })
        .map_err(|error| plan::invalid(&name, error)))
}

/// A key pair for the TrainJob's SSH Secret `name`, unless that (immutable) Secret exists
/// already.
async fn new_ssh_key(
    name: &str,
    namespace: &str,
    ctx: &TrainJobContext,
) -> Result<Option<SshKeyPair>, Error> {
    let existing = Api::<Secret>::namespaced(ctx.base.client.clone(), namespace)
        .get_metadata_opt(name)
        .await
        .map_err(kube_error("getting Secret", name))?;
    match existing {
        Some(_) => Ok(None),
        None => Ok(Some(SshKeyPair::generate()?)),
    }
}

/// Carries out the plan: the snapshot once, the JobSet, its suspension, the status, the
/// JobSet's deletion.
async fn apply(
    job: &TrainJob,
    namespace: &str,
    plan: &Plan,
    ctx: &TrainJobContext,
) -> Result<Applied, Error> {
    // Every field, so that one added to the plan and not written here does not compile.
    let Plan {
        create,
        suspend,
        status,
        delete_jobset,
        label_jobset,
        happened: _,
        requeue: _,
    } = plan;
    let name = job.name_any();
    let client = &ctx.base.client;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), namespace);
    if let Some(compiled) = create {
        if let Some(config_map) = &compiled.snapshot {
            let config_maps = Api::namespaced(client.clone(), namespace);
            if let Some(stop) = apply::create_once(&config_maps, config_map).await? {
                return Ok(stop);
            }
        }
        match apply::create(namespace, &compiled.objects, &ctx.base).await? {
            Applied::Done => {}
            other => return Ok(other),
        }
    }
    if *label_jobset {
        let label = json!({"metadata": {"labels": {MANAGED_BY: TRAINSET}}});
        jobsets
            .patch(&name, &PatchParams::default(), &Patch::Merge(label))
            .await
            .map_err(kube_error("labelling JobSet", &name))?;
    }
    if let Some(write) = suspend {
        match apply::suspend(namespace, &name, write, &ctx.base).await? {
            Applied::Done => {}
            other => return Ok(other),
        }
    }
    if let Some(status) = status {
        write_status(job.meta(), namespace, status, &ctx.base).await?;
    }
    if *delete_jobset {
        jobsets
            .delete(&name, &DeleteParams::background())
            .await
            .map_err(kube_error("deleting JobSet", &name))?;
    }
    Ok(Applied::Done)
}

async fn write_status(
    job: &ObjectMeta,
    namespace: &str,
    status: &TrainJobStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let status = serde_json::to_value(status).map_err(|source| Error::Encode {
        object: job.name.clone().unwrap_or_default(),
        source,
    })?;
    let resource = ApiResource::erase::<TrainJob>(&());
    apply::apply_status(&resource, job, namespace, status, ctx).await
}
