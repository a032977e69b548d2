//! The plan of a v1 training job (TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob, MPIJob):
//! its JobSet and status from the job, its JobSet and Jobs, and the time.

use std::time::Duration;

use jobset_types::JobSet;
use jobset_types::keys::kueue;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};

use super::{
    EARLIER_WAIT, Happened, Holder, INVALID_SPEC, NAME_CONFLICT, RESOURCE_EXISTS, SuspendWrite,
    deleting, holder, jobset_finished, name_conflict, refused_by_kubernetes, waiting_for_earlier,
};
use crate::api::{CleanPodPolicy, JobStatus};
use crate::autoscaler::{self, AutoscalerWrite, Held};
use crate::compile::v1::mpi_kubectl_exec::{launcher_name, launcher_rules};
use crate::compile::{Compiled, gang};
use crate::decode::Undecodable;
use crate::kinds::Served;
use crate::run_policy;
use crate::status::{self, Observed, Subject};
use crate::suspend::{self, Control};

pub mod takeover;

/// What the plan needs besides the job and the caches; `fetch` reads only these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The compiled objects: to create the JobSet, to resume it with the job's templates, or to
    /// bring the gang of a job whose spec changed to that spec.
    pub compiled: bool,
    /// Whether a Kueue Workload belongs to the job itself (who controls `spec.suspend`).
    pub workload: bool,
    /// The HorizontalPodAutoscaler of the job's name: the job asks for one.
    pub autoscaler: bool,
}

/// What the controller knows when it plans.
pub struct Facts<'a, K> {
    pub job: &'a K,
    /// The JobSet named after the job, if it exists.
    pub jobset: Option<&'a JobSet>,
    /// The Jobs of that JobSet.
    pub jobs: &'a [Job],
    /// The job compiled (when [`Needs::compiled`]), or why its spec is invalid.
    pub compiled: Option<Result<Compiled, String>>,
    /// A Kueue Workload belongs to the job (when [`Needs::workload`]).
    pub own_workload: bool,
    pub now: Time,
    /// How long ago this process last wrote the job's status, if it did.
    pub since_status_write: Option<Duration>,
    /// What Kubernetes said it cannot create for the JobSet (a Job, a pod), if anything.
    pub creation_failure: Option<String>,
    /// The HorizontalPodAutoscaler of the job's name (when [`Needs::autoscaler`]): `Some(None)`
    /// when there is none.
    pub autoscaler: Option<Option<&'a HorizontalPodAutoscaler>>,
    /// For a job whose launcher execs into its pods ([`crate::compile::v1::Compile::exec_targets`]): the names of
    /// the JobSet's pods it execs into, sorted.
    pub exec_targets: Option<&'a [String]>,
    /// What a previous operator made for the job, for a job that may have run before trainset
    /// took over ([`takeover::may_have_run_before`]); nothing otherwise.
    pub foreign: takeover::Foreign<'a>,
}

/// A change of replica counts alone is written at most this often (an elastic job's at once); a
/// change of condition, state or restarts at once, with the counts of that moment. A job's pods
/// start and end one by one, and each would be a write: a job that runs for less than this after
/// `Running` is written once per state it passes through. Two minutes covers the longest `Running` → `Succeeded` of 1,000
/// jobs arriving at once on two cores (72 s), where 30 s added 0.8 writes per job.
pub const COUNTS_INTERVAL: Duration = Duration::from_secs(120);

/// What to write, in order: objects, JobSet suspension, resize, autoscaler, status, JobSet
/// deletion, pods, the job.
#[derive(Debug, Default)]
pub struct Plan {
    /// Objects to create: the auxiliary ones once, then the JobSet (server-side apply).
    pub create: Option<Compiled>,
    pub suspend: Option<SuspendWrite>,
    /// The Worker Job of a running elastic job resized in place: a JSON patch of the JobSet.
    pub resize: Option<json_patch::Patch>,
    /// The job's HorizontalPodAutoscaler made, brought to its spec, or removed.
    pub autoscaler: Option<AutoscalerWrite>,
    /// The new status, when it differs from the stored one in more than timestamps.
    pub status: Option<JobStatus>,
    /// Delete the JobSet (foreground): the job ended before its JobSet did.
    pub delete_jobset: bool,
    /// After the end: which pods `cleanPodPolicy` removes.
    pub clean_pods: Option<CleanPodPolicy>,
    /// `ttlSecondsAfterFinished` ran out: delete the job.
    pub delete_job: bool,
    /// The launcher Role's rules as the job's pods now are (MPIJob `kubeflow.org/v1`), written
    /// where they differ.
    pub launcher_role: Option<LauncherRole>,
    /// What a previous operator made for the job, deleted before trainset runs it (or as it
    /// suspends it): see [`takeover`].
    pub stop_foreign: Vec<takeover::ForeignObject>,
    /// The gang objects of a job whose JobSet exists, as its spec now compiles, written where
    /// they differ: training-operator and mpi-operator keep a PodGroup to the job's spec, so a
    /// gang too large to be placed, or a job resized, gets the gang its spec says.
    pub gang: Vec<DynamicObject>,
    pub happened: Vec<Happened>,
    /// When to reconcile again without a change (a deadline, a TTL); `None` waits for one.
    pub requeue: Option<Duration>,
}

