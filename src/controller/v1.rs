//! The v1 family in the reconcile loop: one controller per served kind, each job fetched from
//! the caches, planned by `plan::v1`, written and reported; while its JobSet cannot be created
//! yet the job says so in its `Created` condition.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use jobset_types::keys::label as jobset_label;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;

use super::apply::{self, Applied};
use super::decode::Undecodable;
use super::fetch;
use super::packed::Packed;
use super::reconcile::{self, Family, Lookup, Writes, key_of};
use super::{Context, Error, Shutdown, StatusWrite, UnseenWrite, caches, report};
use crate::kinds::Served;
use crate::plan::Happened;
use crate::plan::v1 as plan;

/// The v1 family's context for the kind `K`: the shared one, typed by kind.
struct V1<K> {
    base: Arc<Context>,
    kind: PhantomData<fn() -> K>,
}

/// Runs the controller of the kind `K` until `shutdown`: its jobs, woken too by their JobSets
/// and Jobs from the shared watches.
pub async fn controller<K: Served>(
    base: Arc<Context>,
    triggers: caches::Triggers,
    config: ControllerConfig,
    shutdown: Shutdown,
) {
    let (jobs, changes) = reconcile::jobs::<K>(&base);
    let mut controller = Controller::for_stream(changes, jobs)
        .with_config(config)
        .owns_stream(triggers.jobsets)
        .watches_stream(triggers.jobs, |job| {
            let name = job.label(jobset_label::JOBSET_NAME);
            name.zip(job.namespace())
                .map(|(name, ns)| ObjectRef::<Packed<K>>::new(&name).within(&ns))
        });
    controller = controller.watches_stream(triggers.foreign_pods, |pod| {
        caches::job_of_foreign_pod::<Packed<K>>(&pod)
    });
    if let Some(pods) = triggers.pods {
        controller = controller.watches_stream(pods, |pod| {
            let labels = pod.metadata.labels.as_ref()?;
            let name = labels.get(jobset_label::JOBSET_NAME)?;
            let namespace = pod.metadata.namespace.as_ref()?;
            Some(ObjectRef::<Packed<K>>::new(name).within(namespace))
        });
    }
    let ctx = Arc::new(V1::<K> {
        base,
        kind: PhantomData,
    });
    reconcile::drive(controller, ctx, shutdown).await;
}

impl<K: Served> Family for V1<K> {
    type Job = K;

    fn base(&self) -> &Context {
        &self.base
    }

    fn framework(&self) -> &str {
        K::FRAMEWORK
    }

    async fn reconcile_job(&self, job: &K) -> Result<Action, Error> {
        let newer = with_own_status(job, &self.base);
        fetch_plan_apply_report(newer.as_ref().unwrap_or(job), self).await
    }

    /// A job whose JobSet cannot be created yet says why in `Created` False, once per reason.
    /// A failure to say so is only logged: the reconcile's own error is what counts.
    async fn retrying(&self, job: &K, error: &Error) {
        let Some(namespace) = job.namespace() else {
            return;
        };
        let now = Time(Timestamp::now());
        let Some(status) = plan::creation_retrying(job, &error.to_string(), &now) else {
            return;
        };
        if let Err(write) =
            apply::write_status::<K>(job.meta(), &namespace, &status, &self.base).await
        {
            tracing::warn!(job = %job.name_any(), error = %write, "cannot write the retry condition");
        }
    }

    fn forget(&self, key: &str) {
        self.base.status_writes().remove(key);
        self.base.launcher_roles().remove(key);
        self.base.gang_generations().remove(key);
    }
}

/// The key of a job in [`Context::status_writes`] and the failure counts.
pub fn job_key<K: Served>(job: &K) -> String {
    key_of::<K>(&job.namespace().unwrap_or_default(), &job.name_any())
}

/// The job as this process last wrote it, if the job cache has not caught up with that write.
/// Once it has, only the write's time is kept; a finished job's entry is dropped.
fn with_own_status<K: Served>(job: &K, ctx: &Context) -> Option<K> {
    let key = job_key(job);
    let mut writes = ctx.status_writes();
    let write = writes.get_mut(&key)?;
    if let Some(status) = write.newer_than(job.resource_version().as_deref()) {
        let mut newer = job.clone();
        newer.set_job_status(status.clone());
        return Some(newer);
    }
    write.unseen = None;
    if plan::ended(job) {
        writes.remove(&key);
    }
    None
}

/// fetch → plan → write → report, and the status written remembered until the cache shows it.
async fn fetch_plan_apply_report<K: Served>(job: &K, ctx: &V1<K>) -> Result<Action, Error> {
    let namespace = job.namespace().ok_or_else(|| Error::NoNamespace {
        object: job.name_any(),
    })?;
    let now = Time(Timestamp::now());
    let plan = reconcile::settle(ctx, job, &namespace, &now).await?;
    if let Some(status) = &plan.status {
        let write = StatusWrite {
            at: Instant::now(),
            unseen: Some(UnseenWrite {
                over: job.resource_version(),
                status: status.clone(),
            }),
        };
        ctx.base.status_writes().insert(job_key(job), write);
    }
    report::report(job, &plan.happened, &ctx.base).await;
    Ok(reconcile::next(plan.requeue))
}

impl<K: Served> Writes for V1<K> {
    type Plan = plan::Plan;

    async fn plan(
        &self,
        job: &K,
        namespace: &str,
        lookup: Lookup,
        now: &Time,
    ) -> Result<plan::Plan, Error> {
        let mut fetched = fetch::fetch(job, namespace, lookup, &self.base).await?;
        Ok(plan::plan(fetched.facts(job, now))?)
    }

    async fn write(&self, job: &K, namespace: &str, plan: &plan::Plan) -> Result<Applied, Error> {
        apply::apply(job, namespace, plan, &self.base).await
    }

    fn refused(&self, job: &K, reason: String, now: &Time) -> plan::Plan {
        plan::invalid(job, &reason, now)
    }

    fn taken(&self, job: &K, message: String, now: &Time) -> plan::Plan {
        plan::resource_taken(job, message, now)
    }

    fn earlier(&self, job: &K, object: &str) -> plan::Plan {
        plan::wait_for_earlier::<K>(job, object)
    }

    fn unreadable(&self, name: &str, unreadable: &Undecodable, now: &Time) -> plan::Plan {
        plan::unreadable::<K>(name, unreadable, now)
    }

    async fn write_status(
        &self,
        job: &ObjectMeta,
        namespace: &str,
        plan: &plan::Plan,
    ) -> Result<bool, Error> {
        let Some(status) = &plan.status else {
            return Ok(false);
        };
        apply::write_status::<K>(job, namespace, status, &self.base).await?;
        Ok(true)
    }

    fn happened(plan: &plan::Plan) -> &[Happened] {
        &plan.happened
    }
}
