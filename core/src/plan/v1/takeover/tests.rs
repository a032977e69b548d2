//! Taking over from training-operator and mpi-operator, case by case.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;
use crate::api::{MPIJob, PyTorchJob};
use crate::compile::Options;
use crate::plan::v1::plan;

const START: i64 = 1_800_000_000;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(START + second).expect("time"))
}

/// A PyTorchJob with a Master and 2 Workers, `OnFailure` unless `restart` says otherwise.
fn pytorch(run_policy: Value, restart: &str, status: Value) -> PyTorchJob {
    let pod = json!({"spec": {"containers": [{"name": "pytorch", "image": "x"}]}});
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": restart, "template": pod},
                "Worker": {"replicas": 2, "restartPolicy": restart, "template": pod}
            }
        },
        "status": status
    }))
    .expect("PyTorchJob")
}

/// The status training-operator v1.9.4 wrote of a running job: no `state`, no `takeover`.
fn v1_running() -> Value {
    json!({
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "PyTorchJob demo is created."},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "PyTorchJob ns/demo is running."}
        ],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
        "startTime": at(0).0.to_string()
    })
}

/// A pod training-operator made: controlled by `owner`, named and labelled as v1 names it.
fn pod(replica_type: &str, index: i32, phase: &str, owner: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("demo-{replica_type}-{index}"), "namespace": "ns",
            "uid": format!("pod-{replica_type}-{index}"),
            "labels": {
                "training.kubeflow.org/job-name": "demo",
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": index.to_string()
            },
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "demo",
                                 "uid": owner, "controller": true}]
        },
        "status": {"phase": phase}
    }))
    .expect("Pod")
}

fn running_pods() -> Vec<Pod> {
    vec![
        pod("master", 0, "Running", "u-1"),
        pod("worker", 0, "Running", "u-1"),
        pod("worker", 1, "Running", "u-1"),
    ]
}

fn planned<K: Served>(job: &K, pods: &[Pod], launcher: Option<Option<&Job>>, now: i64) -> Plan {
    let services = [("demo-master-0".to_owned(), "svc-1".to_owned())];
    let key = crate::compile::SshKeyPair::generate().expect("key");
    let options = Options {
        ssh_key: Some(&key),
        ..Options::default()
    };
    let facts = Facts {
        job,
        jobset: None,
        jobs: &[],
        compiled: Some(job.compile(&options).map_err(|e| e.to_string())),
        own_workload: false,
        now: at(now),
        since_status_write: None,
        creation_failure: None,
        autoscaler: None,
        exec_targets: None,
        foreign: Foreign {
            pods,
            launcher,
            services: &services,
        },
    };
    plan(facts).expect("plan")
}

fn kinds(plan: &Plan) -> Vec<(ForeignKind, &str)> {
    plan.stop_foreign
        .iter()
        .map(|o| (o.kind, o.name.as_str()))
        .collect()
}

fn is_true(status: &JobStatus, type_: &str) -> bool {
    status::is_true(status, type_)
}

#[test]
fn a_running_job_of_training_operator_is_followed_not_started_again() {
    let job = pytorch(json!({}), "OnFailure", v1_running());
    assert!(may_have_run_before(&job));
    let plan = planned(&job, &running_pods(), None, 10);
    assert!(plan.create.is_none(), "no JobSet for a job whose pods run");
    assert!(plan.stop_foreign.is_empty() && plan.clean_pods.is_none());
    let status = plan.status.expect("trainset's status over v1's");
    assert_eq!(status.state.as_deref(), Some("Running"));
    assert_eq!(
        status.takeover,
        Some(Takeover {
            previous_operator: Some("pytorchjob-controller".to_owned()),
            following: true
        })
    );
    assert_eq!(status.replica_statuses["Worker"].active, 2);
    assert_eq!(status.job_set, None);
    assert!(matches!(
        plan.happened.as_slice(),
        [Happened::Following { .. }]
    ));

    // Followed on, the record stays and nothing is said again.
    let followed = pytorch(
        json!({}),
        "OnFailure",
        serde_json::to_value(&status).expect("json"),
    );
    assert!(may_have_run_before(&followed));
    let again = planned(&followed, &running_pods(), None, 20);
    assert!(again.create.is_none() && again.status.is_none() && again.happened.is_empty());
}