/// The Role an MPIJob `kubeflow.org/v1` launcher runs with, as its workers now are.
#[derive(Clone, Debug, PartialEq)]
pub struct LauncherRole {
    pub name: String,
    pub rules: Vec<PolicyRule>,
}

/// Why no plan can be made until the job changes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("compiling the job to resume its JobSet: {0}")]
    Resume(String),
}

/// Whether trainset runs the job: `runPolicy.managedBy` unset or one of the values that name
/// trainset ([`crate::api::TrainingJob::MANAGED_HERE`]); another value hands it off (MultiKueue).
pub fn managed_here<K: Served>(job: &K) -> bool {
    match job.run_policy().and_then(|p| p.managed_by.as_deref()) {
        None => true,
        Some(manager) => K::MANAGED_HERE.contains(&manager),
    }
}

/// Whether trainset ever made the job's JobSet: its status names it. One missing now was lost,
/// and its absence from the cache is confirmed before it is made again. A status trainset wrote
/// before it named the JobSet says so by `Created`, unless the job was held since it was created
/// (it has no JobSet until it is resumed, see [`plan`]) or was taken over from another operator.
pub fn had_jobset<K: Served>(job: &K) -> bool {
    job.job_status().is_some_and(|s| {
        s.job_set.is_some()
            || (s.takeover.is_none()
                && s.state.is_some()
                && status::is_true(s, status::CREATED)
                && !held_since_created(s))
    })
}

/// A status that says the job is `Created` and was suspended since: no pod ever counted.
fn held_since_created(status: &JobStatus) -> bool {
    status::is_true(status, status::CREATED)
        && status::is_true(status, status::SUSPENDED)
        && status.replica_statuses.is_empty()
}

/// A job still suspended since its creation, whose status says so already: until it is resumed
/// there is nothing to compile, make or write. Its spec was checked when it was first held, and
/// is checked again, compiled, when it is resumed.
fn held_as_said<K: Served>(job: &K) -> bool {
    wants_suspended(job)
        && job
            .job_status()
            .is_some_and(|s| held_since_created(s) && s.state.is_some())
}

pub fn ended<K: Served>(job: &K) -> bool {
    job.job_status().is_some_and(status::is_terminal)
}

/// What [`plan`] will need for this job and JobSet. `gang_behind`: the job's gang objects may
/// not be what its spec now says (the shell knows which spec it last wrote them for).
pub fn needs<K: Served>(job: &K, jobset: Option<&JobSet>, gang_behind: bool) -> Needs {
    if !managed_here(job) || ended(job) || deleting(job) {
        return Needs::default();
    }
    // Looked at on each reconcile: made, kept to the job's spec, removed when it stops.
    let autoscaler = job.autoscaling().is_some();
    let Some(jobset) = jobset else {
        return Needs {
            compiled: !held_as_said(job),
            workload: false,
            autoscaler,
        };
    };
    let wanted = wants_suspended(job);
    if wanted == jobset.spec.suspend.unwrap_or(false) {
        return Needs {
            compiled: gang_behind && !jobset_finished(jobset),
            autoscaler,
            ..Needs::default()
        };
    }
    Needs {
        compiled: !wanted,
        workload: queued(jobset),
        autoscaler,
    }
}

fn wants_suspended<K: Served>(job: &K) -> bool {
    job.run_policy().and_then(|p| p.suspend).unwrap_or(false)
}

fn queued(jobset: &JobSet) -> bool {
    jobset.labels().contains_key(kueue::QUEUE_NAME)
}

fn subject<'a, K: Served>(
    job: &K,
    name: &'a str,
    kind: &'a str,
    present: &'a [&'a str],
) -> Subject<'a> {
    Subject {
        kind,
        name,
        operator_name: job.operator_name(),
        replica_types: present,
        selector: K::REPLICA_SELECTOR,
        detailed_failure: job.detailed_failure_reason(),
    }
}

