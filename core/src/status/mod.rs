//! Derives a training job's status from its observed JobSet and Jobs. Pure: the
//! caller passes what it observed and the current time.
//!
//! v1's condition algebra holds: nothing changes after a terminal condition; the same type,
//! status and reason is a no-op; `Running` and `Restarting` exclude each other; `Succeeded` or
//! `Failed` sets `Running` to False.

pub mod followed;
pub mod trainer;

use std::collections::BTreeMap;

use jobset_types::JobSet;
use jobset_types::keys::{condition as jobset_condition, label as jobset_label};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{JobCondition, JobStatus, ReplicaStatus};
use crate::compile::{JOB_NAME, OPERATOR_NAME, REPLICA_TYPE};
use crate::run_policy;

pub const CREATED: &str = "Created";
pub const RUNNING: &str = "Running";
pub const RESTARTING: &str = "Restarting";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";
pub const SUSPENDED: &str = "Suspended";

/// What the status is derived for.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// `TFJob`, `PyTorchJob`, ...: the prefix of every reason.
    pub kind: &'a str,
    pub name: &'a str,
    /// The value of `training.kubeflow.org/operator-name` on the job's pods.
    pub operator_name: &'a str,
    /// Canonical replica types of the job, e.g. `["Master", "Worker"]`.
    pub replica_types: &'a [&'a str],
    /// Whether each replica status carries its pods' label selector (v1: PyTorch, Paddle, JAX).
    pub selector: bool,
    /// Whether a failure's reason names its cause (`MPIJobBackoffLimitExceeded`) or is
    /// `<Kind>Failed` whatever the cause, as training-operator v1.9.4 writes it.
    pub detailed_failure: bool,
}

impl Subject<'_> {
    /// What follows the kind in the reason of a failure caused by `cause`.
    pub fn failure<'c>(&self, cause: &'c str) -> &'c str {
        if self.detailed_failure {
            cause
        } else {
            "Failed"
        }
    }
}

/// What the controller observed in the cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    pub jobset: Option<&'a JobSet>,
    /// The Jobs the JobSet owns.
    pub jobs: &'a [Job],
}