#[test]
fn a_followed_job_ends_by_its_own_rules_and_its_run_policy_acts() {
    let job = pytorch(
        json!({"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60}),
        "OnFailure",
        v1_running(),
    );
    let mut pods = running_pods();
    pods[0] = pod("master", 0, "Succeeded", "u-1");
    let plan = planned(&job, &pods, None, 30);
    let status = plan.status.expect("status");
    assert!(is_true(&status, "Succeeded"), "{status:?}");
    assert_eq!(
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Succeeded")
            .and_then(|c| c.reason.as_deref()),
        Some("PyTorchJobSucceeded")
    );
    // Active pods count as succeeded at the end, as v1 counts them.
    assert_eq!(status.replica_statuses["Worker"].succeeded, 2);
    assert_eq!(status.replica_statuses["Worker"].active, 0);
    assert_eq!(plan.clean_pods, Some(CleanPodPolicy::All));
    assert_eq!(plan.requeue, Some(Duration::from_secs(61)));
    assert!(plan.create.is_none());
    assert!(
        plan.happened
            .iter()
            .any(|h| matches!(h, Happened::Succeeded { .. }))
    );
}

#[test]
fn a_failed_pod_under_never_fails_the_followed_job() {
    let job = pytorch(json!({}), "Never", v1_running());
    let mut pods = running_pods();
    pods[2] = pod("worker", 1, "Failed", "u-1");
    let status = planned(&job, &pods, None, 30).status.expect("status");
    assert!(is_true(&status, "Failed"), "{status:?}");
    assert_eq!(status.replica_statuses["Worker"].failed, 1);
}

#[test]
fn a_pod_training_operator_would_make_anew_restarts_the_job_as_trainsets_own() {
    let job = pytorch(json!({}), "OnFailure", v1_running());
    let mut pods = running_pods();
    pods[2] = pod("worker", 1, "Failed", "u-1");
    let plan = planned(&job, &pods, None, 30);
    assert!(plan.create.is_none(), "its pods go first");
    assert_eq!(
        kinds(&plan),
        [
            (ForeignKind::Pod, "demo-master-0"),
            (ForeignKind::Pod, "demo-worker-0"),
            (ForeignKind::Pod, "demo-worker-1"),
            (ForeignKind::Service, "demo-master-0"),
        ]
    );
    let status = plan.status.expect("status");
    assert!(is_true(&status, "Restarting"), "{status:?}");
    assert!(status.takeover.as_ref().is_some_and(|t| !t.following));
    assert!(
        plan.happened
            .iter()
            .any(|h| matches!(h, Happened::RestartingAsJobSet { .. }))
    );

    // While any of its pods is left, no JobSet; once all are gone, trainset's own.
    let restarting = pytorch(
        json!({}),
        "OnFailure",
        serde_json::to_value(&status).expect("json"),
    );
    let mut terminating = pod("worker", 0, "Running", "u-1");
    terminating.metadata.deletion_timestamp = Some(at(31));
    let waiting = planned(&restarting, &[terminating], None, 31);
    assert!(waiting.create.is_none());
    assert!(
        !kinds(&waiting)
            .iter()
            .any(|(kind, _)| *kind == ForeignKind::Pod),
        "one being deleted is waited for"
    );
    let started = planned(&restarting, &[], None, 40);
    assert!(started.create.is_some());
    assert_eq!(
        started.happened.first(),
        Some(&Happened::Created),
        "made, not made again"
    );
    assert_eq!(
        started.status.and_then(|s| s.job_set).as_deref(),
        Some("demo")
    );
}

#[test]
fn a_missing_pod_restarts_the_job_too() {
    let job = pytorch(json!({}), "OnFailure", v1_running());
    let pods = &running_pods()[..2];
    let plan = planned(&job, pods, None, 30);
    assert!(plan.happened.iter().any(|h| matches!(h, Happened::RestartingAsJobSet { message } if message.contains("1 of its 2 worker pods"))), "{:?}", plan.happened);
}

#[test]
fn a_followed_job_suspended_loses_its_pods_and_resumes_as_trainsets_own() {
    let running = pytorch(json!({}), "OnFailure", v1_running());
    let followed = planned(&running, &running_pods(), None, 20)
        .status
        .expect("status");
    let job = pytorch(
        json!({"suspend": true}),
        "OnFailure",
        serde_json::to_value(&followed).expect("json"),
    );
    let plan = planned(&job, &running_pods(), None, 30);
    assert_eq!(plan.stop_foreign.len(), 4);
    let status = plan.status.expect("status");
    assert!(is_true(&status, "Suspended") && !is_true(&status, "Running"));
    assert_eq!(status.replica_statuses["Master"].active, 0);
    assert!(
        plan.happened
            .iter()
            .any(|h| matches!(h, Happened::Suspended { .. }))
    );
    let held = pytorch(
        json!({"suspend": true}),
        "OnFailure",
        serde_json::to_value(&status).expect("json"),
    );
    let quiet = planned(&held, &[], None, 40);
    assert!(quiet.create.is_none(), "no JobSet while suspended");
    let resumed = pytorch(
        json!({"suspend": false}),
        "OnFailure",
        serde_json::to_value(&status).expect("json"),
    );
    let plan = planned(&resumed, &[], None, 50);
    assert!(plan.create.is_some());
    assert!(plan.happened.contains(&Happened::Created));
}

#[test]
fn pods_are_the_previous_operators_only_by_their_controller_and_the_status_it_wrote() {
    // A pod whose controller is another object counts for nothing.
    let job = pytorch(json!({}), "OnFailure", v1_running());
    let forged = [pod("master", 0, "Running", "someone-else")];
    let plan = planned(&job, &forged, None, 10);
    assert!(plan.create.is_some(), "{:?}", plan.happened);
    // Pods planted beside a job trainset runs (its status has `state`) change nothing.
    let mut ours: JobStatus = serde_json::from_value(v1_running()).expect("status");
    ours.state = Some("Running".to_owned());
    ours.job_set = Some("demo".to_owned());
    let job = pytorch(
        json!({}),
        "OnFailure",
        serde_json::to_value(&ours).expect("json"),
    );
    assert!(!may_have_run_before(&job));
}

#[test]
fn a_job_another_operator_finished_keeps_its_status_and_gets_a_state() {
    let finished = json!({
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}
        ],
        "replicaStatuses": {"Master": {"succeeded": 1}},
        "completionTime": at(0).0.to_string()
    });
    let job = pytorch(
        json!({"ttlSecondsAfterFinished": 100}),
        "OnFailure",
        finished,
    );
    let plan = planned(&job, &[], None, 10);
    let status = plan.status.expect("the state written once");
    assert_eq!(status.state.as_deref(), Some("Succeeded"));
    assert_eq!(status.replica_statuses["Master"].succeeded, 1);
    assert!(plan.create.is_none());
    assert_eq!(plan.requeue, Some(Duration::from_secs(91)));
}