/// The plan for one reconcile.
pub fn plan<K: Served>(mut facts: Facts<'_, K>) -> Result<Plan, PlanError> {
    let job = facts.job;
    let mut plan = Plan::default();
    if !managed_here(job) || deleting(job) {
        return Ok(plan);
    }
    let previous = job.job_status();
    if let Some(done) = previous.filter(|s| status::is_terminal(s)) {
        after_end(job, done, &facts.now, &mut plan);
        if takeover::run_by_another(done) {
            // Finished by another operator: kept as it is, and shown in `kubectl get`.
            let mut kept = done.clone();
            kept.state = Some(status::state(&kept).to_owned());
            kept.takeover = Some(takeover::taken_over(None, false));
            plan.status = Some(kept);
        }
        return Ok(plan);
    }
    if let Some(live) = facts.jobset {
        let (kind, name) = (K::kind(&()), job.name_any());
        match holder(live.meta(), &kind, &name, job.uid().as_deref()) {
            Holder::This => {}
            Holder::Earlier => {
                return Ok(wait_for_earlier(job, &format!("JobSet {name}")));
            }
            Holder::Foreign(holder) => {
                let message = name_conflict(&kind, &name, &holder);
                return Ok(refuse(job, NAME_CONFLICT, message, &facts.now));
            }
        }
        if let Some(refusal) = refused_by_kubernetes(live, facts.creation_failure.as_deref()) {
            let mut plan = invalid(job, &refusal, &facts.now);
            plan.delete_jobset = true;
            return Ok(plan);
        }
    }
    if facts.jobset.is_none()
        && let Some(plan) = takeover::plan(&mut facts)
    {
        return Ok(plan);
    }
    let created = match (facts.jobset, facts.compiled.take()) {
        (Some(live), mut compiled) => {
            plan.suspend = suspend_write(job, live, &mut compiled, facts.own_workload)?;
            if plan.suspend.is_none() && !jobset_finished(live) {
                plan.resize = crate::resize::patch(job, live);
                // A spec that no longer compiles keeps the gang it has.
                if let Some(Ok(compiled)) = compiled {
                    plan.gang = compiled.gang.into_iter().filter(gang::rewritable).collect();
                }
            }
            None
        }
        (None, Some(Ok(compiled))) => Some(compiled),
        (None, Some(Err(reason))) => return Ok(invalid(job, &reason, &facts.now)),
        // `fetch` compiles whenever the JobSet is missing but for a job held as its status says,
        // which has nothing to do.
        (None, None) => return Ok(plan),
    };
    let Some(jobset) = facts.jobset.or(created.as_ref().map(|c| &c.jobset)) else {
        return Ok(plan);
    };
    // A suspended job without a JobSet gets none until it is resumed: nothing of it runs, so the
    // cluster keeps no JobSet, Jobs or Service for it (v1 makes no pod for it either). Its status
    // is what the JobSet it would get, suspended and never run, says.
    let deferred = created.is_some() && wants_suspended(job);

    let name = job.name_any();
    let kind = K::kind(&());
    let present = present_types(job);
    let subject = subject(job, &name, &kind, &present);
    let observed = Observed {
        jobset: Some(jobset),
        jobs: facts.jobs,
    };
    let mut next = status::derive(&subject, previous, &observed, &facts.now);
    let deadline_seconds = job.run_policy().and_then(|p| p.active_deadline_seconds);
    let suspended = jobset.spec.suspend == Some(true);
    let deadline = status::deadline_left(deadline_seconds, &next, suspended, &facts.now);
    if deadline.is_some_and(|left| left.is_zero()) {
        let seconds = deadline_seconds.unwrap_or_default();
        let message =
            format!("{kind} {name} was active longer than its activeDeadlineSeconds ({seconds}s).");
        let cause = subject.failure("DeadlineExceeded");
        next = status::fail(&subject, Some(&next), cause, &message, &facts.now);
    }
    let jobset_finished = jobset_finished(jobset);

    if created.is_some() && !deferred {
        plan.happened.push(if had_jobset(job) {
            Happened::Recreated
        } else {
            Happened::Created
        });
        plan.create = created;
        next.job_set = Some(name.clone());
    }
    if previous.is_some_and(takeover::run_by_another) {
        next.takeover = Some(takeover::taken_over(None, false));
    }
    let empty = JobStatus::default();
    transitions(previous.unwrap_or(&empty), &next, &mut plan.happened);
    if status::is_terminal(&next) {
        // The terminal state is recorded first; only then may the pods go.
        plan.delete_jobset = !jobset_finished;
        after_end(job, &next, &facts.now, &mut plan);
    } else {
        plan.requeue = deadline.map(run_policy::look_again);
    }
    if let Some(existing) = facts.autoscaler {
        // Not while the job or its JobSet is suspended (Kueue holds a queued JobSet so).
        let running = !wants_suspended(job) && !suspended && !status::is_terminal(&next);
        match autoscaler::write(job, running, existing) {
            Ok(write) => plan.autoscaler = write,
            Err(Held::Foreign(message)) => plan.happened.push(Happened::NotAutoscaled { message }),
            Err(Held::Earlier) => {
                plan.requeue = Some(plan.requeue.map_or(EARLIER_WAIT, |r| r.min(EARLIER_WAIT)));
            }
        }
    }
    if let Some(pods) = facts.exec_targets.filter(|_| !status::is_terminal(&next)) {
        plan.launcher_role = Some(LauncherRole {
            name: launcher_name(&name),
            rules: launcher_rules(pods),
        });
    }
    plan_status(&facts, previous.unwrap_or(&empty), next, &mut plan);
    Ok(plan)
}

