//! What to do about one training job, decided without I/O: given the job, what the caches hold of
//! its JobSet and Jobs, and the time, which objects to write or delete, what happened (for events
//! and metrics) and when to look again. `fetch` gathers the facts, `apply` carries the plan out.

pub mod trainer;

use std::time::Duration;

use jobset_types::JobSet;
use jobset_types::keys::{kueue, terminal_state};
use json_patch::Patch;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use crate::api::{CleanPodPolicy, JobStatus};
use crate::compile::Compiled;
use crate::decode::Undecodable;
use crate::kinds::Served;
use crate::status::{self, Observed, Subject};
use crate::suspend::{self, Control};

/// What the plan needs besides the job and the caches; `fetch` reads only these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The compiled objects: to create the JobSet, or to resume it with the job's templates.
    pub compiled: bool,
    /// Whether a Kueue Workload belongs to the job itself (who controls `spec.suspend`).
    pub workload: bool,
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
}

/// A change of replica counts alone is written at most this often; a change of condition, state
/// or restarts at once. A job's pods start and end one by one, and each would be a write: a job
/// that runs for less than this is written once per state it passes through.
pub const COUNTS_INTERVAL: Duration = Duration::from_secs(30);

/// A change of the JobSet's `spec.suspend`.
#[derive(Debug, PartialEq)]
pub enum SuspendWrite {
    Suspend,
    /// Resumes, carrying the pod-template fields a suspended JobSet may change.
    Resume(Patch),
}

/// What happened, for events and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happened {
    Created,
    Recreated,
    /// trainset failed the job itself: an invalid spec, a JobSet name another job holds.
    Refused {
        reason: String,
        message: String,
    },
    Succeeded {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
    Restarted {
        count: i32,
    },
    /// The job waits for an earlier job's object of the name it needs to go.
    Waiting {
        message: String,
    },
    DeletedAfterTtl,
}

/// What to write, in order: objects, JobSet suspension, status, JobSet deletion, pods, the job.
#[derive(Debug, Default)]
pub struct Plan {
    /// Objects to create: the auxiliary ones once, then the JobSet (server-side apply).
    pub create: Option<Compiled>,
    pub suspend: Option<SuspendWrite>,
    /// The new status, when it differs from the stored one in more than timestamps.
    pub status: Option<JobStatus>,
    /// Delete the JobSet (foreground): the job ended before its JobSet did.
    pub delete_jobset: bool,
    /// After the end: which pods `cleanPodPolicy` removes.
    pub clean_pods: Option<CleanPodPolicy>,
    /// `ttlSecondsAfterFinished` ran out: delete the job.
    pub delete_job: bool,
    pub happened: Vec<Happened>,
    /// When to reconcile again without a change (a deadline, a TTL); `None` waits for one.
    pub requeue: Option<Duration>,
}

/// Why no plan can be made until the job changes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("compiling the job to resume its JobSet: {0}")]
    Resume(String),
}

/// Whether trainset runs the job: `runPolicy.managedBy` unset or trainset's own value (the kind's
/// first allowed one); another value hands it off (MultiKueue).
pub fn managed_here<K: Served>(job: &K) -> bool {
    match job.run_policy().and_then(|p| p.managed_by.as_deref()) {
        None => true,
        Some(manager) => K::MANAGED_BY_VALUES.first() == Some(&manager),
    }
}

/// Whether trainset ever made the job's JobSet (its status says `Created`): one missing now was
/// lost, and its absence from the cache is confirmed before it is made again.
pub fn had_jobset<K: Served>(job: &K) -> bool {
    job.job_status()
        .is_some_and(|s| has_condition(s, status::CREATED))
}

pub fn ended<K: Served>(job: &K) -> bool {
    job.job_status().is_some_and(status::is_terminal)
}

/// Whether the job is being deleted: then nothing is written for it, least of all a JobSet the
/// garbage collector has just deleted in the foreground.
pub fn deleting<K: Resource>(job: &K) -> bool {
    job.meta().deletion_timestamp.is_some()
}