#[test]
fn the_deadline_fails_a_followed_job_and_stops_its_pods() {
    let job = pytorch(
        json!({"activeDeadlineSeconds": 60}),
        "OnFailure",
        v1_running(),
    );
    let plan = planned(&job, &running_pods(), None, 61);
    let status = plan.status.expect("status");
    assert!(is_true(&status, "Failed"));
    assert_eq!(plan.clean_pods, Some(CleanPodPolicy::Running));
    let early = planned(&job, &running_pods(), None, 30);
    assert_eq!(early.requeue, Some(Duration::from_secs(31)));
}

fn mpijob(status: Value) -> MPIJob {
    let pod = json!({"spec": {"containers": [{"name": "mpi", "image": "x"}]}});
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1"},
        "spec": {"mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": pod},
            "Worker": {"replicas": 2, "template": pod}
        }},
        "status": status
    }))
    .expect("MPIJob")
}

fn mpi_pod(role: &str, index: Option<i32>, owner: &str) -> Pod {
    let mut labels = json!({
        "training.kubeflow.org/job-name": "demo",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-role": role
    });
    if let Some(index) = index {
        labels["training.kubeflow.org/replica-index"] = json!(index.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("demo-{role}-{}", index.unwrap_or(0)), "namespace": "ns",
                     "uid": format!("{role}-{index:?}"), "labels": labels,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Owner", "name": "x", "uid": owner, "controller": true}]},
        "status": {"phase": "Running"}
    }))
    .expect("Pod")
}