/// Puts `next` in the plan when it differs from `previous`; a change of counts alone waits for
/// [`COUNTS_INTERVAL`] after the last write.
fn plan_status<K: Served>(
    facts: &Facts<'_, K>,
    previous: &JobStatus,
    next: JobStatus,
    plan: &mut Plan,
) {
    if !status::changed(previous, &next) {
        return;
    }
    // An elastic job's counts are what its scale subresource, and so its HPA, reads as the
    // current size: they are written at once.
    let wait = facts
        .since_status_write
        .filter(|_| !facts.job.is_elastic() && status::only_counts_changed(previous, &next))
        .and_then(|since| COUNTS_INTERVAL.checked_sub(since))
        .filter(|wait| !wait.is_zero());
    match wait {
        Some(wait) => plan.requeue = Some(plan.requeue.map_or(wait, |r| r.min(wait))),
        None => plan.status = Some(next),
    }
}

/// The job's replica types in canonical order.
fn present_types<K: Served>(job: &K) -> Vec<&'static str> {
    K::REPLICA_TYPES
        .iter()
        .copied()
        .filter(|t| job.replica_specs().get(t).is_some())
        .collect()
}

/// The job fails as `InvalidSpec` with `reason`, and waits for a change.
pub fn invalid<K: Served>(job: &K, reason: &str, now: &Time) -> Plan {
    let message = format!(
        "{} {} has an invalid spec: {reason}",
        K::kind(&()),
        job.name_any()
    );
    refuse(job, INVALID_SPEC, message, now)
}

/// The status of a job whose JobSet could not be created for `error`, which retrying may heal:
/// `Created` False with the error, when that is news; `None` once it has had a JobSet.
pub fn creation_retrying<K: Served>(job: &K, error: &str, now: &Time) -> Option<JobStatus> {
    if !managed_here(job) || ended(job) || deleting(job) || had_jobset(job) {
        return None;
    }
    let (kind, name) = (K::kind(&()), job.name_any());
    let previous = job.job_status();
    let next = status::creation_retrying(&subject(job, &name, &kind, &[]), previous, error, now);
    let empty = JobStatus::default();
    status::changed(previous.unwrap_or(&empty), &next).then_some(next)
}

/// The job fails as `ResourceExists`: an object of a name it needs is another's (`message`).
pub fn resource_taken<K: Served>(job: &K, message: String, now: &Time) -> Plan {
    refuse(job, RESOURCE_EXISTS, message, now)
}

/// The job writes nothing and looks again soon: an earlier job's `object` is on its way out.
pub fn wait_for_earlier<K: Served>(job: &K, object: &str) -> Plan {
    Plan {
        happened: vec![Happened::Waiting {
            message: waiting_for_earlier(object, &K::kind(&()), &job.name_any()),
        }],
        requeue: Some(EARLIER_WAIT),
        ..Plan::default()
    }
}

/// The job fails with `<Kind><reason>` for something trainset decided, and waits for a change.
fn refuse<K: Served>(job: &K, reason: &str, message: String, now: &Time) -> Plan {
    let (kind, name) = (K::kind(&()), job.name_any());
    let subject = subject(job, &name, &kind, &[]);
    refuse_over(&subject, job.job_status(), reason, message, now)
}