/// The new status, from the previous one and what was observed.
pub fn derive(
    subject: &Subject<'_>,
    previous: Option<&JobStatus>,
    observed: &Observed<'_>,
    now: &Time,
) -> JobStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return status;
    }
    let Some(jobset) = observed.jobset else {
        return status;
    };
    let kind = subject.kind;
    let name = subject.name;
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    conditions.set(
        CREATED,
        true,
        &format!("{kind}Created"),
        &format!("{kind} {name} is created."),
    );

    let jobset_status = jobset.status.as_ref();
    let jobset_condition = |type_: &str| {
        jobset_status.and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
        })
    };
    let suspended = jobset.spec.suspend == Some(true);
    let restarts = jobset_status.map_or(0, |s| s.restarts);
    status.restarts = Some(restarts);
    let before = status.replica_statuses.clone();
    // v1 writes replica statuses once a job runs: one created suspended has none until resumed.
    if !(suspended && status.replica_statuses.is_empty()) {
        status.replica_statuses = replica_statuses(subject, observed.jobs, restarts);
    }
    let ran = status
        .replica_statuses
        .values()
        .chain(before.values())
        .any(|r| r.active > 0 || r.succeeded > 0 || r.failed > 0);
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };

    if let Some(done) = jobset_condition(jobset_condition::COMPLETED) {
        conditions.ran_unseen(ran, kind, name);
        let reason = format!("{kind}Succeeded");
        conditions.set(
            SUCCEEDED,
            true,
            &reason,
            &format!("{kind} {name} successfully completed: {}", done.message),
        );
        conditions.stop(RUNNING);
        conditions.remove(RESTARTING);
        // Pods still active at success count as succeeded, as in v1. JobSet deletes the active
        // Jobs as it completes, so some may be gone from what was observed: what the last
        // status counted is a floor.
        for (replica_type, replica) in &mut status.replica_statuses {
            let counted = before
                .get(replica_type)
                .map_or(0, |r| r.succeeded.saturating_add(r.active));
            replica.succeeded = replica
                .succeeded
                .saturating_add(replica.active)
                .max(counted);
            replica.active = 0;
        }
        status.completion_time = Some(now.clone());
    } else if let Some(failed) = jobset_condition(jobset_condition::FAILED) {
        conditions.ran_unseen(ran, kind, name);
        let reason = format!("{kind}{}", subject.failure(&failed.reason));
        conditions.set(
            FAILED,
            true,
            &reason,
            &format!("{kind} {name} has failed: {}", failed.message),
        );
        conditions.stop(RUNNING);
        conditions.remove(RESTARTING);
        status.completion_time = Some(now.clone());
    } else if suspended {
        let reason = format!("{kind}Suspended");
        conditions.set(
            SUSPENDED,
            true,
            &reason,
            &format!("{kind} {name} is suspended."),
        );
        // v1 turns Running False (reason Suspended) only on a job that was running.
        if conditions.is_true(RUNNING) {
            conditions.set(
                RUNNING,
                false,
                &reason,
                &format!("{kind} {name} is suspended."),
            );
        }
        conditions.remove(RESTARTING);
    } else {
        if conditions.is_true(SUSPENDED) {
            conditions.set(
                SUSPENDED,
                false,
                &format!("{kind}Resumed"),
                &format!("{kind} {name} is resumed."),
            );
            // A resumed job's clock starts again, as in v1.
            status.start_time = Some(now.clone());
        }
        if jobset_condition(jobset_condition::RESTARTING).is_some() {
            let message =
                format!("{kind} {name} is restarting all its pods (JobSet restart {restarts}).");
            conditions.set(RESTARTING, true, &format!("{kind}Restarting"), &message);
            conditions.remove(RUNNING);
        } else if any_pod_ready(observed.jobs, restarts) {
            conditions.set(
                RUNNING,
                true,
                &format!("{kind}Running"),
                &format!("{kind} {name} is running."),
            );
            conditions.remove(RESTARTING);
        }
        if status.start_time.is_none() {
            status.start_time = Some(now.clone());
        }
    }
    // A job first seen finished (trainset was down while it ran) still tells when it started:
    // from its earliest Job, as v1 set startTime before any end.
    if status.completion_time.is_some() && status.start_time.is_none() {
        status.start_time = Some(earliest_start(observed.jobs).unwrap_or_else(|| now.clone()));
    }
    status.state = Some(state(&status).to_owned());
    status
}

fn earliest_start(jobs: &[Job]) -> Option<Time> {
    jobs.iter()
        .filter_map(|j| j.status.as_ref()?.start_time.clone())
        .min_by_key(|t| t.0)
}

/// Marks the job `Failed` with `<Kind><reason>`: for what trainset itself decides (an invalid
/// spec, an exceeded deadline). trainset then stops the pods, so none counts as active
/// (training-operator v1.9.4 keeps the counts of its last pass: docs/compatibility.md, Deviations from v1).
pub fn fail(
    subject: &Subject<'_>,
    previous: Option<&JobStatus>,
    reason: &str,
    message: &str,
    now: &Time,
) -> JobStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return status;
    }
    let reason = format!("{}{reason}", subject.kind);
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    conditions.set(FAILED, true, &reason, message);
    conditions.stop(RUNNING);
    conditions.remove(RESTARTING);
    for replica in status.replica_statuses.values_mut() {
        replica.active = 0;
    }
    status.completion_time = Some(now.clone());
    status.state = Some(FAILED.to_owned());
    status
}

