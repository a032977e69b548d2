//! Gathers what [`plan`](super::plan) needs: the JobSet and its Jobs from the caches, and only
//! when the plan needs them the compiled job and Kueue's Workload. A lagging cache never causes a
//! duplicate or a spurious "recreated": a JobSet is only ever created (never applied over one that
//! exists), and one that trainset made before and is missing from the cache is looked up live.

use jobset_types::JobSet;
use jobset_types::keys::{kueue, label as jobset_label};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use super::reconcile::Lookup;
use super::{Context, Error, kube_error};
use crate::admission;
use crate::compile::gang::GangScheduler;
use crate::compile::{Options, SshKeyPair};
use crate::kinds::Served;
use crate::plan::v1::{self as plan, Facts, takeover};
use crate::plan::{deleting, jobs_show_end, jobset_finished};

/// What the caches and, where needed, the apiserver say about `job`.
pub struct Fetched {
    pub jobset: Option<JobSet>,
    pub jobs: Vec<Job>,
    pub compiled: Option<Result<crate::compile::Compiled, String>>,
    pub own_workload: bool,
    pub since_status_write: Option<std::time::Duration>,
    /// What Kubernetes said it cannot create for the JobSet, while it runs.
    pub creation_failure: Option<String>,
    /// The HorizontalPodAutoscaler of the job's name, read when the job asks for one.
    pub autoscaler: Option<Option<HorizontalPodAutoscaler>>,
    /// The pods its launcher execs into, for a job whose launcher does (from the pods cache).
    pub exec_targets: Option<Vec<String>>,
    /// What a previous operator made for a job that may have run before trainset took over.
    pub foreign: Foreign,
}

/// A previous operator's objects, as [`takeover::Foreign`] reads them.
#[derive(Default)]
pub struct Foreign {
    pods: Vec<Pod>,
    launcher: Option<Option<Job>>,
    services: Vec<(String, String)>,
}

impl Fetched {
    pub fn facts<'a, K>(&'a mut self, job: &'a K, now: &Time) -> Facts<'a, K> {
        Facts {
            job,
            jobset: self.jobset.as_ref(),
            jobs: &self.jobs,
            compiled: self.compiled.take(),
            own_workload: self.own_workload,
            now: now.clone(),
            since_status_write: self.since_status_write,
            creation_failure: self.creation_failure.take(),
            autoscaler: self.autoscaler.as_ref().map(Option::as_ref),
            exec_targets: self.exec_targets.as_deref(),
            foreign: takeover::Foreign {
                pods: &self.foreign.pods,
                launcher: self.foreign.launcher.as_ref().map(Option::as_ref),
                services: &self.foreign.services,
            },
        }
    }
}