/// A job the types cannot read fails `InvalidSpec` naming the field, over the status it has.
pub fn unreadable<K: Served>(name: &str, unreadable: &Undecodable, now: &Time) -> Plan {
    let previous: Option<JobStatus> = unreadable
        .status
        .clone()
        .and_then(|status| serde_json::from_value(status).ok());
    if previous.as_ref().is_some_and(status::is_terminal) {
        return Plan::default();
    }
    let message = format!(
        "{} {name} cannot be read: {}",
        K::kind(&()),
        unreadable.error
    );
    let kind = K::kind(&());
    // Neither of the job's own settings can be read; the status names no replica type.
    let subject = Subject {
        kind: &kind,
        name,
        operator_name: K::OPERATOR_NAMES.first().copied().unwrap_or_default(),
        replica_types: &[],
        selector: K::REPLICA_SELECTOR,
        detailed_failure: false,
    };
    refuse_over(&subject, previous.as_ref(), INVALID_SPEC, message, now)
}

fn refuse_over(
    subject: &Subject<'_>,
    previous: Option<&JobStatus>,
    reason: &str,
    message: String,
    now: &Time,
) -> Plan {
    let next = status::fail(subject, previous, reason, &message, now);
    let empty = JobStatus::default();
    Plan {
        status: status::changed(previous.unwrap_or(&empty), &next).then_some(next),
        happened: vec![Happened::Refused {
            reason: reason.to_owned(),
            message,
        }],
        ..Plan::default()
    }
}

/// The JobSet's `spec.suspend` follows the job's where trainset controls it (see [`suspend`]); a
/// resume takes the compiled job.
fn suspend_write<K: Served>(
    job: &K,
    live: &JobSet,
    compiled: &mut Option<Result<Compiled, String>>,
    own_workload: bool,
) -> Result<Option<SuspendWrite>, PlanError> {
    let wanted = wants_suspended(job);
    let current = live.spec.suspend.unwrap_or(false);
    let queued = queued(live);
    let control = Control::of(queued, queued && own_workload);
    Ok(match suspend::change(wanted, current, control) {
        None => None,
        Some(true) => Some(SuspendWrite::Suspend),
        Some(false) => match compiled.take() {
            Some(Ok(compiled)) => Some(SuspendWrite::resume(live, compiled)),
            Some(Err(reason)) => return Err(PlanError::Resume(reason)),
            None => return Err(PlanError::Resume("the job was not compiled".to_owned())),
        },
    })
}

/// What changed between two statuses that users are told about.
fn transitions(previous: &JobStatus, next: &JobStatus, happened: &mut Vec<Happened>) {
    let became = |type_: &str| {
        (!status::is_true(previous, type_) && status::is_true(next, type_))
            .then(|| next.conditions.iter().find(|c| c.type_ == type_))
            .flatten()
    };
    let told = |c: &crate::api::JobCondition, default: &str| {
        (
            c.reason.clone().unwrap_or_else(|| default.to_owned()),
            c.message.clone().unwrap_or_default(),
        )
    };
    if let Some(c) = became(status::SUCCEEDED) {
        let (reason, message) = told(c, "Succeeded");
        happened.push(Happened::Succeeded { reason, message });
    }
    if let Some(c) = became(status::FAILED) {
        let (reason, message) = told(c, "Failed");
        happened.push(Happened::Failed { reason, message });
    }
    // v1 tells of a suspension and a resume in Normal events (the SDK's verbose logs show them).
    if let Some(c) = became(status::SUSPENDED) {
        let (reason, message) = told(c, "Suspended");
        happened.push(Happened::Suspended { reason, message });
    }
    let resumed =
        status::is_true(previous, status::SUSPENDED) && !status::is_true(next, status::SUSPENDED);
    if let Some(c) = next
        .conditions
        .iter()
        .find(|c| c.type_ == status::SUSPENDED)
        .filter(|_| resumed)
    {
        let (reason, message) = told(c, "Resumed");
        happened.push(Happened::Resumed { reason, message });
    }
    let restarts = next.restarts.unwrap_or(0);
    if restarts > previous.restarts.unwrap_or(0) {
        happened.push(Happened::Restarted { count: restarts });
    }
}

/// After the terminal state: `cleanPodPolicy` (default `None`), then `ttlSecondsAfterFinished`.
fn after_end<K: Served>(job: &K, done: &JobStatus, now: &Time, plan: &mut Plan) {
    plan.clean_pods = job
        .clean_pod_policy()
        .filter(|clean| *clean != CleanPodPolicy::None);
    let ttl = job.run_policy().and_then(|p| p.ttl_seconds_after_finished);
    let finished = done.completion_time.as_ref();
    if let (Some(ttl), Some(finished)) = (ttl, finished) {
        let left = run_policy::left(u64::try_from(ttl).unwrap_or(0), finished, now);
        if !left.is_zero() {
            plan.requeue = Some(run_policy::look_again(left));
        } else {
            plan.delete_job = true;
            plan.happened.push(Happened::DeletedAfterTtl);
        }
    }
}

#[cfg(test)]
mod tests;
