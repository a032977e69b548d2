//! The Trainer plan, case by case.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).expect("time"))
}

fn trainjob(spec: Value, status: Value) -> TrainJob {
    let mut spec_with_ref = json!({"runtimeRef": {"name": "torch-distributed"}});
    if let (Some(all), Some(extra)) = (spec_with_ref.as_object_mut(), spec.as_object()) {
        all.extend(extra.clone());
    }
    let mut job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ns", "uid": "tj-uid",
                     "creationTimestamp": serde_json::to_value(at(0)).expect("time")},
        "spec": spec_with_ref
    });
    if !status.is_null() {
        job["status"] = status;
    }
    serde_json::from_value(job).expect("TrainJob")
}

fn jobset(owner: (&str, &str), suspend: bool, status: Value) -> JobSet {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "tj", "namespace": "ns", "ownerReferences": [{
            "apiVersion": "x/v1", "kind": owner.0, "name": "tj", "uid": owner.1, "controller": true
        }]},
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": "node", "template": {}}]},
        "status": status
    }))
    .expect("JobSet")
}

fn own(suspend: bool, status: Value) -> JobSet {
    jobset(("TrainJob", "tj-uid"), suspend, status)
}

fn compiled(suspend: bool) -> Compiled {
    Compiled {
        snapshot: Some(ConfigMap::default()),
        objects: crate::compile::Compiled {
            jobset: own(suspend, Value::Null),
            config_map: None,
            secret: None,
            launcher_access: None,
            gang: Vec::new(),
            autoscaler: None,
        },
    }
}

fn facts<'a>(
    job: &'a TrainJob,
    jobset: Option<&'a JobSet>,
    compiled: Option<Result<Compiled, Unrunnable>>,
) -> Facts<'a> {
    Facts {
        job,
        jobset,
        compiled,
        now: at(100),
        creation_failure: None,
    }
}

fn true_conditions(plan: &Plan) -> Vec<(String, String)> {
    plan.status
        .iter()
        .flat_map(|s| &s.conditions)
        .filter(|c| c.status == "True")
        .map(|c| (c.type_.clone(), c.reason.clone()))
        .collect()
}

fn pair(type_: &str, reason: &str) -> (String, String) {
    (type_.to_owned(), reason.to_owned())
}

#[test]
fn a_new_trainjob_gets_its_snapshot_and_jobset() {
    let job = trainjob(json!({}), Value::Null);
    assert!(needs_compiled(&job, None));
    let plan = plan(facts(&job, None, Some(Ok(compiled(false)))));
    let created = plan.create.expect("created");
    assert!(created.snapshot.is_some());
    assert_eq!(plan.happened, [Happened::Created]);
    // Nothing to say yet: the SDK reads an empty condition list as "not finished".
    assert!(plan.status.is_none(), "{:?}", plan.status);
}

#[test]
fn a_jobset_name_another_job_holds_fails_the_trainjob() {
    let job = trainjob(json!({}), Value::Null);
    let theirs = jobset(("PyTorchJob", "py-uid"), false, Value::Null);
    assert!(!needs_compiled(&job, Some(&theirs)));
    let plan = plan(facts(&job, Some(&theirs), None));
    assert!(plan.create.is_none() && plan.suspend.is_none() && !plan.delete_jobset);
    assert_eq!(true_conditions(&plan), [pair("Failed", NAME_CONFLICT)]);
    let message = &plan.status.as_ref().expect("status").conditions[0].message;
    assert!(message.contains("belongs to PyTorchJob tj"), "{message}");
}

#[test]
fn a_trainjob_whose_pods_kubernetes_refuses_fails_and_its_jobset_goes() {
    let job = trainjob(json!({}), Value::Null);
    let live = own(false, json!({}));
    let refused = "Job tj-node-0: Error creating: Pod \"tj-node-0-0-x\" is invalid: \
                   spec.initContainers[0].image: Required value";
    let plan = plan(Facts {
        creation_failure: Some(refused.to_owned()),
        ..facts(&job, Some(&live), None)
    });
    assert!(plan.delete_jobset && plan.create.is_none());
    assert_eq!(true_conditions(&plan), [pair("Failed", INVALID_SPEC)]);
    let message = &plan.status.as_ref().expect("status").conditions[0].message;
    assert!(
        message.contains("initContainers[0].image: Required value"),
        "{message}"
    );
}

#[test]
fn a_finished_trainjob_never_gets_its_jobset_back() {
    let done = json!({"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
        "message": "", "lastTransitionTime": serde_json::to_value(at(50)).expect("time")}]});
    let job = trainjob(json!({}), done);
    assert!(!needs_compiled(&job, None));
    let plan = plan(facts(&job, None, None));
    assert!(plan.create.is_none() && plan.status.is_none() && plan.happened.is_empty());
}

