//! Status derivation over a job's life: the v1 condition algebra on JobSet observations.

use jobset_types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use trainset::api::JobStatus;
use trainset::status::{self, Observed, Subject};

const SUBJECT: Subject<'static> = Subject {
    kind: "PyTorchJob",
    name: "demo",
    operator_name: "pytorchjob-controller",
    replica_types: &["Master", "Worker"],
    selector: true,
    detailed_failure: false,
};

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).expect("time"))
}

fn jobset(suspend: bool, restarts: i32, conditions: serde_json::Value) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "demo"},
        "spec": {"suspend": suspend},
        "status": {"restarts": restarts, "conditions": conditions}
    }))
    .expect("JobSet")
}

fn condition(type_: &str, reason: &str, message: &str) -> serde_json::Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": "2027-01-15T08:00:00Z"})
}

/// A Job whose active pods run (each counted ready).
fn job(replica_type: &str, attempt: i32, active: i32, succeeded: i32, failed: i32) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": format!("demo-{replica_type}-x"), "labels": {
            "training.kubeflow.org/replica-type": replica_type,
            "jobset.sigs.k8s.io/restart-attempt": attempt.to_string()
        }},
        "status": {"active": active, "ready": active, "succeeded": succeeded, "failed": failed}
    }))
    .expect("Job")
}

fn derive(previous: Option<&JobStatus>, jobset: &JobSet, jobs: &[Job], now: i64) -> JobStatus {
    status::derive(
        &SUBJECT,
        previous,
        &Observed {
            jobset: Some(jobset),
            jobs,
        },
        &at(now),
    )
}

/// (type, status, reason) of every condition, in order.
fn conditions(status: &JobStatus) -> Vec<(String, String, String)> {
    status
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn c(type_: &str, status: &str, reason: &str) -> (String, String, String) {
    (type_.into(), status.into(), reason.into())
}

#[test]
fn without_a_jobset_nothing_is_reported() {
    let status = status::derive(&SUBJECT, None, &Observed::default(), &at(0));
    assert_eq!(status, JobStatus::default());
}

#[test]
fn a_life_created_running_restarting_running_succeeded() {
    let created = derive(None, &jobset(false, 0, json!([])), &[], 0);
    assert_eq!(
        conditions(&created),
        [c("Created", "True", "PyTorchJobCreated")]
    );
    assert_eq!(created.state.as_deref(), Some("Created"));
    assert_eq!(created.start_time, Some(at(0)));
    assert_eq!(
        created.replica_statuses["Worker"].selector.as_deref(),
        Some(
            "training.kubeflow.org/job-name=demo,training.kubeflow.org/operator-name=pytorchjob-controller,training.kubeflow.org/replica-type=worker"
        )
    );

    let jobs = [
        job("master", 0, 1, 0, 0),
        job("worker", 0, 1, 0, 0),
        job("worker", 0, 1, 0, 0),
    ];
    let running = derive(Some(&created), &jobset(false, 0, json!([])), &jobs, 5);
    assert_eq!(
        conditions(&running),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "True", "PyTorchJobRunning")
        ]
    );
    assert_eq!(
        (
            running.replica_statuses["Master"].active,
            running.replica_statuses["Worker"].active
        ),
        (1, 2)
    );
    assert_eq!(running.start_time, Some(at(0)), "startTime is kept");

    let restarting_js = jobset(
        false,
        1,
        json!([condition(
            "RestartingJobSet",
            "FailurePolicy_restartGang",
            "restarting"
        )]),
    );
    let restarting = derive(Some(&running), &restarting_js, &jobs, 10);
    assert_eq!(
        conditions(&restarting),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Restarting", "True", "PyTorchJobRestarting")
        ]
    );
    assert_eq!(
        (restarting.restarts, restarting.state.as_deref()),
        (Some(1), Some("Restarting"))
    );
    assert_eq!(
        restarting.replica_statuses["Worker"].active, 0,
        "Jobs of the previous attempt are not counted"
    );

    let new_jobs = [
        job("master", 1, 1, 0, 0),
        job("worker", 1, 1, 0, 0),
        job("worker", 1, 1, 0, 0),
    ];
    let again = derive(
        Some(&restarting),
        &jobset(false, 1, json!([])),
        &new_jobs,
        15,
    );
    assert_eq!(
        conditions(&again),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "True", "PyTorchJobRunning")
        ]
    );

    let done_js = jobset(
        false,
        1,
        json!([condition(
            "Completed",
            "AllJobsCompleted",
            "jobset completed successfully"
        )]),
    );
    let done_jobs = [
        job("master", 1, 0, 1, 0),
        job("worker", 1, 1, 0, 0),
        job("worker", 1, 0, 1, 0),
    ];
    let succeeded = derive(Some(&again), &done_js, &done_jobs, 20);
    assert_eq!(
        conditions(&succeeded),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "False", "PyTorchJobRunning"),
            c("Succeeded", "True", "PyTorchJobSucceeded")
        ]
    );
    assert_eq!(succeeded.completion_time, Some(at(20)));
    assert_eq!(succeeded.state.as_deref(), Some("Succeeded"));
    let worker = &succeeded.replica_statuses["Worker"];
    assert_eq!(
        (worker.active, worker.succeeded),
        (0, 2),
        "active pods count as succeeded once the job succeeded"
    );

    let later = derive(
        Some(&succeeded),
        &jobset(false, 2, json!([condition("Failed", "FailedJobs", "x")])),
        &[],
        99,
    );
    assert_eq!(
        later, succeeded,
        "nothing changes after a terminal condition"
    );
}