/// A job whose JobSet cannot be created yet, for a reason retrying may heal (`error`: a webhook
/// that denies for the moment, an apiserver away): `Created` False says why, until the JobSet is
/// made and [`derive`] turns it True.
pub fn creation_retrying(
    subject: &Subject<'_>,
    previous: Option<&JobStatus>,
    error: &str,
    now: &Time,
) -> JobStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return status;
    }
    let (kind, name) = (subject.kind, subject.name);
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    conditions.set(
        CREATED,
        false,
        &format!("{kind}CreationRetrying"),
        &format!("{kind} {name}'s JobSet cannot be created yet; retrying with backoff: {error}"),
    );
    status.state = Some(state(&status).to_owned());
    status
}

/// Time left before `activeDeadlineSeconds` runs out, counted from `startTime` (which a gang
/// restart keeps and a resume resets); `None` when there is no deadline to enforce now.
pub fn deadline_left(
    deadline_seconds: Option<i64>,
    status: &JobStatus,
    suspended: bool,
    now: &Time,
) -> Option<std::time::Duration> {
    let seconds = u64::try_from(deadline_seconds?).unwrap_or(0);
    if suspended || is_terminal(status) {
        return None;
    }
    Some(run_policy::left(seconds, status.start_time.as_ref()?, now))
}

/// Whether the job reached `Succeeded` or `Failed`.
pub fn is_terminal(status: &JobStatus) -> bool {
    is_true(status, SUCCEEDED) || is_true(status, FAILED)
}

/// Whether `status` has the condition `type_` True.
pub fn is_true(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether two statuses differ in anything but timestamps: only then is a patch sent.
pub fn changed(old: &JobStatus, new: &JobStatus) -> bool {
    without_times(old) != without_times(new)
}

/// Whether two statuses that [`changed`] differ only in their replica counts (no condition,
/// state, restart or time changed): such a change may wait for the next write.
pub fn only_counts_changed(old: &JobStatus, new: &JobStatus) -> bool {
    let without_counts = |status: &JobStatus| {
        let mut status = without_times(status);
        status.replica_statuses.clear();
        status
    };
    // Whether any pod of a suspended job is active is more than a count: Kueue gives a preempted
    // job's quota back only once none of its pods is active, so that change is written at once.
    let any_active = |status: &JobStatus| status.replica_statuses.values().any(|r| r.active > 0);
    let kueue_waits = is_true(new, SUSPENDED) && any_active(old) != any_active(new);
    !kueue_waits && without_counts(old) == without_counts(new)
}

fn without_times(status: &JobStatus) -> JobStatus {
    let epoch = || Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let mut status = status.clone();
    status.start_time = status.start_time.as_ref().map(|_| epoch());
    status.completion_time = status.completion_time.as_ref().map(|_| epoch());
    status.last_reconcile_time = None;
    for condition in &mut status.conditions {
        condition.last_update_time = None;
        condition.last_transition_time = None;
    }
    status
}

/// One word for `kubectl get`: the terminal state, else Suspended, Restarting, Running, Created.
pub fn state(status: &JobStatus) -> &'static str {
    let is = |t: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    [FAILED, SUCCEEDED, SUSPENDED, RESTARTING, RUNNING, CREATED]
        .into_iter()
        .find(|t| is(t))
        .unwrap_or(CREATED)
}

/// Whether the job runs: a Job of the JobSet's current restart attempt counts a ready pod. v1
/// says `Running` once a pod's phase is Running; a Job's `active` also counts pods not yet
/// placed, such as those a gang scheduler holds until the whole gang fits, which v1 reports as
/// `Created` alone.
fn any_pod_ready(jobs: &[Job], restarts: i32) -> bool {
    let current = restarts.to_string();
    jobs.iter()
        .filter(|job| of_attempt(job, &current))
        .any(|job| job.status.as_ref().and_then(|s| s.ready).unwrap_or(0) > 0)
}

/// Whether `job` belongs to the JobSet's restart attempt `current` (a Job without the label does).
fn of_attempt(job: &Job, current: &str) -> bool {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(jobset_label::RESTART_ATTEMPT))
        .is_none_or(|attempt| attempt == current)
}