fn launcher(condition: Option<&str>) -> Job {
    let conditions = condition.map_or(json!([]), |c| json!([{"type": c, "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]));
    serde_json::from_value(json!({
        "metadata": {"name": "demo-launcher", "namespace": "ns", "uid": "launcher-uid",
                     "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "demo", "uid": "u-1", "controller": true}]},
        "status": {"conditions": conditions, "completionTime": at(5).0.to_string()}
    }))
    .expect("Job")
}

fn mpi_running() -> Value {
    json!({"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated"},
                          {"type": "Running", "status": "True", "reason": "MPIJobRunning"}],
           "startTime": at(0).0.to_string()})
}

#[test]
fn an_mpijob_of_mpi_operator_ends_as_its_launcher_job_does() {
    let job = mpijob(mpi_running());
    assert_eq!(launcher_job(&job).as_deref(), Some("demo-launcher"));
    let pods = [
        mpi_pod("launcher", None, "launcher-uid"),
        mpi_pod("worker", Some(0), "u-1"),
        mpi_pod("worker", Some(1), "u-1"),
    ];
    let running = launcher(None);
    let plan = planned(&job, &pods, Some(Some(&running)), 10);
    let status = plan.status.expect("status");
    assert!(
        is_true(&status, "Running") && status.takeover.as_ref().is_some_and(|t| t.following),
        "{status:?} {:?}",
        plan.happened
    );
    assert_eq!(plan.requeue, Some(LAUNCHER_LOOK_AGAIN));

    let done = launcher(Some("Complete"));
    let plan = planned(&job, &pods, Some(Some(&done)), 10);
    let status = plan.status.expect("status");
    assert!(is_true(&status, "Succeeded"), "{status:?}");
    assert_eq!(
        status.completion_time,
        Some(at(5)),
        "the launcher Job's completion"
    );
    // As mpi-operator counts them once its launcher is done: no worker.
    assert_eq!(status.replica_statuses["Worker"].active, 0);
    assert_eq!(status.replica_statuses["Worker"].succeeded, 0);

    let failed = launcher(Some("Failed"));
    let status = planned(&job, &pods, Some(Some(&failed)), 10)
        .status
        .expect("status");
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("MPIJobBackoffLimitExceeded"));

    // Gone, it is made anew as trainset's own, after mpi-operator's hostfile and key go too.
    let plan = planned(&job, &pods[1..], Some(None), 10);
    let stopped = kinds(&plan);
    assert!(
        stopped.contains(&(ForeignKind::ConfigMap, "demo-config")),
        "{stopped:?}"
    );
    assert!(
        stopped.contains(&(ForeignKind::Secret, "demo-ssh")),
        "{stopped:?}"
    );
}

#[test]
fn the_dry_run_says_what_the_plan_will_do() {
    let verdict_of = |job: &PyTorchJob, pods: &[Pod]| {
        let plan = planned(job, pods, None, 10);
        verdict(job, false, &plan).0
    };
    let running = pytorch(json!({}), "OnFailure", v1_running());
    assert_eq!(verdict_of(&running, &running_pods()), Verdict::Follow);
    let mut pods = running_pods();
    pods[1] = pod("worker", 0, "Failed", "u-1");
    assert_eq!(verdict_of(&running, &pods), Verdict::Restart);
    assert_eq!(verdict_of(&running, &[]), Verdict::Start);
    let held = pytorch(json!({"suspend": true}), "OnFailure", json!(null));
    assert_eq!(verdict_of(&held, &[]), Verdict::Held);
    let finished =
        json!({"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"}]});
    let finished = pytorch(json!({}), "OnFailure", finished);
    assert_eq!(verdict_of(&finished, &[]), Verdict::Finished);
    let handed_off = pytorch(
        json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
        "OnFailure",
        json!(null),
    );
    assert_eq!(verdict_of(&handed_off, &[]), Verdict::Skip);
    // A queue name Kueue cannot hold: refused, naming the label.
    let mut spec =
        serde_json::to_value(pytorch(json!({}), "OnFailure", json!(null))).expect("json");
    spec["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team_a"});
    let invalid: PyTorchJob = serde_json::from_value(spec).expect("PyTorchJob");
    let plan = planned(&invalid, &[], None, 10);
    let (refused, why) = verdict(&invalid, false, &plan);
    assert_eq!(refused, Verdict::Refuse);
    assert!(why.contains("queue-name"), "{why}");
}