#[test]
fn pods_not_yet_placed_leave_the_job_created_not_running() {
    // A gang scheduler holds every pod: the Jobs count them active, none ready. v1 counts a pod
    // as running once it runs, so the job is Created alone until a pod does.
    let created = derive(None, &jobset(false, 0, json!([])), &[], 0);
    let pending = |replica_type| {
        let mut held = job(replica_type, 0, 1, 0, 0);
        if let Some(status) = held.status.as_mut() {
            status.ready = Some(0);
        }
        held
    };
    let held = [pending("master"), pending("worker")];
    let waiting = derive(Some(&created), &jobset(false, 0, json!([])), &held, 5);
    assert_eq!(
        conditions(&waiting),
        [c("Created", "True", "PyTorchJobCreated")]
    );
    assert_eq!(waiting.state.as_deref(), Some("Created"));

    let placed = [job("master", 0, 1, 0, 0), pending("worker")];
    let running = derive(Some(&waiting), &jobset(false, 0, json!([])), &placed, 6);
    assert_eq!(running.state.as_deref(), Some("Running"));
}

#[test]
fn a_failed_jobset_fails_the_job_with_its_reason_and_message() {
    let running = derive(
        None,
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 2, 0, 0)],
        0,
    );
    let failed_js = jobset(
        false,
        3,
        json!([condition(
            "Failed",
            "ReachedMaxRestarts",
            "jobset failed due to reaching max number of restarts (first failed job: demo-worker-0)"
        )]),
    );
    let failed = derive(Some(&running), &failed_js, &[job("worker", 3, 0, 0, 1)], 7);
    assert_eq!(
        conditions(&failed),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "False", "PyTorchJobRunning"),
            c("Failed", "True", "PyTorchJobFailed")
        ]
    );
    let message = failed
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("(first failed job: demo-worker-0)"),
        "{message}"
    );
    assert_eq!(
        (
            failed.completion_time,
            failed.restarts,
            failed.replica_statuses["Worker"].failed
        ),
        (Some(at(7)), Some(3), 1)
    );
}

