//! A TrainJob's status, v2's way (as Trainer v2.3.0 writes it): conditions
//! `Suspended`, `Complete` and `Failed` only (the Kubeflow SDK reads any other condition as "not
//! running yet"), and `jobsStatus` copied from the JobSet (Kueue counts active Jobs by it); the
//! additive `startTime` and `completionTime` Trainer lacks (KEP-2899). Unlike
//! Trainer v2.3.0, a finished TrainJob stays finished whatever happens to its JobSet afterwards
//! (kubeflow/trainer#3737, #3779). Pure: the caller passes the JobSet it observed and the time.

use jobset_types::JobSet;
use jobset_types::keys::condition as jobset_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{FAILED, SUSPENDED};
use crate::api::trainer::{JobStatus, TrainJob, TrainJobStatus};
use crate::run_policy;

pub const COMPLETE: &str = "Complete";
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
const RESUMED: &str = "Resumed";

fn is_true(status: &TrainJobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the TrainJob is `Complete` or `Failed`.
pub fn is_finished(status: &TrainJobStatus) -> bool {
    is_true(status, COMPLETE) || is_true(status, FAILED)
}

/// Sets a condition; its transition time changes only when its status does.
fn set(status: &mut TrainJobStatus, condition: Condition) {
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == condition.type_)
    {
        Some(existing) if existing.status == condition.status => {
            existing.reason = condition.reason;
            existing.message = condition.message;
        }
        Some(existing) => *existing = condition,
        None => status.conditions.push(condition),
    }
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// The status the TrainJob should have, given its JobSet (if it exists).
pub fn derive(job: &TrainJob, jobset: Option<&JobSet>, now: &Time) -> TrainJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    if is_finished(&status) {
        return status;
    }
    if job.spec.suspend == Some(true) {
        set(
            &mut status,
            condition(SUSPENDED, true, SUSPENDED, "TrainJob is suspended", now),
        );
    } else if is_true(&status, SUSPENDED) {
        set(
            &mut status,
            condition(SUSPENDED, false, RESUMED, "TrainJob is resumed", now),
        );
    }
    if jobset.is_some() && job.spec.suspend != Some(true) && status.start_time.is_none() {
        status.start_time = Some(now.clone());
    }
    let Some(observed) = jobset.and_then(|js| js.status.as_ref()) else {
        return status;
    };
    for (theirs, ours) in [
        (jobset_condition::COMPLETED, COMPLETE),
        (jobset_condition::FAILED, FAILED),
    ] {
        if let Some(found) = observed
            .conditions
            .iter()
            .find(|c| c.type_ == theirs && c.status == "True")
        {
            set(
                &mut status,
                Condition {
                    type_: ours.to_owned(),
                    ..found.clone()
                },
            );
        }
    }
    if is_finished(&status) {
        let ended = status
            .conditions
            .iter()
            .find(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
            .map(|c| c.last_transition_time.clone());
        status.completion_time = ended;
    }
    status.jobs_status = observed
        .replicated_jobs_status
        .iter()
        .map(|r| JobStatus {
            name: r.name.clone(),
            ready: r.ready,
            succeeded: r.succeeded,
            failed: r.failed,
            active: r.active,
            suspended: r.suspended,
        })
        .collect();
    status
}

/// `status` with the TrainJob `Failed` for what trainset decides itself: an exceeded deadline, a
/// spec it cannot run, a JobSet name another job holds. A finished TrainJob is left as it is.
pub fn fail(mut status: TrainJobStatus, reason: &str, message: &str, now: &Time) -> TrainJobStatus {
    if !is_finished(&status) {
        set(&mut status, condition(FAILED, true, reason, message, now));
        status.completion_time = Some(now.clone());
    }
    status
}

/// Time left of `activeDeadlineSeconds` for the TrainJob with `status`, counted from creation or
/// from the last resume; `None` when no deadline runs now (none set, suspended, finished).
pub fn deadline_left(
    job: &TrainJob,
    status: &TrainJobStatus,
    now: &Time,
) -> Option<std::time::Duration> {
    let seconds = u64::try_from(job.spec.active_deadline_seconds?).ok()?;
    if job.spec.suspend == Some(true) || is_finished(status) {
        return None;
    }
    let resumed = status
        .conditions
        .iter()
        .find(|c| c.type_ == SUSPENDED && c.status == "False")
        .map(|c| c.last_transition_time.clone());
    let start = resumed.or_else(|| job.metadata.creation_timestamp.clone())?;
    Some(run_policy::left(seconds, &start, now))
}