#[test]
fn suspending_and_resuming_follow_the_trainjob() {
    let suspended = trainjob(json!({"suspend": true}), Value::Null);
    let running = own(false, json!({}));
    assert!(!needs_compiled(&suspended, Some(&running)));
    let plan_suspend = plan(facts(&suspended, Some(&running), None));
    assert_eq!(plan_suspend.suspend, Some(SuspendWrite::Suspend));
    assert_eq!(
        true_conditions(&plan_suspend),
        [pair("Suspended", "Suspended")]
    );

    let was_suspended = plan_suspend
        .status
        .map(|s| serde_json::to_value(s).expect("status"));
    let resumed = trainjob(json!({"suspend": false}), was_suspended.unwrap_or_default());
    let parked = own(true, json!({}));
    assert!(needs_compiled(&resumed, Some(&parked)));
    let plan_resume = plan(facts(&resumed, Some(&parked), Some(Ok(compiled(false)))));
    assert!(
        matches!(plan_resume.suspend, Some(SuspendWrite::Resume { .. })),
        "{:?}",
        plan_resume.suspend
    );
    let suspended_condition = plan_resume
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "Suspended")
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(
        suspended_condition,
        Some(("False".to_owned(), "Resumed".to_owned()))
    );
}

#[test]
fn a_deadline_fails_the_trainjob_and_deletes_its_jobset() {
    let job = trainjob(json!({"activeDeadlineSeconds": 60}), Value::Null);
    let running = own(false, json!({}));
    let plan = plan(facts(&job, Some(&running), None));
    assert!(plan.delete_jobset);
    assert_eq!(true_conditions(&plan), [pair("Failed", DEADLINE_EXCEEDED)]);
    assert!(plan.requeue.is_none());

    let early = trainjob(json!({"activeDeadlineSeconds": 300}), Value::Null);
    let waiting = super::plan(facts(&early, Some(&running), None));
    assert!(!waiting.delete_jobset);
    assert_eq!(waiting.requeue, Some(Duration::from_secs(201)));
}

#[test]
fn a_trainjob_handed_to_multikueue_is_left_alone() {
    let job = trainjob(
        json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
        Value::Null,
    );
    assert!(!needs_compiled(&job, None));
    let plan = plan(facts(&job, None, None));
    assert!(plan.create.is_none() && plan.status.is_none());
}

#[test]
fn what_cannot_run_fails_with_its_reason() {
    let job = trainjob(json!({}), Value::Null);
    let unsupported = Unrunnable {
        reason: RUNTIME_NOT_SUPPORTED,
        message: "no such kind".to_owned(),
    };
    let plan_unsupported = plan(facts(&job, None, Some(Err(unsupported))));
    assert!(plan_unsupported.create.is_none());
    assert_eq!(
        true_conditions(&plan_unsupported),
        [pair("Failed", RUNTIME_NOT_SUPPORTED)]
    );
    let plan_invalid = plan(facts(&job, None, Some(Err(invalid("tj", "spec.x: bad")))));
    assert_eq!(
        plan_invalid.happened,
        [Happened::Refused {
            reason: INVALID_SPEC.to_owned(),
            message: "TrainJob tj has an invalid spec: spec.x: bad".to_owned()
        }]
    );
}

#[test]
fn a_completed_jobset_completes_the_trainjob_once() {
    let job = trainjob(json!({}), Value::Null);
    let completed = own(
        false,
        json!({"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": serde_json::to_value(at(90)).expect("time")}],
               "replicatedJobsStatus": [{"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]}),
    );
    let plan = plan(facts(&job, Some(&completed), None));
    assert_eq!(
        true_conditions(&plan),
        [pair("Complete", "AllJobsCompleted")]
    );
    assert_eq!(
        plan.happened,
        [Happened::Succeeded {
            reason: "AllJobsCompleted".to_owned(),
            message: "jobset completed successfully".to_owned()
        }]
    );
    let status = plan.status.expect("status");
    assert_eq!(status.jobs_status[0].succeeded, 2);
    let again = trainjob(json!({}), serde_json::to_value(&status).expect("status"));
    let second = super::plan(facts(&again, Some(&completed), None));
    assert!(second.status.is_none() && second.happened.is_empty());
}

#[test]
fn a_jobset_trainer_made_is_labelled_as_trainsets_once() {
    let job = trainjob(json!({}), json!(null));
    // Trainer's JobSet: the TrainJob's, without trainset's label.
    let theirs = own(false, json!({}));
    assert!(plan(facts(&job, Some(&theirs), None)).label_jobset);
    let mut labelled = theirs.clone();
    labelled.metadata.labels = Some([(MANAGED_BY.to_owned(), TRAINSET.to_owned())].into());
    assert!(!plan(facts(&job, Some(&labelled), None)).label_jobset);
    // Another's JobSet is never touched.
    let foreign = jobset(("JobSet", "x"), false, json!({}));
    assert!(!plan(facts(&job, Some(&foreign), None)).label_jobset);
}
