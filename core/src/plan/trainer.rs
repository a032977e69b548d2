//! What to do about one TrainJob, decided without I/O (Trainer v2.3.0's reconcile order,
//! with a finished TrainJob left finished): given the
//! TrainJob, its JobSet as the cache holds it, the TrainJob compiled when the plan needs it, and
//! the time, which objects to write, what happened and when to look again.

use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use crate::api::trainer::{TRAINJOB_CONTROLLER, TrainJob, TrainJobStatus};
use crate::compile::{MANAGED_BY, TRAINSET};
use crate::decode::Undecodable;
use crate::plan::{
    EARLIER_WAIT, Happened, Holder, INVALID_SPEC, NAME_CONFLICT, SuspendWrite, deleting, holder,
    name_conflict, refused_by_kubernetes, waiting_for_earlier,
};
use crate::run_policy;
use crate::status::FAILED;
use crate::status::trainer::{self as status, COMPLETE, DEADLINE_EXCEEDED};
use crate::suspend;

/// Trainer's reason for a `runtimeRef` naming something other than its two runtime kinds.
pub const RUNTIME_NOT_SUPPORTED: &str = "TrainingRuntimeNotSupported";

/// What a TrainJob compiles to: its runtime snapshot (`None` when it exists already) and the
/// JobSet with, for MPI runtimes, its hostfile and SSH Secret.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub snapshot: Option<ConfigMap>,
    pub objects: crate::compile::Compiled,
}

/// Why a TrainJob cannot run, whatever the cluster does: it fails with this reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrunnable {
    pub reason: &'static str,
    pub message: String,
}

/// What the controller knows when it plans.
pub struct Facts<'a> {
    pub job: &'a TrainJob,
    /// The JobSet named after the TrainJob, if it exists (whoever owns it).
    pub jobset: Option<&'a JobSet>,
    /// The TrainJob compiled, when [`needs_compiled`] says so.
    pub compiled: Option<Result<Compiled, Unrunnable>>,
    pub now: Time,
    /// What Kubernetes said it cannot create for the JobSet (a Job, a pod), if anything.
    pub creation_failure: Option<String>,
}

/// What to write, in order: the snapshot and JobSet, the JobSet's suspension, the status, the
/// JobSet's deletion.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Option<Compiled>,
    pub suspend: Option<SuspendWrite>,
    pub status: Option<TrainJobStatus>,
    /// Delete the JobSet: the TrainJob ran past its deadline, or Kubernetes refuses its pods.
    pub delete_jobset: bool,
    /// Label the TrainJob's JobSet as trainset's: one Trainer made, which trainset's watch
    /// (of JobSets so labelled) would not see change.
    pub label_jobset: bool,
    pub happened: Vec<Happened>,
    /// When to reconcile again without a change (a deadline); `None` waits for one.
    pub requeue: Option<Duration>,
}

/// Whether trainset runs the TrainJob: `managedBy` unset or Trainer's own controller; another
/// value (MultiKueue's) hands it off.
pub fn managed_here(job: &TrainJob) -> bool {
    job.spec
        .managed_by
        .as_deref()
        .is_none_or(|manager| manager == TRAINJOB_CONTROLLER)
}

fn finished(job: &TrainJob) -> bool {
    job.status.as_ref().is_some_and(status::is_finished)
}

/// Whether the plan needs the TrainJob compiled: to create its JobSet, or to resume it with the
/// TrainJob's current runtime patches (Kueue's node selectors and tolerations).
pub fn needs_compiled(job: &TrainJob, jobset: Option<&JobSet>) -> bool {
    if !managed_here(job) || finished(job) || deleting(job) {
        return false;
    }
    match jobset {
        None => true,
        Some(live) => {
            holder_of(job, live) == Holder::This
                && job.spec.suspend != Some(true)
                && live.spec.suspend == Some(true)
        }
    }
}

/// The TrainJob `name` writes nothing and looks again soon: an earlier TrainJob's `object` is on
/// its way out.
pub fn wait_for_earlier(name: &str, object: &str) -> Plan {
    Plan {
        happened: vec![Happened::Waiting {
            message: waiting_for_earlier(object, "TrainJob", name),
        }],
        requeue: Some(EARLIER_WAIT),
        ..Plan::default()
    }
}

fn holder_of(job: &TrainJob, live: &JobSet) -> Holder {
    holder(
        live.meta(),
        "TrainJob",
        &job.name_any(),
        job.uid().as_deref(),
    )
}

