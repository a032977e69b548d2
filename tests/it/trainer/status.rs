//! A TrainJob's status from its JobSet, v2's way: `Suspended`/`Complete`/`Failed` only, the
//! JobSet's conditions copied whole, `jobsStatus` copied, deadlines from creation or resume, and
//! a finished TrainJob staying finished.

use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use trainset::api::trainer::{TrainJob, TrainJobStatus};
use trainset::status::trainer::{deadline_left, derive, fail, is_finished};

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).expect("time"))
}

fn stamp(second: i64) -> Value {
    serde_json::to_value(at(second)).expect("time")
}

fn trainjob(spec: Value, status: Value) -> TrainJob {
    let mut job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ns", "creationTimestamp": stamp(0)},
        "spec": spec
    });
    if !status.is_null() {
        job["status"] = status;
    }
    serde_json::from_value(job).expect("a TrainJob")
}

fn spec(extra: Value) -> Value {
    let mut spec = json!({"runtimeRef": {"name": "torch-distributed"}});
    spec.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    spec
}

fn jobset(conditions: Value, counts: Value) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "tj"},
        "spec": {},
        "status": {"conditions": conditions, "replicatedJobsStatus": counts}
    }))
    .expect("a JobSet")
}

fn status_of(job: &TrainJob) -> TrainJobStatus {
    job.status.clone().unwrap_or_default()
}

fn conditions(status: &TrainJobStatus) -> Vec<(String, String, String)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn triple(type_: &str, status: &str, reason: &str) -> (String, String, String) {
    (type_.to_owned(), status.to_owned(), reason.to_owned())
}

#[test]
fn a_running_trainjob_has_no_condition_and_the_jobsets_counts() {
    let counts = json!([{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]);
    let status = derive(
        &trainjob(spec(json!({})), Value::Null),
        Some(&jobset(json!([]), counts)),
        &at(10),
    );
    assert!(
        status.conditions.is_empty(),
        "the SDK reads any condition as not running"
    );
    assert_eq!(
        serde_json::to_value(&status.jobs_status).expect("JSON"),
        json!([{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}])
    );
    assert_eq!(
        (status.start_time.clone(), status.completion_time.clone()),
        (Some(at(10)), None)
    );
    // Kept from the first time it ran.
    let later = derive(
        &trainjob(
            spec(json!({})),
            serde_json::to_value(&status).expect("JSON"),
        ),
        Some(&jobset(json!([]), json!([]))),
        &at(20),
    );
    assert_eq!(later.start_time, Some(at(10)));
}

#[test]
fn suspend_and_resume() {
    let suspended = derive(
        &trainjob(spec(json!({"suspend": true})), Value::Null),
        None,
        &at(5),
    );
    assert_eq!(
        conditions(&suspended),
        [triple("Suspended", "True", "Suspended")]
    );
    assert_eq!(suspended.conditions[0].message, "TrainJob is suspended");
    assert_eq!(
        suspended.start_time, None,
        "a suspended TrainJob has not started"
    );

    let resumed = derive(
        &trainjob(
            spec(json!({"suspend": false})),
            serde_json::to_value(&suspended).expect("JSON"),
        ),
        None,
        &at(50),
    );
    assert_eq!(
        conditions(&resumed),
        [triple("Suspended", "False", "Resumed")]
    );
    assert_eq!(resumed.conditions[0].message, "TrainJob is resumed");
    assert_eq!(resumed.conditions[0].last_transition_time, at(50));

    // Never suspended: no Suspended condition at all.
    let plain = derive(
        &trainjob(spec(json!({"suspend": false})), Value::Null),
        None,
        &at(5),
    );
    assert!(plain.conditions.is_empty());
}

#[test]
fn the_jobsets_completion_and_failure_are_copied_whole() {
    let completed = json!([{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully", "lastTransitionTime": stamp(90)}]);
    let status = derive(
        &trainjob(spec(json!({})), Value::Null),
        Some(&jobset(completed, json!([]))),
        &at(100),
    );
    assert_eq!(
        conditions(&status),
        [triple("Complete", "True", "AllJobsCompleted")]
    );
    assert_eq!(
        status.conditions[0].message,
        "jobset completed successfully"
    );
    assert_eq!(status.conditions[0].last_transition_time, at(90));
    assert!(is_finished(&status));
    // The additive times: started when first seen running, completed when the JobSet completed.
    assert_eq!(status.start_time, Some(at(100)));
    assert_eq!(status.completion_time, Some(at(90)));

    let failed = json!([{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed due to one or more job failures", "lastTransitionTime": stamp(91)}]);
    let status = derive(
        &trainjob(spec(json!({})), Value::Null),
        Some(&jobset(failed, json!([]))),
        &at(100),
    );
    assert_eq!(
        conditions(&status),
        [triple("Failed", "True", "FailedJobs")]
    );
}

#[test]
fn a_finished_trainjob_stays_finished_whatever_its_jobset_does() {
    let done = json!({"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted", "message": "done", "lastTransitionTime": stamp(90)}],
                      "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]});
    let job = trainjob(spec(json!({})), done);
    // The JobSet deleted (TTL), or recreated and running again: nothing changes.
    assert_eq!(
        derive(&job, None, &at(200)),
        job.status.clone().expect("status")
    );
    let running = jobset(
        json!([]),
        json!([{"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]),
    );
    assert_eq!(
        derive(&job, Some(&running), &at(200)),
        job.status.clone().expect("status")
    );
    // Nor can trainset fail it afterwards.
    assert_eq!(
        fail(
            job.status.clone().unwrap_or_default(),
            "DeadlineExceeded",
            "late",
            &at(300)
        ),
        job.status.clone().expect("status")
    );
}

#[test]
fn deadlines_count_from_creation_or_the_last_resume() {
    let job = trainjob(spec(json!({"activeDeadlineSeconds": 60})), Value::Null);
    assert_eq!(
        deadline_left(&job, &status_of(&job), &at(20)),
        Some(Duration::from_secs(40))
    );
    assert_eq!(
        deadline_left(&job, &status_of(&job), &at(90)),
        Some(Duration::ZERO)
    );

    let resumed = json!({"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed", "lastTransitionTime": stamp(100)}]});
    let job = trainjob(spec(json!({"activeDeadlineSeconds": 60})), resumed);
    assert_eq!(
        deadline_left(&job, &status_of(&job), &at(130)),
        Some(Duration::from_secs(30))
    );

    let suspended = trainjob(
        spec(json!({"activeDeadlineSeconds": 60, "suspend": true})),
        Value::Null,
    );
    assert_eq!(
        deadline_left(&suspended, &status_of(&suspended), &at(500)),
        None
    );
    let unbounded = trainjob(spec(json!({})), Value::Null);
    assert_eq!(
        deadline_left(&unbounded, &status_of(&unbounded), &at(500)),
        None
    );

    let failed = fail(
        job.status.clone().unwrap_or_default(),
        "DeadlineExceeded",
        "TrainJob exceeded its active deadline",
        &at(161),
    );
    assert_eq!(
        conditions(&failed),
        [
            triple("Suspended", "False", "Resumed"),
            triple("Failed", "True", "DeadlineExceeded")
        ]
    );
}