pub async fn fetch<K: Served>(
    job: &K,
    namespace: &str,
    lookup: Lookup,
    ctx: &Context,
) -> Result<Fetched, Error> {
    let name = job.name_any();
    let mut fetched = Fetched {
        jobset: None,
        jobs: Vec::new(),
        compiled: None,
        own_workload: false,
        since_status_write: ctx
            .status_writes()
            .get(&super::v1::job_key(job))
            .map(|write| write.at.elapsed()),
        creation_failure: None,
        autoscaler: None,
        exec_targets: None,
        foreign: Foreign::default(),
    };
    if !plan::managed_here(job) || plan::ended(job) || deleting(job) {
        return Ok(fetched);
    }
    fetched.jobset = match ctx.caches.jobset(namespace, &name) {
        Some(jobset) => Some(jobset),
        None if lookup == Lookup::Cache && !plan::had_jobset(job) => None,
        None => Api::<JobSet>::namespaced(ctx.client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(kube_error("getting JobSet", &name))?,
    };
    if let Some(jobset) = &fetched.jobset {
        fetched.exec_targets = job
            .exec_targets()
            .map(|replicated| ctx.caches.pods_of(namespace, &name, replicated));
        fetched.jobs = ctx.caches.jobs_of(jobset);
        if !jobset_finished(jobset) {
            fetched.creation_failure = ctx.caches.creation_failure(jobset);
        } else if !jobs_show_end(jobset, &fetched.jobs) {
            // The final counts are written once and never again: when the Job cache is behind
            // the JobSet cache, they come from the apiserver.
            let selector = format!("{}={name}", jobset_label::JOBSET_NAME);
            fetched.jobs = Api::<Job>::namespaced(ctx.client.clone(), namespace)
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(kube_error("listing Jobs of", &name))?
                .items;
        }
    }
    if fetched.jobset.is_none() && takeover::may_have_run_before(job) {
        fetched.foreign = foreign(job, namespace, ctx).await?;
    }
    let gang_behind = ctx.gang_scheduler.follows_the_spec()
        && ctx.gang_generations().get(&super::v1::job_key(job)) != job.meta().generation.as_ref();
    let needs = plan::needs(job, fetched.jobset.as_ref(), gang_behind);
    if needs.compiled {
        fetched.compiled = Some(compile(job, namespace, &ctx.compiling())?);
    }
    if needs.workload {
        fetched.own_workload = has_own_workload(job, ctx).await?;
    }
    if needs.autoscaler {
        // Not cached: only jobs that ask for an autoscaler read it, one GET per reconcile.
        let autoscaler = Api::<HorizontalPodAutoscaler>::namespaced(ctx.client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(kube_error("getting HorizontalPodAutoscaler", &name))?;
        fetched.autoscaler = Some(autoscaler);
    }
    Ok(fetched)
}

/// What a previous operator made for `job`: its pods and Services from the caches, and
/// mpi-operator's launcher Job, which no cache holds, from the apiserver.
async fn foreign<K: Served>(job: &K, namespace: &str, ctx: &Context) -> Result<Foreign, Error> {
    let name = job.name_any();
    let launcher = match takeover::launcher_job(job) {
        Some(launcher) => Some(
            Api::<Job>::namespaced(ctx.client.clone(), namespace)
                .get_opt(&launcher)
                .await
                .map_err(kube_error("getting Job", &launcher))?,
        ),
        None => None,
    };
    let uid = job.uid().unwrap_or_default();
    Ok(Foreign {
        pods: ctx.caches.foreign_pods(namespace, &name),
        launcher,
        services: ctx.caches.services_controlled_by(namespace, &uid),
    })
}

/// What the controller compiles jobs with, besides the job.
pub struct Compiling<'a> {
    pub cluster_domain: Option<&'a str>,
    pub gang_scheduler: &'a GangScheduler,
    pub kubectl_delivery_image: &'a str,
}

/// The job checked as the apiserver would (so a job stored under an older CRD fails the same
/// way) and compiled; `Err` says why its spec is invalid.
pub fn compile<K: Served>(
    job: &K,
    namespace: &str,
    with: &Compiling<'_>,
) -> Result<Result<crate::compile::Compiled, String>, Error> {
    let admitted = serde_json::to_value(job)
        .map_err(|e| e.to_string())
        .and_then(|value| admission::admit(&value).map_err(|e| e.to_string()));
    if let Err(reason) = admitted {
        return Ok(Err(reason));
    }
    // A new key pair each time: the Secret is created once, and one that exists (made by an
    // earlier reconcile) is kept and never read, so the key never leaves it.
    let key = if job.needs_ssh_key() {
        Some(SshKeyPair::generate()?)
    } else {
        None
    };
    let options = Options {
        default_namespace: Some(namespace),
        ssh_key: key.as_ref(),
        cluster_domain: with.cluster_domain,
        gang_scheduler: Some(with.gang_scheduler),
        kubectl_delivery_image: Some(with.kubectl_delivery_image),
    };
    Ok(job.compile(&options).map_err(|e| e.to_string()))
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

/// Whether Kueue queues the training job itself: a Workload carries the job's uid. A cluster
/// without Kueue has no Workload API, which means no.
async fn has_own_workload<K: Served>(job: &K, ctx: &Context) -> Result<bool, Error> {
    let (Some(namespace), Some(uid)) = (job.namespace(), job.uid()) else {
        return Ok(false);
    };
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &workload_resource());
    let params = ListParams::default()
        .labels(&format!("{}={uid}", kueue::JOB_UID))
        .limit(1);
    match workloads.list_metadata(&params).await {
        Ok(list) => Ok(!list.items.is_empty()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(Error::Kube {
            action: "listing Kueue Workloads of",
            object: job.name_any(),
            source,
        }),
    }
}