#[test]
fn an_mpijob_whose_pods_another_apis_operator_made_is_left_alone() {
    // training-operator's MPIJob v1 pods, under a job that reads as v2beta1 (no annotation).
    let job = mpijob(mpi_running());
    let mut pods = vec![mpi_pod("worker", Some(0), "u-1")];
    let labels = pods[0].metadata.labels.as_mut().expect("labels");
    labels.insert(OPERATOR_NAME.to_owned(), "mpijob-controller".to_owned());
    pods.push(pods[0].clone());
    let plan = planned(&job, &pods, Some(None), 10);
    assert!(plan.create.is_none() && plan.status.is_none() && plan.stop_foreign.is_empty());
    assert!(
        matches!(&plan.happened[..], [Happened::NotTakenOver { message }] if message.contains("trainset.io/api-version=v1")),
        "{:?}",
        plan.happened
    );
    assert_eq!(plan.requeue, Some(UNKNOWN_API_LOOK_AGAIN));
}

#[test]
fn a_held_mpijob_loses_mpi_operators_suspended_launcher_and_is_held() {
    let suspended = json!({"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated"},
                                          {"type": "Suspended", "status": "True", "reason": "MPIJobSuspended"}]});
    let mut job = mpijob(suspended);
    job.spec.run_policy.get_or_insert_default().suspend = Some(true);
    let held_launcher = launcher(None);
    let plan = planned(&job, &[], Some(Some(&held_launcher)), 10);
    assert_eq!(
        kinds(&plan).first(),
        Some(&(ForeignKind::Job, "demo-launcher"))
    );
    assert!(
        plan.create.is_none()
            && !plan
                .happened
                .iter()
                .any(|h| matches!(h, Happened::Following { .. }))
    );
    assert_eq!(verdict(&job, false, &plan).0, Verdict::Held);
    // Once it is gone, the job is held as any other, and says so.
    let plan = planned(&job, &[], Some(None), 20);
    assert!(plan.create.is_none());
    assert_eq!(verdict(&job, false, &plan).0, Verdict::Held);
    let status = plan.status.expect("status");
    assert_eq!(status.state.as_deref(), Some("Suspended"));
}

#[test]
fn a_job_suspended_as_trainset_takes_over_loses_its_pods_first() {
    let job = pytorch(json!({"suspend": true}), "OnFailure", v1_running());
    let plan = planned(&job, &running_pods(), None, 30);
    assert_eq!(plan.stop_foreign.len(), 4, "its pods and Service go");
    assert!(plan.create.is_none() && plan.status.is_none());
    let cleared = planned(&job, &[], None, 31);
    let status = cleared.status.expect("held as any other");
    assert!(
        is_true(&status, "Suspended") && !is_true(&status, "Running"),
        "{status:?}"
    );
    assert!(cleared.create.is_none());
}
