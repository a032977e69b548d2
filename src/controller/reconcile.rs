//! The one reconcile loop both API families run. A family says what it does with one job
//! (fetch → plan → write → report, and what to do with a job the types cannot read); the loop
//! around it is here once: the watch of the family's jobs, the error policy and its backoff, the
//! Warning event an error puts on the job, the reconcile timer, and forgetting a job that is gone.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::apply::Applied;
use super::decode::{Decoded, Undecodable};
use super::packed::Packed;
use super::{Context, Error, Shutdown, report};
use crate::plan::Happened;
use crate::telemetry::KindLabels;

/// What one API family does with one of its jobs. `Self` is the family's context, which holds
/// the shared [`Context`].
pub trait Family: Send + Sync + 'static {
    type Job: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static;

    fn base(&self) -> &Context;

    /// The `framework` label of the reconcile timer.
    fn framework(&self) -> &str;

    /// fetch → plan → write → report, for a job that was read.
    fn reconcile_job(&self, job: &Self::Job) -> impl Future<Output = Result<Action, Error>> + Send;

    /// Said on the job while a transient `error` keeps it from running; nothing by default.
    fn retrying(&self, _job: &Self::Job, _error: &Error) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Forgets what the family keeps about the job under `key` once the job is gone.
    fn forget(&self, _key: &str) {}
}

/// How a family plans and writes one job, for [`settle`].
pub trait Writes: Family {
    type Plan: Send + Sync;

    /// The plan from the job, its JobSet as `lookup` finds it, and the time.
    fn plan(
        &self,
        job: &Self::Job,
        namespace: &str,
        lookup: Lookup,
        now: &Time,
    ) -> impl Future<Output = Result<Self::Plan, Error>> + Send;

    /// Carries `plan` out.
    fn write(
        &self,
        job: &Self::Job,
        namespace: &str,
        plan: &Self::Plan,
    ) -> impl Future<Output = Result<Applied, Error>> + Send;

    /// The plan of a job Kubernetes refused for its content: failed with the `reason`.
    fn refused(&self, job: &Self::Job, reason: String, now: &Time) -> Self::Plan;

    /// The plan of a job an object of whose names is someone else's (`message` says whose).
    fn taken(&self, job: &Self::Job, message: String, now: &Time) -> Self::Plan;

    /// The plan of a job waiting for an earlier job's `object` to go.
    fn earlier(&self, job: &Self::Job, object: &str) -> Self::Plan;

    /// The plan of the job `name` the types cannot read: failed, naming the field.
    fn unreadable(&self, name: &str, unreadable: &Undecodable, now: &Time) -> Self::Plan;

    /// Writes the plan's status, if it has one, over the job `job` (given by its metadata, as an
    /// unreadable job has no other); whether it wrote.
    fn write_status(
        &self,
        job: &ObjectMeta,
        namespace: &str,
        plan: &Self::Plan,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// What happened, for the job's events and metrics.
    fn happened(plan: &Self::Plan) -> &[Happened];
}

/// Where a JobSet missing from the cache is looked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The cache is believed for a job that never had a JobSet: creating it then fails if the
    /// cache was only late, and the reconcile looks again [`Live`](Lookup::Live).
    Cache,
    /// The apiserver is asked.
    Live,
}

/// Plans and writes `job` until the writes are done or a plan for how they ended is written: a
/// JobSet the cache had not seen is planned again from the apiserver's; a refusal of the job's
/// content fails it; a name someone else holds fails it; an earlier job's object is waited out.
pub async fn settle<F: Writes>(
    ctx: &F,
    job: &F::Job,
    namespace: &str,
    now: &Time,
) -> Result<F::Plan, Error> {
    let mut plan = ctx.plan(job, namespace, Lookup::Cache, now).await?;
    let mut applied = ctx.write(job, namespace, &plan).await?;
    if let Applied::Exists = applied {
        // The JobSet cache was behind (or the name is someone else's): plan from the apiserver's.
        plan = ctx.plan(job, namespace, Lookup::Live, now).await?;
        applied = ctx.write(job, namespace, &plan).await?;
    }
    match applied {
        Applied::Done => {}
        Applied::Refused(reason) => {
            plan = ctx.refused(job, reason, now);
            ctx.write(job, namespace, &plan).await?;
        }
        Applied::Foreign(message) => {
            plan = ctx.taken(job, message, now);
            ctx.write(job, namespace, &plan).await?;
        }
        Applied::Earlier(object) => plan = ctx.earlier(job, &object),
        // Made and deleted again by someone else between the two looks: try again later.
        Applied::Exists => {
            return Err(Error::CreateRace {
                object: job.name_any(),
            });
        }
    }
    Ok(plan)
}

/// What the loop does after a plan: look again after `requeue`, or when something changes.
pub fn next(requeue: Option<Duration>) -> Action {
    match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    }
}

/// The key under which the loop counts a job's failures: `<kind>/<namespace>/<name>`.
pub fn key_of<R: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", R::kind(&()))
}