/// Pod counts per replica type, summed over the Jobs of the JobSet's current restart attempt.
fn replica_statuses(
    subject: &Subject<'_>,
    jobs: &[Job],
    restarts: i32,
) -> BTreeMap<String, ReplicaStatus> {
    let current = restarts.to_string();
    subject
        .replica_types
        .iter()
        .map(|replica_type| {
            let lower = replica_type.to_ascii_lowercase();
            let mut counts = ReplicaStatus {
                selector: subject.selector.then(|| {
                    format!(
                        "{JOB_NAME}={},{OPERATOR_NAME}={},{REPLICA_TYPE}={lower}",
                        subject.name, subject.operator_name
                    )
                }),
                ..Default::default()
            };
            for job in jobs {
                let labels = job.metadata.labels.as_ref();
                let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
                if label(REPLICA_TYPE) != Some(lower.as_str()) || !of_attempt(job, &current) {
                    continue;
                }
                // Counts come from the cluster: saturate rather than overflow.
                let job_status = job.status.as_ref();
                let count = |n: Option<i32>| n.unwrap_or(0).max(0);
                counts.active = counts
                    .active
                    .saturating_add(count(job_status.and_then(|s| s.active)));
                counts.succeeded = counts
                    .succeeded
                    .saturating_add(count(job_status.and_then(|s| s.succeeded)));
                counts.failed = counts
                    .failed
                    .saturating_add(count(job_status.and_then(|s| s.failed)));
            }
            ((*replica_type).to_owned(), counts)
        })
        .collect()
}

/// The condition list with v1's update rules.
struct Conditions<'a> {
    list: &'a mut Vec<JobCondition>,
    now: &'a Time,
}

impl Conditions<'_> {
    fn is_true(&self, type_: &str) -> bool {
        self.list
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }

    /// Sets a condition; the same status and reason is a no-op, and the transition time moves
    /// only when the status flips.
    fn set(&mut self, type_: &str, status: bool, reason: &str, message: &str) {
        let status = if status { "True" } else { "False" };
        match self.list.iter_mut().find(|c| c.type_ == type_) {
            Some(existing)
                if existing.status == status && existing.reason.as_deref() == Some(reason) => {}
            Some(existing) => {
                if existing.status != status {
                    existing.last_transition_time = Some(self.now.clone());
                }
                existing.status = status.to_owned();
                existing.reason = Some(reason.to_owned());
                existing.message = Some(message.to_owned());
                existing.last_update_time = Some(self.now.clone());
            }
            None => self.list.push(JobCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: Some(reason.to_owned()),
                message: Some(message.to_owned()),
                last_update_time: Some(self.now.clone()),
                last_transition_time: Some(self.now.clone()),
            }),
        }
    }

    /// What v1 does to `Running` when a job ends: an existing condition turns False and keeps
    /// its reason and message; an absent one stays absent.
    fn stop(&mut self, type_: &str) {
        if let Some(existing) = self
            .list
            .iter_mut()
            .find(|c| c.type_ == type_ && c.status == "True")
        {
            existing.status = "False".to_owned();
            existing.last_transition_time = Some(self.now.clone());
            existing.last_update_time = Some(self.now.clone());
        }
    }

    /// A job whose pods started and ended between two looks still ends with `Running` False,
    /// as one seen running does: what users see does not depend on when trainset looked.
    fn ran_unseen(&mut self, ran: bool, kind: &str, name: &str) {
        if ran && !self.list.iter().any(|c| c.type_ == RUNNING) {
            let (reason, message) = (
                format!("{kind}Running"),
                format!("{kind} {name} is running."),
            );
            self.set(RUNNING, false, &reason, &message);
        }
    }

    fn remove(&mut self, type_: &str) {
        self.list.retain(|c| c.type_ != type_);
    }
}