/// The plan for one reconcile.
pub fn plan(facts: Facts<'_>) -> Plan {
    let job = facts.job;
    let mut plan = Plan::default();
    if !managed_here(job) || finished(job) || deleting(job) {
        return plan;
    }
    let name = job.name_any();
    if let Some(live) = facts.jobset {
        match holder_of(job, live) {
            Holder::This => {}
            Holder::Earlier => {
                return wait_for_earlier(&name, &format!("JobSet {name}"));
            }
            Holder::Foreign(holder) => {
                let message = name_conflict("TrainJob", &name, &holder);
                return refuse(job, NAME_CONFLICT, message, &facts.now);
            }
        }
        if let Some(refusal) = refused_by_kubernetes(live, facts.creation_failure.as_deref()) {
            let unrunnable = invalid(&name, refusal);
            let mut plan = refuse(job, unrunnable.reason, unrunnable.message, &facts.now);
            plan.delete_jobset = true;
            return plan;
        }
        plan.label_jobset = live.labels().get(MANAGED_BY).map(String::as_str) != Some(TRAINSET);
    }
    let created = match (facts.jobset, facts.compiled) {
        (Some(live), compiled) => {
            match suspend_write(job, live, compiled) {
                Ok(write) => plan.suspend = write,
                Err(unrunnable) => {
                    return refuse(job, unrunnable.reason, unrunnable.message, &facts.now);
                }
            }
            None
        }
        (None, Some(Ok(compiled))) => Some(compiled),
        (None, Some(Err(unrunnable))) => {
            return refuse(job, unrunnable.reason, unrunnable.message, &facts.now);
        }
        (None, None) => return plan,
    };

    let previous = job.status.clone().unwrap_or_default();
    let mut next = status::derive(job, facts.jobset, &facts.now);
    let deadline = status::deadline_left(job, &next, &facts.now);
    if deadline.is_some_and(|left| left.is_zero()) {
        let seconds = job.spec.active_deadline_seconds.unwrap_or_default();
        let message = format!(
            "TrainJob {name} was active longer than its activeDeadlineSeconds ({seconds}s)"
        );
        next = status::fail(next, DEADLINE_EXCEEDED, &message, &facts.now);
        plan.delete_jobset = facts.jobset.is_some();
    } else {
        plan.requeue = deadline.map(run_policy::look_again);
    }
    if let Some(compiled) = created {
        plan.happened.push(if previous.jobs_status.is_empty() {
            Happened::Created
        } else {
            Happened::Recreated
        });
        // A TrainJob that failed before its JobSet existed has none made.
        if !status::is_finished(&next) {
            plan.create = Some(compiled);
        }
    }
    transitions(&previous, &next, &mut plan.happened);
    if status::is_finished(&next) {
        plan.requeue = None;
    }
    plan.status = (next != previous).then_some(next);
    plan
}

/// The JobSet's `spec.suspend` follows the TrainJob's: Kueue queues a TrainJob through the
/// TrainJob itself (its `trainer.kubeflow.org/trainjob` integration), never through the JobSet.
fn suspend_write(
    job: &TrainJob,
    live: &JobSet,
    compiled: Option<Result<Compiled, Unrunnable>>,
) -> Result<Option<SuspendWrite>, Unrunnable> {
    let wanted = job.spec.suspend.unwrap_or(false);
    let current = live.spec.suspend.unwrap_or(false);
    Ok(
        match suspend::change(wanted, current, suspend::Control::Trainset) {
            None => None,
            Some(true) => Some(SuspendWrite::Suspend),
            Some(false) => match compiled {
                Some(Ok(compiled)) => Some(SuspendWrite::resume(live, compiled.objects)),
                Some(Err(unrunnable)) => return Err(unrunnable),
                // `fetch` compiles whenever a resume is due.
                None => None,
            },
        },
    )
}

/// The TrainJob fails with `reason` for something trainset decided, and waits for a change.
fn refuse(job: &TrainJob, reason: &str, message: String, now: &Time) -> Plan {
    refuse_over(job.status.clone().unwrap_or_default(), reason, message, now)
}

/// A TrainJob the types cannot read fails `InvalidSpec` naming the field, over the status it has.
pub fn unreadable(name: &str, unreadable: &Undecodable, now: &Time) -> Plan {
    let previous: TrainJobStatus = unreadable
        .status
        .clone()
        .and_then(|status| serde_json::from_value(status).ok())
        .unwrap_or_default();
    if status::is_finished(&previous) {
        return Plan::default();
    }
    let message = format!("TrainJob {name} cannot be read: {}", unreadable.error);
    refuse_over(previous, INVALID_SPEC, message, now)
}

fn refuse_over(previous: TrainJobStatus, reason: &str, message: String, now: &Time) -> Plan {
    let next = status::fail(previous.clone(), reason, &message, now);
    Plan {
        status: (next != previous).then_some(next),
        happened: vec![Happened::Refused {
            reason: reason.to_owned(),
            message,
        }],
        ..Plan::default()
    }
}

/// `Complete` and `Failed` as they become true, for events and metrics.
fn transitions(previous: &TrainJobStatus, next: &TrainJobStatus, happened: &mut Vec<Happened>) {
    let became = |type_: &str| {
        let is_true = |s: &TrainJobStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
                .cloned()
        };
        is_true(next).filter(|_| is_true(previous).is_none())
    };
    if let Some(c) = became(COMPLETE) {
        happened.push(Happened::Succeeded {
            reason: c.reason,
            message: c.message,
        });
    }
    if let Some(c) = became(FAILED) {
        happened.push(Happened::Failed {
            reason: c.reason,
            message: c.message,
        });
    }
}

/// The TrainJob `name` cannot run as written: it fails as `InvalidSpec`.
pub fn invalid(name: &str, reason: impl std::fmt::Display) -> Unrunnable {
    Unrunnable {
        reason: INVALID_SPEC,
        message: format!("TrainJob {name} has an invalid spec: {reason}"),
    }
}

#[cfg(test)]
mod tests;
