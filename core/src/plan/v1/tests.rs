//! The v1 plan, case by case.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;
use crate::api::PyTorchJob;
use crate::compile::Options;
use crate::compile::gang::GangScheduler;
use crate::compile::v1::Compile;
use crate::plan::jobs_show_end;

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
    let options = Options::default();
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
        "status": {"active": active, "ready": active, "succeeded": succeeded}
    }))
    .expect("Job")
}

fn running_jobs() -> Vec<Job> {
    vec![job("master", 1, 0), job("worker", 2, 0)]
}

/// The status trainset wrote when it saw the job running at `start`.
fn running_status(start: i64) -> Value {
    let (jobset, jobs) = (running_jobset(), running_jobs());
    let observed = Observed {
        jobset: Some(&jobset),
        jobs: &jobs,
    };
    let status = status::derive(&subject(), None, &observed, &at(start));
    serde_json::to_value(status).expect("status")
}

/// The status trainset wrote when it saw `jobset` suspended while `jobs` still had pods.
fn suspended_status(jobset: &JobSet, jobs: &[Job]) -> Value {
    let running: JobStatus = serde_json::from_value(running_status(0)).expect("status");
    let observed = Observed {
        jobset: Some(jobset),
        jobs,
    };
    let status = status::derive(&subject(), Some(&running), &observed, &at(1));
    serde_json::to_value(status).expect("status")
}

fn subject() -> Subject<'static> {
    Subject {
        kind: "PyTorchJob",
        name: "demo",
        operator_name: "pytorchjob-controller",
        replica_types: &["Master", "Worker"],
        selector: true,
        detailed_failure: false,
    }
}