#[test]
fn suspend_and_resume_reset_the_start_time() {
    let running = derive(
        None,
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 1, 0, 0)],
        0,
    );
    let suspended = derive(Some(&running), &jobset(true, 0, json!([])), &[], 10);
    assert_eq!(
        conditions(&suspended),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "False", "PyTorchJobSuspended"),
            c("Suspended", "True", "PyTorchJobSuspended")
        ]
    );
    assert_eq!(suspended.state.as_deref(), Some("Suspended"));
    let resumed = derive(
        Some(&suspended),
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 1, 0, 0)],
        30,
    );
    assert_eq!(
        conditions(&resumed),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "True", "PyTorchJobRunning"),
            c("Suspended", "False", "PyTorchJobResumed")
        ]
    );
    assert_eq!(resumed.start_time, Some(at(30)));
    assert_eq!(resumed.state.as_deref(), Some("Running"));
}

#[test]
fn a_job_created_suspended_gets_no_start_time_until_resumed() {
    let queued = derive(None, &jobset(true, 0, json!([])), &[], 0);
    assert_eq!(queued.start_time, None);
    // As training-operator v1.9.4: no replica statuses and no Running condition yet.
    assert!(queued.replica_statuses.is_empty());
    assert_eq!(
        conditions(&queued),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Suspended", "True", "PyTorchJobSuspended")
        ]
    );
    let admitted = derive(Some(&queued), &jobset(false, 0, json!([])), &[], 5);
    assert_eq!(admitted.start_time, Some(at(5)));
    assert_eq!(admitted.replica_statuses.len(), 2);
}

#[test]
fn workers_active_at_success_stay_counted_when_their_jobs_are_already_gone() {
    let running = derive(
        None,
        &jobset(false, 0, json!([])),
        &[
            job("master", 0, 1, 0, 0),
            job("worker", 0, 1, 0, 0),
            job("worker", 0, 1, 0, 0),
        ],
        0,
    );
    // JobSet completed and already deleted one of the two active worker Jobs.
    let done = jobset(
        false,
        0,
        json!([condition("Completed", "AllJobsCompleted", "done")]),
    );
    let succeeded = derive(
        Some(&running),
        &done,
        &[job("master", 0, 0, 1, 0), job("worker", 0, 1, 0, 0)],
        9,
    );
    let counts = |t: &str| {
        let r = &succeeded.replica_statuses[t];
        (r.active, r.succeeded, r.failed)
    };
    assert_eq!((counts("Master"), counts("Worker")), ((0, 1, 0), (0, 2, 0)));
}

#[test]
fn a_job_first_seen_finished_starts_when_its_earliest_job_started() {
    let done = jobset(
        false,
        0,
        json!([condition("Completed", "AllJobsCompleted", "done")]),
    );
    let mut early = job("worker", 0, 0, 1, 0);
    let mut late = job("worker", 0, 0, 1, 0);
    early.status.get_or_insert_with(Default::default).start_time = Some(at(3));
    late.status.get_or_insert_with(Default::default).start_time = Some(at(7));
    let status = derive(None, &done, &[late, early], 20);
    assert_eq!(status.state.as_deref(), Some("Succeeded"));
    assert_eq!(status.start_time, Some(at(3)));
    assert_eq!(status.completion_time, Some(at(20)));

    let without_jobs = derive(None, &done, &[], 20);
    assert_eq!(
        without_jobs.start_time,
        Some(at(20)),
        "no Job left: the time it was seen"
    );
}

#[test]
fn a_job_that_ran_unseen_between_two_looks_still_ends_with_running_false() {
    let created = derive(
        None,
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 0, 0, 0)],
        1,
    );
    assert_eq!(
        conditions(&created),
        [c("Created", "True", "PyTorchJobCreated")]
    );
    let done = jobset(
        false,
        0,
        json!([condition("Completed", "AllJobsCompleted", "done")]),
    );
    let succeeded = derive(Some(&created), &done, &[job("worker", 0, 0, 2, 0)], 5);
    assert_eq!(
        conditions(&succeeded),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "False", "PyTorchJobRunning"),
            c("Succeeded", "True", "PyTorchJobSucceeded"),
        ]
    );
    let failed_jobset = jobset(
        false,
        0,
        json!([condition("Failed", "FailedJobs", "worker failed")]),
    );
    let failed = derive(
        Some(&created),
        &failed_jobset,
        &[job("worker", 0, 0, 0, 1)],
        5,
    );
    assert_eq!(
        conditions(&failed)[1],
        c("Running", "False", "PyTorchJobRunning")
    );
    // No pod ever counted: nothing ran, so there is no Running to end.
    let never = derive(Some(&created), &failed_jobset, &[], 5);
    assert!(never.conditions.iter().all(|c| c.type_ != "Running"));
}