/// What [`plan`] will need for this job and JobSet.
pub fn needs<K: Served>(job: &K, jobset: Option<&JobSet>) -> Needs {
    if !managed_here(job) || ended(job) || deleting(job) {
        return Needs::default();
    }
    let Some(jobset) = jobset else {
        return Needs {
            compiled: true,
            workload: false,
        };
    };
    let wanted = wants_suspended(job);
    if wanted == jobset.spec.suspend.unwrap_or(false) {
        return Needs::default();
    }
    Needs {
        compiled: !wanted,
        workload: queued(jobset),
    }
}

fn wants_suspended<K: Served>(job: &K) -> bool {
    job.run_policy().and_then(|p| p.suspend).unwrap_or(false)
}

fn queued(jobset: &JobSet) -> bool {
    jobset.labels().contains_key(kueue::QUEUE_NAME)
}

fn subject<'a, K: Served>(name: &'a str, kind: &'a str, present: &'a [&'a str]) -> Subject<'a> {
    Subject {
        kind,
        name,
        operator_name: K::OPERATOR_NAME,
        replica_types: present,
        selector: K::REPLICA_SELECTOR,
        detailed_failure: K::DETAILED_FAILURE_REASON,
    }
}

/// The plan for one reconcile.
pub fn plan<K: Served>(facts: Facts<'_, K>) -> Result<Plan, PlanError> {
    let job = facts.job;
    let mut plan = Plan::default();
    if !managed_here(job) || deleting(job) {
        return Ok(plan);
    }
    let previous = job.job_status();
    if let Some(done) = previous.filter(|s| status::is_terminal(s)) {
        after_end(job, done, &facts.now, &mut plan);
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
    let created = match (facts.jobset, facts.compiled) {
        (Some(live), compiled) => {
            plan.suspend = suspend_write(job, live, compiled, facts.own_workload)?;
            None
        }
        (None, Some(Ok(compiled))) => Some(compiled),
        (None, Some(Err(reason))) => return Ok(invalid(job, &reason, &facts.now)),
        // `fetch` compiles whenever the JobSet is missing; without it there is nothing to do.
        (None, None) => return Ok(plan),
    };
    let Some(jobset) = facts.jobset.or(created.as_ref().map(|c| &c.jobset)) else {
        return Ok(plan);
    };

    let name = job.name_any();
    let kind = K::kind(&());
    let present = present_types(job);
    let subject = subject::<K>(&name, &kind, &present);
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

    if created.is_some() {
        plan.happened.push(if had_jobset(job) {
            Happened::Recreated
        } else {
            Happened::Created
        });
    }
    plan.create = created;
    let empty = JobStatus::default();
    transitions(previous.unwrap_or(&empty), &next, &mut plan.happened);
    if status::is_terminal(&next) {
        // The terminal state is recorded first; only then may the pods go.
        plan.delete_jobset = !jobset_finished;
        after_end(job, &next, &facts.now, &mut plan);
    } else {
        plan.requeue = deadline.map(|left| left + Duration::from_secs(1));
    }
    let previous = previous.unwrap_or(&empty);
    if status::changed(previous, &next) {
        let wait = facts
            .since_status_write
            .filter(|_| status::only_counts_changed(previous, &next))
            .and_then(|since| COUNTS_INTERVAL.checked_sub(since))
            .filter(|wait| !wait.is_zero());
        match wait {
            Some(wait) => plan.requeue = Some(plan.requeue.map_or(wait, |r| r.min(wait))),
            None => plan.status = Some(next),
        }
    }
    Ok(plan)
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
    let next = status::creation_retrying(&subject::<K>(&name, &kind, &[]), previous, error, now);
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
    refuse_over::<K>(&job.name_any(), job.job_status(), reason, message, now)
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
    refuse_over::<K>(name, previous.as_ref(), INVALID_SPEC, message, now)
}

fn refuse_over<K: Served>(
    name: &str,
    previous: Option<&JobStatus>,
    reason: &str,
    message: String,
    now: &Time,
) -> Plan {
    let kind = K::kind(&());
    let subject = subject::<K>(name, &kind, &[]);
    let next = status::fail(&subject, previous, reason, &message, now);
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

/// Why the running JobSet `live` can never make the job's pods, from what Kubernetes said it cannot
/// create for it (`failure`): only a refusal of the object's content (`... is invalid: <field>:
/// ...`), which no retry passes. Others (an exceeded quota, a webhook's denial, a namespace's
/// pod security) may pass once the cluster changes, and the Job and JobSet controllers retry them.
pub fn refused_by_kubernetes(live: &JobSet, failure: Option<&str>) -> Option<String> {
    let failure = failure.filter(|f| f.contains(" is invalid: "))?;
    (!jobset_finished(live)).then(|| format!("Kubernetes refuses what its JobSet makes: {failure}"))
}

/// Why a job fails whose spec cannot run.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Why a job fails whose JobSet name another object's JobSet already has.
pub const NAME_CONFLICT: &str = "JobSetNameConflict";

/// Who controls an object trainset needs under a name it derives from a job's (the JobSet, an
/// MPI hostfile or SSH Secret, a runtime snapshot, the JobSet's Service).
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// The job itself (its uid): the object is its own.
    This,
    /// An earlier job of the same kind and name (another uid), or an object already being
    /// deleted: wait until the garbage collector has removed it, never adopt it.
    Earlier,
    /// Anything else, named (`TrainJob foo`, `no controller`): never used nor changed.
    Foreign(String),
}

/// Who holds `object`, for the job of `kind` and `name` with `uid`. A job without a uid (read
/// from a file) holds what it finds.
pub fn holder(object: &ObjectMeta, kind: &str, name: &str, uid: Option<&str>) -> Holder {
    let Some(uid) = uid else {
        return Holder::This;
    };
    let controller = object
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(owner) if owner.uid == uid => Holder::This,
        Some(owner) if owner.kind == kind && owner.name == name => Holder::Earlier,
        _ if object.deletion_timestamp.is_some() => Holder::Earlier,
        Some(owner) => Holder::Foreign(format!("{} {}", owner.kind, owner.name)),
        None => Holder::Foreign("no controller".to_owned()),
    }
}

/// How long a job waits before looking again whether an earlier job's object is gone (its
/// deletion also wakes it, when it is a JobSet).
pub const EARLIER_WAIT: Duration = Duration::from_secs(5);

/// What a job waiting for the `object` an earlier job of its name left is told.
pub fn waiting_for_earlier(object: &str, kind: &str, name: &str) -> String {
    format!(
        "{object} belongs to an earlier {kind} {name} and is being deleted; {kind} {name} \
         starts once it is gone"
    )
}

/// Why a job fails whose hostfile, SSH Secret, runtime snapshot or Service name is another's.
pub const RESOURCE_EXISTS: &str = "ResourceExists";

/// What a job is told whose `object` (`ConfigMap train-config`) exists, held by `holder`.
pub fn resource_exists(object: &str, holder: &str, kind: &str, name: &str) -> String {
    format!(
        "{object} already exists and is controlled by {holder}, not by {kind} {name}: it is left \
         untouched. Rename the job, or delete the {object} if it is not needed."
    )
}

/// What a job whose JobSet name is taken is told.
pub fn name_conflict(kind: &str, name: &str, holder: &str) -> String {
    format!(
        "{kind} {name} cannot run: its JobSet {name} already exists and belongs to {holder}. \
         Every training job's JobSet is named after it, so give jobs of different kinds in one \
         namespace different names."
    )
}

/// The JobSet's `spec.suspend` follows the job's where trainset controls it (see [`suspend`]).
fn suspend_write<K: Served>(
    job: &K,
    live: &JobSet,
    compiled: Option<Result<Compiled, String>>,
    own_workload: bool,
) -> Result<Option<SuspendWrite>, PlanError> {
    let wanted = wants_suspended(job);
    let current = live.spec.suspend.unwrap_or(false);
    let queued = queued(live);
    let control = Control::of(queued, queued && own_workload);
    Ok(match suspend::change(wanted, current, control) {
        None => None,
        Some(true) => Some(SuspendWrite::Suspend),
        Some(false) => match compiled {
            Some(Ok(compiled)) => Some(SuspendWrite::Resume(suspend::resume_patch(
                live,
                &compiled.jobset,
            ))),
            Some(Err(reason)) => return Err(PlanError::Resume(reason)),
            None => return Err(PlanError::Resume("the job was not compiled".to_owned())),
        },
    })
}

fn has_condition(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// What changed between two statuses that users are told about.
fn transitions(previous: &JobStatus, next: &JobStatus, happened: &mut Vec<Happened>) {
    let became = |type_: &str| {
        (!has_condition(previous, type_) && has_condition(next, type_))
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
    let restarts = next.restarts.unwrap_or(0);
    if restarts > previous.restarts.unwrap_or(0) {
        happened.push(Happened::Restarted { count: restarts });
    }
}

/// After the terminal state: `cleanPodPolicy` (default `None`), then `ttlSecondsAfterFinished`.
fn after_end<K: Served>(job: &K, done: &JobStatus, now: &Time, plan: &mut Plan) {
    let policy = job.run_policy();
    plan.clean_pods = policy
        .and_then(|p| p.clean_pod_policy)
        .filter(|clean| *clean != CleanPodPolicy::None);
    let ttl = policy.and_then(|p| p.ttl_seconds_after_finished);
    let finished = done.completion_time.as_ref();
    if let (Some(ttl), Some(finished)) = (ttl, finished) {
        let elapsed = now.0.duration_since(finished.0).as_secs();
        let left = i64::from(ttl).saturating_sub(elapsed);
        if left > 0 {
            plan.requeue = Some(Duration::from_secs(left.unsigned_abs() + 1));
        } else {
            plan.delete_job = true;
            plan.happened.push(Happened::DeletedAfterTtl);
        }
    }
}

/// Whether `cleanPodPolicy` removes `pod`: `All` every pod, `Running` those still pending or
/// running; a pod already being deleted is left alone.
pub fn cleans(policy: CleanPodPolicy, pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match policy {
        CleanPodPolicy::None => false,
        CleanPodPolicy::All => true,
        CleanPodPolicy::Running => matches!(phase, Some("Running" | "Pending")),
    }
}

/// Whether the JobSet reached a terminal state.
pub fn jobset_finished(jobset: &JobSet) -> bool {
    jobset
        .status
        .as_ref()
        .and_then(|s| s.terminal_state.as_deref())
        .is_some_and(|s| s == terminal_state::COMPLETED || s == terminal_state::FAILED)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::PyTorchJob;
    use crate::compile::{Compile, Options};

    const START: i64 = 1_800_000_000;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(START + second).expect("time"))
    }

    fn pytorch(run_policy: Value, status: Value) -> PyTorchJob {
        let pod = json!({"spec": {"containers": [{"name": "pytorch", "image": "x"}]}});
        serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1"},
            "spec": {
                "runPolicy": run_policy,
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": pod},
                    "Worker": {"replicas": 2, "template": pod}
                }
            },
            "status": status
        }))
        .expect("PyTorchJob")
    }

    fn compiled(job: &PyTorchJob) -> Option<Result<Compiled, String>> {
        let options = Options {
            default_namespace: None,
            ssh_key: None,
            cluster_domain: None,
        };
        Some(job.compile(&options).map_err(|e| e.to_string()))
    }

    fn condition(type_: &str, reason: &str) -> Value {
        json!({"type": type_, "status": "True", "reason": reason, "message": format!("{type_} message"),
               "lastTransitionTime": "2027-01-15T08:00:00Z", "lastUpdateTime": "2027-01-15T08:00:00Z"})
    }

    fn jobset(suspend: bool, labels: Value, status: Value) -> JobSet {
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "demo", "namespace": "ns", "labels": labels, "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "demo", "uid": "u-1", "controller": true}
            ]},
            "spec": {"suspend": suspend, "replicatedJobs": []},
            "status": status
        }))
        .expect("JobSet")
    }

    fn running_jobset() -> JobSet {
        jobset(false, json!({}), json!({"restarts": 0}))
    }

    fn job(replica_type: &str, active: i32, succeeded: i32) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": format!("demo-{replica_type}-0"), "labels": {
                "training.kubeflow.org/replica-type": replica_type,
                "jobset.sigs.k8s.io/restart-attempt": "0"
            }},
            "status": {"active": active, "succeeded": succeeded}
        }))
        .expect("Job")
    }

    fn running_jobs() -> Vec<Job> {
        vec![job("master", 1, 0), job("worker", 2, 0)]
    }

    /// The status trainset wrote when it saw the job running at `start`.
    fn running_status(start: i64) -> Value {
        let subject = Subject {
            kind: "PyTorchJob",
            name: "demo",
            operator_name: "pytorchjob-controller",
            replica_types: &["Master", "Worker"],
            selector: true,
            detailed_failure: false,
        };
        let jobset = running_jobset();
        let jobs = running_jobs();
        let observed = Observed {
            jobset: Some(&jobset),
            jobs: &jobs,
        };
        let status = status::derive(&subject, None, &observed, &at(start));
        serde_json::to_value(status).expect("status")
    }

    fn succeeded_status(completed: i64) -> Value {
        json!({
            "conditions": [condition("Created", "PyTorchJobCreated"), condition("Succeeded", "PyTorchJobSucceeded")],
            "startTime": at(0).0.to_string(),
            "completionTime": at(completed).0.to_string()
        })
    }

    fn facts<'a>(
        job: &'a PyTorchJob,
        jobset: Option<&'a JobSet>,
        jobs: &'a [Job],
        now: i64,
    ) -> Facts<'a, PyTorchJob> {
        Facts {
            job,
            jobset,
            jobs,
            compiled: None,
            own_workload: false,
            now: at(now),
            since_status_write: None,
            creation_failure: None,
        }
    }

    fn state(plan: &Plan) -> Option<String> {
        plan.status.as_ref().and_then(|s| s.state.clone())
    }

    #[test]
    fn a_job_whose_pods_kubernetes_refuses_fails_naming_the_field_and_its_jobset_goes() {
        let job = pytorch(json!({}), json!(null));
        let live = running_jobset();
        let refused = "Job demo-master-0: Error creating: Pod \"demo-master-0-0-x\" is invalid: \
                       spec.initContainers[0].image: Required value";
        let refused_plan = plan(Facts {
            creation_failure: Some(refused.to_owned()),
            ..facts(&job, Some(&live), &[], 0)
        })
        .expect("plan");
        assert_eq!(state(&refused_plan).as_deref(), Some(status::FAILED));
        assert!(refused_plan.delete_jobset && refused_plan.create.is_none());
        let failed = refused_plan
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == status::FAILED)
            .expect("Failed");
        assert_eq!(failed.reason.as_deref(), Some("PyTorchJobInvalidSpec"));
        let message = failed.message.as_deref().unwrap_or_default();
        assert!(
            message.contains("spec.initContainers[0].image: Required value"),
            "{message}"
        );

        // An exceeded quota may pass later: the Job controller retries, the job runs on.
        let quota = "Job demo-master-0: Error creating: pods \"demo-master-0-0-x\" is forbidden: \
                     exceeded quota: compute, requested: cpu=2, used: cpu=8, limited: cpu=8";
        let quota_plan = plan(Facts {
            creation_failure: Some(quota.to_owned()),
            ..facts(&job, Some(&live), &[], 0)
        })
        .expect("plan");
        assert_ne!(state(&quota_plan).as_deref(), Some(status::FAILED));
        assert!(!quota_plan.delete_jobset);
    }

    #[test]
    fn a_jobset_that_cannot_be_created_yet_is_said_in_created_false_until_it_is() {
        let job = pytorch(json!({}), json!(null));
        let denied = "creating JobSet demo: admission webhook denied the request: not found";
        let retrying = creation_retrying(&job, denied, &at(0)).expect("news");
        let created = retrying
            .conditions
            .iter()
            .find(|c| c.type_ == status::CREATED)
            .expect("Created");
        assert_eq!(created.status, "False");
        assert_eq!(
            created.reason.as_deref(),
            Some("PyTorchJobCreationRetrying")
        );
        assert!(
            created
                .message
                .as_deref()
                .unwrap_or_default()
                .contains(denied)
        );
        assert_eq!(retrying.state.as_deref(), Some(status::CREATED));

        // Said once: the same reason again writes nothing.
        let written = serde_json::to_value(&retrying).expect("status");
        let waiting = pytorch(json!({}), written);
        assert!(creation_retrying(&waiting, denied, &at(5)).is_none());
        // Once the JobSet is made, `Created` turns True, and a later error says nothing there.
        let live = running_jobset();
        let jobs = running_jobs();
        let made = plan(facts(&waiting, Some(&live), &jobs, 10)).expect("plan");
        let status = made.status.expect("status");
        assert!(has_condition(&status, status::CREATED));
        let made = pytorch(json!({}), serde_json::to_value(&status).expect("status"));
        assert!(creation_retrying(&made, denied, &at(20)).is_none());
    }

    #[test]
    fn a_job_managed_by_another_controller_is_left_alone() {
        let job = pytorch(
            json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
            json!(null),
        );
        assert_eq!(needs(&job, None), Needs::default());
        let plan = plan(facts(&job, None, &[], 0)).expect("plan");
        assert!(plan.create.is_none() && plan.status.is_none() && plan.happened.is_empty());
        let own = pytorch(
            json!({"managedBy": "kubeflow.org/training-operator"}),
            json!(null),
        );
        assert!(managed_here(&own));
    }

    #[test]
    fn a_new_job_gets_its_jobset_and_the_created_status_in_one_pass() {
        let job = pytorch(json!({}), json!(null));
        assert_eq!(
            needs(&job, None),
            Needs {
                compiled: true,
                workload: false
            }
        );
        let mut facts = facts(&job, None, &[], 0);
        facts.compiled = compiled(&job);
        let plan = plan(facts).expect("plan");
        assert_eq!(
            plan.create.as_ref().map(|c| c.jobset.name_any()),
            Some("demo".to_owned())
        );
        assert_eq!(plan.happened, [Happened::Created]);
        assert_eq!(state(&plan).as_deref(), Some(status::CREATED));
        assert!(!plan.delete_jobset && plan.requeue.is_none() && plan.suspend.is_none());
    }

    #[test]
    fn a_jobset_deleted_under_a_running_job_is_recreated_and_said_so() {
        let job = pytorch(json!({}), running_status(0));
        let mut facts = facts(&job, None, &[], 5);
        facts.compiled = compiled(&job);
        let plan = plan(facts).expect("plan");
        assert!(plan.create.is_some());
        assert_eq!(plan.happened.first(), Some(&Happened::Recreated));
    }

    #[test]
    fn an_invalid_spec_fails_the_job_and_creates_nothing() {
        let job = pytorch(json!({}), json!(null));
        let mut facts = facts(&job, None, &[], 0);
        facts.compiled = Some(Err("spec.x: bad".to_owned()));
        let plan = plan(facts).expect("plan");
        assert!(plan.create.is_none());
        assert_eq!(state(&plan).as_deref(), Some(status::FAILED));
        let reasons: Vec<_> = plan
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().map(|c| c.reason.clone()))
            .collect();
        assert!(
            reasons.contains(&Some("PyTorchJobInvalidSpec".to_owned())),
            "{reasons:?}"
        );
        assert_eq!(
            plan.happened,
            [Happened::Refused {
                reason: "InvalidSpec".to_owned(),
                message: "PyTorchJob demo has an invalid spec: spec.x: bad".to_owned()
            }]
        );
        assert!(plan.requeue.is_none());
    }

    #[test]
    fn a_jobset_another_job_holds_fails_the_job_and_is_left_alone() {
        let job = pytorch(json!({}), Value::Null);
        let mut theirs = running_jobset();
        theirs.metadata.owner_references = serde_json::from_value(json!([
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "demo", "uid": "tj-1", "controller": true}
        ]))
        .expect("owner");
        let jobs = running_jobs();
        let facts = Facts {
            job: &job,
            jobset: Some(&theirs),
            jobs: &jobs,
            compiled: None,
            own_workload: false,
            now: at(0),
            since_status_write: None,
            creation_failure: None,
        };
        let plan = plan(facts).expect("plan");
        assert!(plan.create.is_none() && plan.suspend.is_none() && !plan.delete_jobset);
        assert_eq!(state(&plan).as_deref(), Some(status::FAILED));
        let failed = plan
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == status::FAILED)
            .expect("Failed");
        assert_eq!(
            failed.reason.as_deref(),
            Some("PyTorchJobJobSetNameConflict")
        );
        let message = failed.message.as_deref().unwrap_or_default();
        assert!(message.contains("belongs to TrainJob demo"), "{message}");
    }

    #[test]
    fn an_unchanged_observation_writes_nothing() {
        let job = pytorch(json!({}), running_status(0));
        let jobset = running_jobset();
        let jobs = running_jobs();
        assert_eq!(needs(&job, Some(&jobset)), Needs::default());
        let plan = plan(facts(&job, Some(&jobset), &jobs, 30)).expect("plan");
        assert!(plan.status.is_none(), "{:?}", plan.status);
        assert!(plan.happened.is_empty() && plan.create.is_none() && !plan.delete_jobset);
        assert!(plan.requeue.is_none());
    }

    #[test]
    fn new_counts_alone_wait_for_the_interval_and_new_conditions_do_not() {
        let more = [job("master", 1, 0), job("worker", 1, 1)];
        let job = pytorch(json!({}), running_status(0));
        let live = running_jobset();
        let mut recent = facts(&job, Some(&live), &more, 3);
        recent.since_status_write = Some(Duration::from_secs(2));
        let deferred = plan(recent).expect("plan");
        assert!(deferred.status.is_none());
        assert_eq!(
            deferred.requeue,
            Some(COUNTS_INTERVAL - Duration::from_secs(2))
        );

        let mut later = facts(&job, Some(&live), &more, 9);
        later.since_status_write = Some(COUNTS_INTERVAL);
        assert!(plan(later).expect("plan").status.is_some());
        // Not written by this process (a restart): written at once.
        assert!(
            plan(facts(&job, Some(&live), &more, 3))
                .expect("plan")
                .status
                .is_some()
        );

        let done = jobset(
            false,
            json!({}),
            json!({"terminalState": "Completed", "conditions": [condition("Completed", "AllJobsCompleted")]}),
        );
        let mut ended = facts(&job, Some(&done), &more, 3);
        ended.since_status_write = Some(Duration::from_secs(1));
        assert_eq!(
            state(&plan(ended).expect("plan")).as_deref(),
            Some(status::SUCCEEDED)
        );
    }

    #[test]
    fn suspending_is_trainsets_unless_kueue_queues_the_jobset() {
        let job = pytorch(json!({"suspend": true}), running_status(0));
        let own = running_jobset();
        assert_eq!(needs(&job, Some(&own)), Needs::default());
        let plan = plan(facts(&job, Some(&own), &[], 1)).expect("plan");
        assert_eq!(plan.suspend, Some(SuspendWrite::Suspend));

        let queued = jobset(false, json!({"kueue.x-k8s.io/queue-name": "q"}), json!({}));
        assert_eq!(
            needs(&job, Some(&queued)),
            Needs {
                compiled: false,
                workload: true
            }
        );
        let by_kueue = super::plan(facts(&job, Some(&queued), &[], 1)).expect("plan");
        assert_eq!(by_kueue.suspend, None);
        let mut own_workload = facts(&job, Some(&queued), &[], 1);
        own_workload.own_workload = true;
        let by_trainset = super::plan(own_workload).expect("plan");
        assert_eq!(by_trainset.suspend, Some(SuspendWrite::Suspend));
    }

    #[test]
    fn resuming_carries_the_jobs_templates_and_needs_them_compiled() {
        let job = pytorch(json!({"suspend": false}), running_status(0));
        let suspended = jobset(true, json!({}), json!({}));
        assert_eq!(
            needs(&job, Some(&suspended)),
            Needs {
                compiled: true,
                workload: false
            }
        );
        let mut with = facts(&job, Some(&suspended), &[], 1);
        with.compiled = compiled(&job);
        let plan = plan(with).expect("plan");
        assert!(matches!(plan.suspend, Some(SuspendWrite::Resume(_))));
        let without = super::plan(facts(&job, Some(&suspended), &[], 1));
        assert!(matches!(without, Err(PlanError::Resume(_))));
    }

    #[test]
    fn a_deadline_in_the_future_is_looked_at_again_just_after_it() {
        let job = pytorch(json!({"activeDeadlineSeconds": 60}), running_status(0));
        let jobset = running_jobset();
        let jobs = running_jobs();
        let plan = plan(facts(&job, Some(&jobset), &jobs, 20)).expect("plan");
        assert_eq!(plan.requeue, Some(Duration::from_secs(41)));
        assert!(plan.status.is_none());
    }

    #[test]
    fn a_passed_deadline_fails_the_job_then_deletes_its_jobset() {
        let job = pytorch(json!({"activeDeadlineSeconds": 60}), running_status(0));
        let jobset = running_jobset();
        let jobs = running_jobs();
        let plan = plan(facts(&job, Some(&jobset), &jobs, 61)).expect("plan");
        assert_eq!(state(&plan).as_deref(), Some(status::FAILED));
        assert!(plan.delete_jobset);
        assert!(matches!(
            plan.happened.as_slice(),
            [Happened::Failed { message, .. }] if message.contains("activeDeadlineSeconds (60s)")
        ));
        assert_eq!(plan.requeue, None);
    }

    #[test]
    fn a_completed_jobset_succeeds_the_job_and_is_not_deleted() {
        let job = pytorch(json!({}), running_status(0));
        let done = jobset(
            false,
            json!({}),
            json!({"terminalState": "Completed", "conditions": [condition("Completed", "AllJobsCompleted")]}),
        );
        let jobs = [job_done("master"), job_done("worker")];
        let plan = plan(facts(&job, Some(&done), &jobs, 9)).expect("plan");
        assert_eq!(state(&plan).as_deref(), Some(status::SUCCEEDED));
        assert!(!plan.delete_jobset);
        assert!(matches!(
            plan.happened.as_slice(),
            [Happened::Succeeded { .. }]
        ));
    }

    fn job_done(replica_type: &str) -> Job {
        job(replica_type, 0, 1)
    }

    #[test]
    fn a_gang_restart_is_reported_once() {
        let job = pytorch(json!({}), running_status(0));
        let restarted = jobset(false, json!({}), json!({"restarts": 1}));
        let jobs = running_jobs();
        let plan = plan(facts(&job, Some(&restarted), &jobs, 9)).expect("plan");
        assert!(plan.happened.contains(&Happened::Restarted { count: 1 }));
        assert!(plan.status.is_some());
    }

    #[test]
    fn after_the_end_pods_are_cleaned_and_the_ttl_counted_from_completion() {
        let policy = json!({"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 100});
        let job = pytorch(policy, succeeded_status(50));
        assert_eq!(needs(&job, None), Needs::default());
        let waiting = plan(facts(&job, None, &[], 80)).expect("plan");
        assert_eq!(waiting.clean_pods, Some(CleanPodPolicy::Running));
        assert_eq!(waiting.requeue, Some(Duration::from_secs(71)));
        assert!(!waiting.delete_job && waiting.status.is_none() && waiting.create.is_none());
        let expired = plan(facts(&job, None, &[], 150)).expect("plan");
        assert!(expired.delete_job);
        assert_eq!(expired.happened, [Happened::DeletedAfterTtl]);
        let kept = pytorch(json!({}), succeeded_status(50));
        let kept = plan(facts(&kept, None, &[], 10_000)).expect("plan");
        assert!(kept.clean_pods.is_none() && !kept.delete_job && kept.requeue.is_none());
    }

    #[test]
    fn clean_pod_policy_removes_what_it_names() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            let mut pod: Pod =
                serde_json::from_value(json!({"status": {"phase": phase}})).expect("Pod");
            if deleting {
                pod.metadata.deletion_timestamp = Some(at(0));
            }
            pod
        };
        let phases = ["Pending", "Running", "Succeeded", "Failed"];
        let removed = |policy| -> Vec<&str> {
            phases
                .iter()
                .copied()
                .filter(|phase| cleans(policy, &pod(phase, false)))
                .collect()
        };
        assert_eq!(removed(CleanPodPolicy::All), phases);
        assert_eq!(removed(CleanPodPolicy::Running), ["Pending", "Running"]);
        assert!(removed(CleanPodPolicy::None).is_empty());
        assert!(!cleans(CleanPodPolicy::All, &pod("Running", true)));
    }
}