fn object_key<R: Resource<DynamicType = ()>>(job: &R) -> String {
    key_of::<R>(&job.namespace().unwrap_or_default(), &job.name_any())
}

/// The family's jobs as the controller is to see them: packed in the returned store (each is read
/// into its type by the reconcile that needs it, so an unreadable one stops nothing), their watch
/// health reported, and passed on only when their generation changes (their status writes,
/// trainset's own, wake nothing).
pub fn jobs<J>(
    ctx: &Context,
) -> (
    Store<Packed<J>>,
    impl Stream<Item = Result<Packed<J>, watcher::Error>> + Send + 'static,
)
where
    J: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let mut health = ctx.readiness.watch();
    let changes = watcher(
        Api::<Packed<J>>::all(ctx.watch_client.clone()),
        ctx.listing.config(),
    )
    .default_backoff()
    .inspect(move |event| health.record(event))
    .reflect(writer)
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default());
    (store, changes)
}

/// Runs `controller` (the family's jobs and what wakes them) until `shutdown`.
pub async fn drive<F: Writes>(
    controller: Controller<Packed<F::Job>>,
    ctx: Arc<F>,
    shutdown: Shutdown,
) {
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<F>, error_policy::<F>, ctx.clone())
        .for_each(|result| {
            let ctx = ctx.clone();
            async move { finished(result, ctx.as_ref()) }
        })
        .boxed()
        .await;
}

/// A job the types cannot read fails `InvalidSpec` naming the field, once; every other job of
/// its kind runs on.
async fn reconcile_unreadable<F: Writes>(
    ctx: &F,
    decoded: &Decoded<F::Job>,
    unreadable: &Undecodable,
) -> Result<Action, Error> {
    let name = decoded.name_any();
    let namespace = decoded.namespace().ok_or_else(|| Error::NoNamespace {
        object: name.clone(),
    })?;
    if decoded.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let plan = ctx.unreadable(&name, unreadable, &Time(Timestamp::now()));
    if ctx.write_status(decoded.meta(), &namespace, &plan).await? {
        ctx.base()
            .metrics
            .unreadable
            .get_or_create(&KindLabels {
                framework: ctx.framework().to_owned(),
            })
            .inc();
    }
    report::report_as(decoded, ctx.framework(), F::happened(&plan), ctx.base()).await;
    Ok(Action::await_change())
}

/// Transient errors are retried with backoff (the count resets on success and is forgotten with
/// the job); an error that waiting cannot heal waits for a change of the job instead.
fn error_policy<F: Writes>(job: Arc<Packed<F::Job>>, error: &Error, ctx: Arc<F>) -> Action {
    ctx.base().after_error(object_key(job.as_ref()), error)
}

async fn reconcile<F: Writes>(packed: Arc<Packed<F::Job>>, ctx: Arc<F>) -> Result<Action, Error> {
    let started = Instant::now();
    let decoded = packed.decode();
    let result = match &decoded.0 {
        Ok(job) => ctx.reconcile_job(job).await,
        Err(unreadable) => reconcile_unreadable(ctx.as_ref(), &decoded, unreadable).await,
    };
    match &result {
        Ok(_) => {
            ctx.base().failures().remove(&object_key(&decoded));
        }
        // Visible on the job itself (kubectl describe), not only in trainset's log.
        Err(error) if !ctx.base().quiet(&object_key(&decoded), error) => {
            if let (Ok(job), false) = (&decoded.0, error.is_permanent()) {
                ctx.retrying(job, error).await;
            }
            report::event(
                &decoded,
                EventType::Warning,
                error.event_reason(),
                error.to_string(),
                ctx.base(),
            )
            .await;
        }
        Err(_) => {}
    }
    ctx.base()
        .metrics
        .reconcile_seconds
        .get_or_create(&KindLabels {
            framework: ctx.framework().to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    result
}

/// What the controller reports after each reconcile of a job of `J`.
type Outcome<J> = Result<(ObjectRef<Packed<J>>, Action), controller::Error<Error, watcher::Error>>;

/// After each reconcile: a job that is gone (a Job or JobSet outlived it) is forgotten.
fn finished<F: Family>(result: Outcome<F::Job>, ctx: &F) {
    let kind = F::Job::kind(&());
    match result {
        Ok(_) => {}
        Err(controller::Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "{kind} is gone");
            let key = key_of::<F::Job>(
                object.namespace.as_deref().unwrap_or_default(),
                &object.name,
            );
            ctx.base().failures().remove(&key);
            ctx.forget(&key);
        }
        // Said in a Warning event on the job once it is more than a moment.
        Err(controller::Error::ReconcilerFailed(error, _)) if error.is_owner_unseen() => {
            tracing::debug!(kind = kind.as_ref(), %error, "reconcile failed");
        }
        Err(error) => tracing::warn!(kind = kind.as_ref(), %error, "reconcile failed"),
    }
}