fn succeeded_status(completed: i64) -> Value {
    json!({
        "conditions": [condition("Created", "PyTorchJobCreated"), condition("Succeeded", "PyTorchJobSucceeded")],
        "startTime": at(0).0.to_string(),
        "completionTime": at(completed).0.to_string(),
        "state": "Succeeded"
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
        autoscaler: None,
        exec_targets: None,
        foreign: Default::default(),
    }
}

/// What v1 says of a resumed job.
fn resumed_event() -> Happened {
    Happened::Resumed {
        reason: "PyTorchJobResumed".to_owned(),
        message: "PyTorchJob demo is resumed.".to_owned(),
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
        autoscaler: None,
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
        autoscaler: None,
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
    assert!(status::is_true(&status, status::CREATED));
    let made = pytorch(json!({}), serde_json::to_value(&status).expect("status"));
    assert!(creation_retrying(&made, denied, &at(20)).is_none());
}

#[test]
fn a_job_managed_by_another_controller_is_left_alone() {
    let job = pytorch(
        json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
        json!(null),
    );
    assert_eq!(needs(&job, None, false), Needs::default());
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
        needs(&job, None, false),
        Needs {
            compiled: true,
            workload: false,
            autoscaler: false,
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
fn a_job_suspended_from_its_creation_gets_its_jobset_only_when_resumed() {
    let planned = |job: &PyTorchJob, now: i64| {
        let mut given = facts(job, None, &[], now);
        given.compiled = compiled(job);
        plan(given).expect("plan")
    };
    let held = pytorch(json!({"suspend": true}), json!(null));
    let first = planned(&held, 0);
    assert!(first.create.is_none(), "nothing is made while suspended");
    // v1 tells of the suspension in an event: the SDK's verbose logs show it.
    assert_eq!(
        first.happened,
        [Happened::Suspended {
            reason: "PyTorchJobSuspended".to_owned(),
            message: "PyTorchJob demo is suspended.".to_owned()
        }]
    );
    let written = first.status.expect("the status of a held job");
    assert!(status::is_true(&written, status::CREATED));
    assert!(status::is_true(&written, status::SUSPENDED));
    assert!(written.replica_statuses.is_empty());

    let held = pytorch(json!({"suspend": true}), json!(written));
    assert!(!had_jobset(&held), "no JobSet to look up while held");
    assert!(
        !needs(&held, None, false).compiled,
        "nothing to compile while held as said"
    );
    let again = planned(&held, 1);
    assert!(again.create.is_none() && again.status.is_none() && again.happened.is_empty());
    let unchanged = plan(facts(&held, None, &[], 1)).expect("plan");
    assert!(unchanged.create.is_none() && unchanged.status.is_none());

    let resumed = planned(&pytorch(json!({"suspend": false}), json!(written)), 2);
    assert_eq!(
        resumed.create.as_ref().map(|c| c.jobset.spec.suspend),
        Some(Some(false))
    );
    assert_eq!(
        resumed.happened,
        [Happened::Created, resumed_event()],
        "made, not made again"
    );
}

#[test]
fn a_job_that_ran_and_lost_its_jobset_while_suspended_gets_it_again_when_resumed() {
    let planned = |job: &PyTorchJob| {
        let mut given = facts(job, None, &[], 0);
        given.compiled = compiled(job);
        plan(given).expect("plan")
    };
    let ran = json!({"conditions": [condition("Created", "PyTorchJobCreated"),
                                    condition("Suspended", "PyTorchJobSuspended")],
                     "replicaStatuses": {"Master": {"active": 0}},
                     "state": "Suspended", "jobSet": "demo"});
    let held = pytorch(json!({"suspend": true}), ran.clone());
    assert!(had_jobset(&held));
    assert!(planned(&held).create.is_none());
    let resumed = pytorch(json!({"suspend": false}), ran);
    assert_eq!(
        planned(&resumed).happened,
        [Happened::Recreated, resumed_event()]
    );
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
        autoscaler: None,
        exec_targets: None,
        foreign: Default::default(),
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
    assert_eq!(needs(&job, Some(&jobset), false), Needs::default());
    let plan = plan(facts(&job, Some(&jobset), &jobs, 30)).expect("plan");
    assert!(plan.status.is_none(), "{:?}", plan.status);
    assert!(plan.happened.is_empty() && plan.create.is_none() && !plan.delete_jobset);
    assert!(plan.requeue.is_none());
}

#[test]
fn new_counts_alone_wait_for_the_interval_and_new_conditions_do_not() {
    let job_of = job;
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

    // The last active pod of a running job gone: a count like any other.
    let stopped = [job_of("master", 0, 0), job_of("worker", 0, 0)];
    let mut gone = facts(&job, Some(&live), &stopped, 3);
    gone.since_status_write = Some(Duration::from_secs(2));
    assert!(plan(gone).expect("plan").status.is_none());
    // The last active pod of a suspended (preempted) job gone: Kueue waits for that, so it is
    // written at once.
    let held = jobset(true, json!({}), json!({"restarts": 0}));
    let preempted = pytorch(json!({"suspend": true}), suspended_status(&held, &more));
    let mut stopping = facts(&preempted, Some(&held), &more, 3);
    stopping.since_status_write = Some(Duration::from_secs(2));
    assert!(plan(stopping).expect("plan").status.is_none());
    let mut stopped_now = facts(&preempted, Some(&held), &stopped, 3);
    stopped_now.since_status_write = Some(Duration::from_secs(2));
    assert!(plan(stopped_now).expect("plan").status.is_some());

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
fn an_elastic_jobs_counts_are_written_at_once() {
    let more = [job("master", 1, 0), job("worker", 1, 1)];
    let mut elastic = pytorch(json!({}), running_status(0));
    elastic.spec.elastic_policy = Some(Default::default());
    let live = running_jobset();
    let mut recent = facts(&elastic, Some(&live), &more, 3);
    recent.since_status_write = Some(Duration::from_secs(2));
    assert!(plan(recent).expect("plan").status.is_some());
}

#[test]
fn suspending_is_trainsets_unless_kueue_queues_the_jobset() {
    let job = pytorch(json!({"suspend": true}), running_status(0));
    let own = running_jobset();
    assert_eq!(needs(&job, Some(&own), false), Needs::default());
    let plan = plan(facts(&job, Some(&own), &[], 1)).expect("plan");
    assert_eq!(plan.suspend, Some(SuspendWrite::Suspend));

    let queued = jobset(false, json!({"kueue.x-k8s.io/queue-name": "q"}), json!({}));
    assert_eq!(
        needs(&job, Some(&queued), false),
        Needs {
            compiled: false,
            workload: true,
            autoscaler: false,
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
        needs(&job, Some(&suspended), false),
        Needs {
            compiled: true,
            workload: false,
            autoscaler: false,
        }
    );
    let mut with = facts(&job, Some(&suspended), &[], 1);
    with.compiled = compiled(&job);
    let plan = plan(with).expect("plan");
    assert!(matches!(plan.suspend, Some(SuspendWrite::Resume { .. })));
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
    assert_eq!(needs(&job, None, false), Needs::default());
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
fn a_finished_jobset_is_shown_by_its_jobs_only_once_one_of_its_last_attempt_ended_the_same_way() {
    let ended = |terminal: &str, restarts: i32| {
        jobset(
            false,
            json!({}),
            json!({"terminalState": terminal, "restarts": restarts}),
        )
    };
    let finished = |type_: &str| {
        let mut master = job("master", 0, 1);
        let condition = serde_json::from_value(json!({"type": type_, "status": "True"}));
        master.status.get_or_insert_default().conditions = Some(vec![condition.expect("cond")]);
        vec![master, job("worker", 2, 0)]
    };
    assert!(jobs_show_end(&ended("Completed", 0), &finished("Complete")));
    assert!(jobs_show_end(&ended("Failed", 0), &finished("Failed")));
    // The Job cache is behind: nothing finished yet, the wrong end, or an older attempt's.
    assert!(!jobs_show_end(&ended("Completed", 0), &running_jobs()));
    assert!(!jobs_show_end(&ended("Completed", 0), &[]));
    assert!(!jobs_show_end(&ended("Completed", 0), &finished("Failed")));
    assert!(!jobs_show_end(
        &ended("Completed", 1),
        &finished("Complete")
    ));
    assert!(!jobs_show_end(&running_jobset(), &finished("Complete")));
}

#[test]
fn an_autoscaled_job_has_its_autoscaler_while_it_runs_and_not_after() {
    let mut elastic = pytorch(json!({}), running_status(0));
    elastic.spec.elastic_policy = Some(crate::api::ElasticPolicy {
        min_replicas: Some(1),
        max_replicas: Some(3),
        metrics: vec![
            serde_json::from_value(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}))
            .expect("metric"),
        ],
        ..Default::default()
    });
    let mut existing = autoscaler::desired(&elastic, "ns".to_owned()).expect("an autoscaler");
    existing.metadata.uid = Some("hpa-1".to_owned());
    let (live, jobs) = (running_jobset(), running_jobs());
    assert!(needs(&elastic, Some(&live), false).autoscaler);

    let mut none_yet = facts(&elastic, Some(&live), &jobs, 3);
    none_yet.autoscaler = Some(None);
    let made = plan(none_yet).expect("plan").autoscaler;
    assert!(matches!(made, Some(AutoscalerWrite::Create(_))), "{made:?}");

    let mut kept = facts(&elastic, Some(&live), &jobs, 3);
    kept.autoscaler = Some(Some(&existing));
    assert_eq!(plan(kept).expect("plan").autoscaler, None);

    let done = jobset(
        false,
        json!({}),
        json!({"terminalState": "Completed", "conditions": [condition("Completed", "AllJobsCompleted")]}),
    );
    let finished = [job("master", 0, 1), job("worker", 0, 2)];
    let mut ending = facts(&elastic, Some(&done), &finished, 3);
    ending.autoscaler = Some(Some(&existing));
    let ended = plan(ending).expect("plan");
    assert_eq!(state(&ended).as_deref(), Some(status::SUCCEEDED));
    assert_eq!(
        ended.autoscaler,
        Some(AutoscalerWrite::Delete {
            name: "demo".to_owned(),
            uid: "hpa-1".to_owned()
        })
    );

    // Without metrics the autoscaler is not even looked up.
    let mut plain = elastic.clone();
    plain.spec.elastic_policy = Some(Default::default());
    assert!(!needs(&plain, Some(&live), false).autoscaler);
}

#[test]
fn the_launcher_role_names_the_pods_it_may_exec_into_while_the_job_runs() {
    let job = pytorch(json!({}), running_status(0));
    let (jobset, jobs) = (running_jobset(), running_jobs());
    let pods = [
        "demo-worker-0-0-abcde".to_owned(),
        "demo-worker-0-1-fghij".to_owned(),
    ];
    let mut running = facts(&job, Some(&jobset), &jobs, 10);
    running.exec_targets = Some(&pods);
    let role = plan(running).expect("plan").launcher_role.expect("a role");
    assert_eq!(role.name, "demo-launcher");
    let exec: Vec<_> = role
        .rules
        .iter()
        .filter(|rule| rule.resources.as_deref() == Some(&["pods/exec".to_owned()][..]))
        .collect();
    assert_eq!(exec.len(), 1);
    assert_eq!(exec[0].resource_names.as_deref(), Some(&pods[..]));
    assert_eq!(exec[0].verbs, ["create"]);

    // No worker yet: no exec rule at all, never one that names no pod (which means every pod).
    let mut waiting = facts(&job, Some(&jobset), &jobs, 10);
    waiting.exec_targets = Some(&[]);
    let role = plan(waiting).expect("plan").launcher_role.expect("a role");
    assert!(role.rules.iter().all(|rule| rule.resource_names.is_none()));
    assert!(
        role.rules
            .iter()
            .all(|rule| rule.resources.as_deref() == Some(&["pods".to_owned()][..]))
    );

    // Ended: the role is left as it is.
    let done = pytorch(json!({}), succeeded_status(5));
    let mut ended = facts(&done, Some(&jobset), &jobs, 10);
    ended.exec_targets = Some(&pods);
    assert!(plan(ended).expect("plan").launcher_role.is_none());
}

#[test]
fn a_running_jobs_gang_is_written_as_its_spec_now_compiles() {
    let job = pytorch(
        json!({"schedulingPolicy": {"minAvailable": 2}}),
        running_status(0),
    );
    let (live, jobs) = (running_jobset(), running_jobs());
    // Only when the shell has not written the gang for this spec yet.
    assert!(needs(&job, Some(&live), true).compiled);
    assert!(!needs(&job, Some(&live), false).compiled);
    let finished = jobset(
        false,
        json!({}),
        json!({"terminalState": "Completed", "conditions": [condition("Completed", "AllJobsCompleted")]}),
    );
    assert!(!needs(&job, Some(&finished), true).compiled);

    // The gang objects the plan of the running job writes, under `scheduler`.
    let planned_gang = |scheduler: GangScheduler| {
        let options = Options {
            gang_scheduler: Some(&scheduler),
            ..Options::default()
        };
        let mut running = facts(&job, Some(&live), &jobs, 3);
        running.compiled = Some(job.compile(&options).map_err(|e| e.to_string()));
        plan(running).expect("plan").gang
    };
    let gang = planned_gang(GangScheduler::Volcano);
    assert_eq!(gang.len(), 1, "{gang:?}");
    assert_eq!(gang[0].data["spec"]["minMember"], json!(2));

    // The Workload API's objects cannot change: nothing to write.
    assert!(planned_gang(GangScheduler::Native).is_empty());
}