#[test]
fn the_same_observation_later_changes_nothing_but_nothing_is_patched_for_it() {
    let jobs = [job("worker", 0, 1, 0, 0)];
    let first = derive(None, &jobset(false, 0, json!([])), &jobs, 0);
    let second = derive(Some(&first), &jobset(false, 0, json!([])), &jobs, 60);
    assert_eq!(
        second, first,
        "same observation, same status, timestamps kept"
    );
    assert!(!status::changed(&first, &second));
    let fewer = derive(Some(&first), &jobset(false, 0, json!([])), &[], 61);
    assert!(
        status::changed(&first, &fewer),
        "a pod count change is a change"
    );
    let mut retimed = first.clone();
    retimed.conditions[0].last_update_time = Some(at(500));
    assert!(
        !status::changed(&first, &retimed),
        "timestamps alone are not a change"
    );
}

#[test]
fn trainset_decided_failures_are_terminal() {
    let invalid = status::fail(&SUBJECT, None, "InvalidSpec", "spec.x: bad", &at(3));
    assert_eq!(
        conditions(&invalid),
        [c("Failed", "True", "PyTorchJobInvalidSpec")]
    );
    assert_eq!(
        (invalid.state.as_deref(), invalid.completion_time.clone()),
        (Some("Failed"), Some(at(3)))
    );
    let running = derive(
        None,
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 1, 0, 0)],
        0,
    );
    let expired = status::fail(
        &SUBJECT,
        Some(&running),
        "DeadlineExceeded",
        "active longer than 60s",
        &at(61),
    );
    assert_eq!(
        conditions(&expired),
        [
            c("Created", "True", "PyTorchJobCreated"),
            c("Running", "False", "PyTorchJobRunning"),
            c("Failed", "True", "PyTorchJobDeadlineExceeded")
        ]
    );
    // Its pods are stopped: none counts as active any more.
    assert_eq!(running.replica_statuses["Worker"].active, 1);
    assert_eq!(expired.replica_statuses["Worker"].active, 0);
    assert_eq!(
        status::fail(&SUBJECT, Some(&expired), "Other", "x", &at(90)),
        expired
    );
}

#[test]
fn the_deadline_counts_from_start_time_and_pauses_while_suspended_or_finished() {
    use std::time::Duration;
    let running = derive(
        None,
        &jobset(false, 0, json!([])),
        &[job("worker", 0, 1, 0, 0)],
        0,
    );
    assert_eq!(
        status::deadline_left(None, &running, false, &at(5)),
        None,
        "no deadline"
    );
    assert_eq!(
        status::deadline_left(Some(60), &running, false, &at(15)),
        Some(Duration::from_secs(45))
    );
    assert_eq!(
        status::deadline_left(Some(60), &running, false, &at(600)),
        Some(Duration::ZERO),
        "expired"
    );
    assert_eq!(
        status::deadline_left(Some(60), &running, true, &at(600)),
        None,
        "suspended"
    );
    let restarted = derive(
        Some(&running),
        &jobset(false, 1, json!([])),
        &[job("worker", 1, 1, 0, 0)],
        30,
    );
    assert_eq!(
        status::deadline_left(Some(60), &restarted, false, &at(40)),
        Some(Duration::from_secs(20)),
        "a gang restart keeps the clock"
    );
    let done = status::fail(&SUBJECT, Some(&running), "X", "x", &at(20));
    assert_eq!(
        status::deadline_left(Some(60), &done, false, &at(30)),
        None,
        "finished"
    );
}
