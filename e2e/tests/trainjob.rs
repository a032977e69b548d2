//! TrainJobs (Kubeflow Trainer v2's API) under trainset on the local control plane: the shipped
//! runtimes run to `Complete`, a failing pod fails the TrainJob, suspend and resume, the
//! deadline, a finished TrainJob whose JobSet is deleted stays finished, a JobSet name a
//! PyTorchJob holds, a runtime that appears after its TrainJob, and Kueue's TrainJob
//! integration (quota, preemption).

use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::{
    COMPLETE_DELAY, TestNamespace, apply, client, condition, create, create_when_admitted, delay,
    dry_run_create, dynamic_api, http_get, install_crds, install_runtimes, operator, pods_with,
    status, wait_condition, wait_event, wait_for, wait_state,
};

const TRAINER_API: &str = "trainer.kubeflow.org/v1alpha1";

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    install_crds(&client).await;
    install_runtimes(&client).await;
    operator::ensure(&client).await;
    let ns = TestNamespace::create(&client, prefix).await;
    (client, ns)
}

/// Creates a TrainJob once the webhooks admit it: Kueue's TrainJob webhook reads runtimes from
/// its cache, which may not yet have one applied a moment before.
async fn create_trainjob(client: &Client, ns: &str, manifest: &Value) -> Api<DynamicObject> {
    create_when_admitted(client, ns, manifest, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", manifest["metadata"]["name"]))
}

/// A runtime patch giving the `node` pods `metadata` (KWOK reads its stages from it).
fn pod_metadata_patch(metadata: Value) -> Value {
    json!({"manager": "trainset.io/e2e", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": metadata}}}}]
    }}}})
}

/// A TrainJob on `torch-distributed` with `nodes` nodes whose pods run as `pods` says.
fn trainjob(name: &str, nodes: i32, pods: Value, extra: Value) -> Value {
    let mut spec = json!({
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": {"cpu": "1"}}},
        "runtimePatches": [pod_metadata_patch(pods)]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": name}, "spec": spec})
}

/// A TrainingRuntime `name` of the torch policy: one `node` replicated job whose Jobs have
/// `backoff_limit` and whose pods restart `restart_policy`.
fn runtime(name: &str, backoff_limit: i32, restart_policy: &str) -> Value {
    json!({"apiVersion": TRAINER_API, "kind": "TrainingRuntime",
    "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": backoff_limit, "template": {"spec": {
                "restartPolicy": restart_policy,
                "containers": [{"name": "node", "image": "busybox"}]}}}}
    }]}}}})
}

fn jobsets(client: &Client, ns: &str) -> Api<JobSet> {
    Api::namespaced(client.clone(), ns)
}

async fn pods_of(client: &Client, ns: &str, jobset: &str) -> Vec<Pod> {
    pods_with(
        client,
        ns,
        &format!("jobset.sigs.k8s.io/jobset-name={jobset}"),
    )
    .await
}

/// How many TrainJob reconciles the shared operator has finished, from its metrics.
async fn trainjob_reconciles() -> u64 {
    let (_, metrics) = http_get(&operator::metrics_address(), "/metrics")
        .await
        .expect("the shared operator's metrics");
    metrics
        .lines()
        .find(|line| {
            line.starts_with("trainset_reconcile_duration_seconds_count")
                && line.contains("framework=\"trainjob\"")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Changes the TrainJob's spec (its generation) and waits until the operator reconciled at least
/// once more: whatever it would do about the TrainJob, it has decided by then.
async fn touch_and_wait_for_a_reconcile(api: &Api<DynamicObject>, name: &str) {
    let before = trainjob_reconciles().await;
    let patch = json!({"spec": {"activeDeadlineSeconds": 86_400}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("touching the TrainJob");
    wait_for(Duration::from_secs(30), "a TrainJob reconcile", || async {
        (trainjob_reconciles().await > before).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_on_a_shipped_runtime_completes() {
    let (client, ns) = setup("tj-complete").await;
    let api = create_trainjob(
        &client,
        &ns.name,
        &trainjob("smoke", 2, delay(2), json!({})),
    )
    .await;
    let done = wait_condition(&api, "smoke", "Complete", Duration::from_secs(120)).await;
    assert_eq!(
        condition(&done, "Complete")["reason"],
        "AllJobsCompleted",
        "{done}"
    );
    assert_eq!(
        done["jobsStatus"],
        json!([{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]),
        "{done}"
    );
    // trainset's additive times (Trainer v2.3.0 has none).
    assert!(
        done["startTime"].is_string() && done["completionTime"].is_string(),
        "{done}"
    );
    // The JobSet is the TrainJob's, with the runtime's shape and both nodes.
    let jobset = jobsets(&client, &ns.name)
        .get("smoke")
        .await
        .expect("JobSet");
    let owner = &jobset.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TrainJob", Some(true))
    );
    let node = &jobset.spec.replicated_jobs[0];
    assert_eq!(node.name, "node");
    assert_eq!(
        node.template.spec.as_ref().and_then(|s| s.parallelism),
        Some(2)
    );
    // The runtime it started from is kept beside it.
    let snapshots: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let snapshot = snapshots
        .get("smoke-runtime-snapshot")
        .await
        .expect("snapshot");
    let text = snapshot
        .data
        .unwrap_or_default()
        .remove("runtime")
        .unwrap_or_default();
    assert!(text.contains("name: torch-distributed"), "{text}");
    trainset_e2e::wait_event(&client, &ns.name, "smoke", "Normal", "JobSetCreated").await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_on_an_mpi_runtime_completes_with_its_hostfile_and_key() {
    let (client, ns) = setup("tj-mpi").await;
    let job = json!({"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": "mpi"},
        "spec": {"runtimeRef": {"name": "deepspeed-distributed"},
                 "trainer": {"numNodes": 3, "command": ["mpirun", "--hostfile", "/etc/mpi/hostfile", "true"]}}});
    let api = create_trainjob(&client, &ns.name, &job).await;
    let done = wait_condition(&api, "mpi", "Complete", Duration::from_secs(120)).await;
    let names: Vec<&str> = done["jobsStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(names, ["node", "launcher"], "{done}");
    // Three nodes: the launcher and two `node` pods, all in the hostfile.
    let hostfiles: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let hostfile = hostfiles.get("mpi-mpi-hostfile").await.expect("hostfile");
    assert_eq!(
        hostfile
            .data
            .unwrap_or_default()
            .remove("hostfile")
            .unwrap_or_default(),
        "mpi-node-0-0.mpi slots=1\nmpi-node-0-1.mpi slots=1\nmpi-launcher-0-0.mpi slots=1\n"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let secret = secrets.get("mpi-mpi-ssh-auth").await.expect("SSH Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    assert_eq!(secret.owner_references()[0].kind, "TrainJob");
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_failing_node_fails_the_trainjob() {
    let (client, ns) = setup("tj-fail").await;
    let failing = json!({
        "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
        "annotations": {"pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "1", COMPLETE_DELAY: "60s"}
    });
    apply(&client, &runtime("fail-fast", 0, "Never"), Some(&ns.name))
        .await
        .expect("the runtime");
    let mut job = trainjob("broken", 1, failing, json!({}));
    job["spec"]["runtimeRef"] = json!({"name": "fail-fast", "kind": "TrainingRuntime"});
    let api = create_trainjob(&client, &ns.name, &job).await;
    let failed = wait_condition(&api, "broken", "Failed", Duration::from_secs(120)).await;
    // The JobSet's condition, copied whole (JobSet's reason and message).
    assert_eq!(
        condition(&failed, "Failed")["reason"],
        "FailedJobs",
        "{failed}"
    );
    wait_event(&client, &ns.name, "broken", "Warning", "FailedJobs").await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_suspended_trainjob_runs_nothing_until_resumed() {
    let (client, ns) = setup("tj-suspend").await;
    let api = create_trainjob(
        &client,
        &ns.name,
        &trainjob("parked", 2, delay(2), json!({"suspend": true})),
    )
    .await;
    let suspended = wait_condition(&api, "parked", "Suspended", Duration::from_secs(30)).await;
    assert_eq!(condition(&suspended, "Suspended")["reason"], "Suspended");
    let jobset = wait_for(Duration::from_secs(30), "the suspended JobSet", || async {
        jobsets(&client, &ns.name)
            .get_opt("parked")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(jobset.spec.suspend, Some(true));
    assert!(pods_of(&client, &ns.name, "parked").await.is_empty());

    let resume = json!({"spec": {"suspend": false}});
    api.patch("parked", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("resuming");
    let done = wait_condition(&api, "parked", "Complete", Duration::from_secs(120)).await;
    assert_eq!(condition(&done, "Suspended")["status"], "False", "{done}");
    assert_eq!(condition(&done, "Suspended")["reason"], "Resumed", "{done}");
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_past_its_deadline_fails_and_its_jobset_goes() {
    let (client, ns) = setup("tj-deadline").await;
    let api = create_trainjob(
        &client,
        &ns.name,
        &trainjob("late", 1, delay(600), json!({"activeDeadlineSeconds": 3})),
    )
    .await;
    let failed = wait_condition(&api, "late", "Failed", Duration::from_secs(60)).await;
    assert_eq!(
        condition(&failed, "Failed")["reason"],
        "DeadlineExceeded",
        "{failed}"
    );
    wait_for(
        Duration::from_secs(60),
        "the JobSet to be deleted",
        || async {
            let gone = jobsets(&client, &ns.name)
                .get_opt("late")
                .await
                .ok()?
                .is_none();
            gone.then_some(())
        },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_finished_trainjob_stays_finished_when_its_jobset_is_deleted() {
    let (client, ns) = setup("tj-terminal").await;
    let api = create_trainjob(&client, &ns.name, &trainjob("done", 1, delay(1), json!({}))).await;
    let done = wait_condition(&api, "done", "Complete", Duration::from_secs(120)).await;
    // Trainer v2.3.0 makes the JobSet again here and runs the job twice (kubeflow/trainer#3737).
    jobsets(&client, &ns.name)
        .delete("done", &DeleteParams::foreground())
        .await
        .expect("deleting the JobSet");
    wait_for(
        Duration::from_secs(60),
        "the JobSet to be deleted",
        || async {
            let gone = jobsets(&client, &ns.name)
                .get_opt("done")
                .await
                .ok()?
                .is_none();
            gone.then_some(())
        },
    )
    .await;
    touch_and_wait_for_a_reconcile(&api, "done").await;
    assert!(
        jobsets(&client, &ns.name)
            .get_opt("done")
            .await
            .expect("JobSet")
            .is_none()
    );
    let after = status(&api.get("done").await.expect("TrainJob"));
    assert_eq!(after["conditions"], done["conditions"], "{after}");
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_named_like_a_pytorchjob_fails_with_the_reason() {
    let (client, ns) = setup("tj-conflict").await;
    let pod = json!({"metadata": delay(60), "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}});
    let pytorch = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "shared"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod}}}});
    let v1 = create(&client, &ns.name, &pytorch).await;
    wait_state(&v1, "shared", "Running", Duration::from_secs(60)).await;
    let api = create_trainjob(
        &client,
        &ns.name,
        &trainjob("shared", 1, delay(1), json!({})),
    )
    .await;
    let failed = wait_condition(&api, "shared", "Failed", Duration::from_secs(60)).await;
    let reason = &condition(&failed, "Failed");
    assert_eq!(reason["reason"], "JobSetNameConflict", "{failed}");
    assert!(
        reason["message"]
            .as_str()
            .unwrap_or_default()
            .contains("belongs to PyTorchJob shared"),
        "{failed}"
    );
    wait_event(&client, &ns.name, "shared", "Warning", "JobSetNameConflict").await;
    // The PyTorchJob keeps its JobSet and runs on.
    let jobset = jobsets(&client, &ns.name)
        .get("shared")
        .await
        .expect("JobSet");
    assert_eq!(jobset.owner_references()[0].kind, "PyTorchJob");
    assert_eq!(
        status(&v1.get("shared").await.expect("PyTorchJob"))["state"],
        "Running"
    );
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_waits_for_a_runtime_that_appears_later() {
    let (client, ns) = setup("tj-later").await;
    let mut job = trainjob("early", 1, delay(1), json!({}));
    job["spec"]["runtimeRef"] = json!({"name": "later", "kind": "TrainingRuntime"});
    // Kueue's TrainJob webhook refuses a TrainJob whose runtime does not exist (it reads the
    // runtime for topology-aware scheduling), so this one is created as on a cluster without
    // Kueue (e2e/cluster exempts the label from Kueue's webhooks).
    job["metadata"]["labels"] = json!({"trainset.io/e2e-without-kueue": "true"});
    let api = create_trainjob(&client, &ns.name, &job).await;
    wait_event(
        &client,
        &ns.name,
        "early",
        "Warning",
        "TrainingRuntimeNotFound",
    )
    .await;
    // Each retry counts on the one event (as client-go does), with the times clients read.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let counted = wait_for(
        Duration::from_secs(30),
        "a retry counted on the event",
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let not_found: Vec<_> = list
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("TrainingRuntimeNotFound"))
                .collect();
            assert_eq!(not_found.len(), 1, "{not_found:?}");
            not_found.into_iter().find(|e| e.count.unwrap_or(0) >= 2)
        },
    )
    .await;
    assert!(counted.first_timestamp.is_some() && counted.last_timestamp.is_some());
    assert_eq!(counted.involved_object.kind.as_deref(), Some("TrainJob"));
    let waiting = status(&api.get("early").await.expect("TrainJob"));
    assert!(
        waiting["conditions"].as_array().is_none_or(Vec::is_empty),
        "{waiting}"
    );

    apply(&client, &runtime("later", 6, "OnFailure"), Some(&ns.name))
        .await
        .expect("the runtime");
    wait_condition(&api, "early", "Complete", Duration::from_secs(60)).await;
    ns.delete().await;
}

/// Kueue's `trainer.kubeflow.org/trainjob` integration: Kueue suspends a queued TrainJob at
/// creation, holds it without quota, and admits it once there is; its flavor's node selector
/// reaches the pods through Kueue's runtime patch. Then a higher-priority TrainJob preempts it.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_a_trainjob_and_preempts_it() {
    let (client, ns) = setup("tj-kueue").await;
    let flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "trainset-e2e-kwok"}, "spec": {"nodeLabels": {"type": "kwok"}}});
    let low = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
        "metadata": {"name": "trainset-e2e-low"}, "value": 10});
    let high = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
        "metadata": {"name": "trainset-e2e-high"}, "value": 1000});
    let quota = |cpu: &str| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": ns.name},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                     "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                         {"name": "trainset-e2e-kwok", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}})
    };
    let local_queue = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "training"}, "spec": {"clusterQueue": ns.name}});
    for object in [&flavor, &low, &high, &quota("0")] {
        apply(&client, object, None).await.expect("Kueue object");
    }
    apply(&client, &local_queue, Some(&ns.name))
        .await
        .expect("LocalQueue");
    let queued = |name: &str, priority: &str, seconds: u32| {
        let mut job = trainjob(name, 2, delay(seconds), json!({}));
        job["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "training",
                                           "kueue.x-k8s.io/priority-class": priority});
        job
    };

    // Held: Kueue's webhook suspended it and added its own (empty) runtime patch.
    let api = create_trainjob(&client, &ns.name, &queued("first", "trainset-e2e-low", 600)).await;
    wait_condition(&api, "first", "Suspended", Duration::from_secs(30)).await;
    let object = api.get("first").await.expect("TrainJob");
    let managers: Vec<&str> = object.data["spec"]["runtimePatches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["manager"].as_str())
        .collect();
    assert!(managers.contains(&"kueue.x-k8s.io/manager"), "{managers:?}");
    let workloads = dynamic_api(
        &client,
        &json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"}),
        Some(&ns.name),
    );
    let workload = wait_for(
        Duration::from_secs(30),
        "the TrainJob's Workload",
        || async {
            let list = workloads.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|w| {
                w.owner_references()
                    .iter()
                    .any(|o| o.kind == "TrainJob" && o.name == "first")
            })
        },
    )
    .await;
    let jobset = wait_for(Duration::from_secs(30), "the suspended JobSet", || async {
        jobsets(&client, &ns.name)
            .get_opt("first")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(jobset.spec.suspend, Some(true));
    assert!(pods_of(&client, &ns.name, "first").await.is_empty());

    // Quota for exactly one job of two 1-CPU nodes: admitted, on the flavor's nodes.
    apply(&client, &quota("2"), None).await.expect("quota");
    wait_for(
        Duration::from_secs(60),
        "the first TrainJob's pods to run",
        || async {
            let pods = pods_of(&client, &ns.name, "first").await;
            (pods.len() == 2).then_some(())
        },
    )
    .await;
    let running = jobsets(&client, &ns.name)
        .get("first")
        .await
        .expect("JobSet");
    let pod = running.spec.replicated_jobs[0]
        .template
        .spec
        .as_ref()
        .map(|s| &s.template);
    let selector = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.node_selector.clone());
    assert_eq!(
        selector.and_then(|s| s.get("type").cloned()).as_deref(),
        Some("kwok"),
        "Kueue's flavor reached the pods"
    );
    let admitted = status(&api.get("first").await.expect("TrainJob"));
    assert_eq!(
        condition(&admitted, "Suspended")["reason"],
        "Resumed",
        "{admitted}"
    );

    // A higher priority takes the quota: the first is suspended, its pods go, the second runs.
    let second =
        create_trainjob(&client, &ns.name, &queued("second", "trainset-e2e-high", 2)).await;
    wait_for(
        Duration::from_secs(60),
        "the first TrainJob to be preempted",
        || async {
            let status = status(&api.get("first").await.ok()?);
            (condition(&status, "Suspended")["status"] == "True").then_some(())
        },
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "the first TrainJob's pods to go",
        || async {
            pods_of(&client, &ns.name, "first")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    wait_condition(&second, "second", "Complete", Duration::from_secs(120)).await;
    // Admitted again, the first runs once more and its Workload is admitted.
    wait_for(
        Duration::from_secs(120),
        "the first TrainJob to run again",
        || async {
            let pods = pods_of(&client, &ns.name, "first").await;
            (pods.len() == 2).then_some(())
        },
    )
    .await;
    let workload = workloads.get(&workload.name_any()).await.expect("Workload");
    assert_eq!(condition(&status(&workload), "Admitted")["status"], "True");
    let _ = dynamic_api(&client, &quota("0"), None)
        .delete(&ns.name, &DeleteParams::background())
        .await;
    ns.delete().await;
}

/// No JobSet was made for the TrainJob `name`.
async fn no_jobset(client: &Client, ns: &str, name: &str) {
    let jobset = jobsets(client, ns).get_opt(name).await.expect("get");
    assert!(jobset.is_none(), "a JobSet for {name}");
}

/// The TrainJob fails with `reason`, and its message holds `expected`.
async fn fails_with(api: &Api<DynamicObject>, name: &str, reason: &str, expected: &str) {
    let failed = wait_condition(api, name, "Failed", Duration::from_secs(60)).await;
    let condition = condition(&failed, "Failed");
    assert_eq!(condition["reason"], reason, "{failed}");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(message.contains(expected), "{expected:?} not in {message}");
}

/// Trainer's own test of a foreign runtime snapshot: a ConfigMap of the snapshot's name that the
/// TrainJob does not control is neither read nor changed, and the TrainJob fails naming it.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_runtime_snapshot_the_trainjob_does_not_control_is_left_untouched_and_named() {
    let (client, ns) = setup("tj-snapshot").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let planted: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "forged-runtime-snapshot"},
        "data": {"runtime": "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"}
    }))
    .expect("ConfigMap");
    let made = config_maps
        .create(&Default::default(), &planted)
        .await
        .expect("the planted ConfigMap");
    let api = create_trainjob(
        &client,
        &ns.name,
        &trainjob("forged", 1, delay(1), json!({})),
    )
    .await;
    fails_with(
        &api,
        "forged",
        "ResourceExists",
        "ConfigMap forged-runtime-snapshot",
    )
    .await;
    let after = config_maps
        .get("forged-runtime-snapshot")
        .await
        .expect("still there");
    assert_eq!(after.resource_version(), made.resource_version());
    no_jobset(&client, &ns.name, "forged").await;
    ns.delete().await;
}

/// A name whose pods' names would pass 63 characters under a runtime the admission policy did
/// not see (it was made after the TrainJob) fails the TrainJob at once, naming `metadata.name`,
/// instead of a JobSet the JobSet webhook refuses for ever.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_name_too_long_for_its_pods_fails_at_once_naming_it() {
    let (client, ns) = setup("tj-long").await;
    let name = "llama-finetune-experiment-2026-12-04-abcd";
    let mut job = trainjob(name, 1, delay(1), json!({}));
    job["spec"]["runtimeRef"] = json!({"name": "long-steps", "kind": "TrainingRuntime"});
    job["spec"]["runtimePatches"] = json!([]);
    // As in a_trainjob_waits_for_a_runtime_that_appears_later: Kueue refuses a TrainJob whose
    // runtime does not exist yet.
    job["metadata"]["labels"] = json!({"trainset.io/e2e-without-kueue": "true"});
    let api = create_trainjob(&client, &ns.name, &job).await;
    let mut long_steps = runtime("long-steps", 0, "Never");
    long_steps["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] =
        json!("node-with-a-long-name");
    apply(&client, &long_steps, Some(&ns.name))
        .await
        .expect("the runtime");
    fails_with(&api, name, "InvalidSpec", "metadata.name: Too long").await;
    no_jobset(&client, &ns.name, name).await;
    ns.delete().await;
}

/// `deploy/trainjob-names.yaml` refuses at creation a TrainJob whose pods' names would be too
/// long, exactly where the compiler draws the line: for every shipped runtime, an MPI
/// TrainingRuntime whose launcher is a node, and `numNodes` unset, 1, 10, 11 and 101, the
/// longest name the compiler accepts is admitted (dry run) and one more character is refused
/// with the compiler's own message.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn an_overlong_trainjob_name_is_refused_at_admission_where_the_compiler_draws_the_line() {
    use trainset::api::trainer::TrainingRuntimeSpec;
    use trainset::compile::trainer::{Runtime, RuntimeKind, compile_trainjob};

    let (client, ns) = setup("tj-names").await;
    let mut mpi = runtime("mpi-launcher-node", 0, "Never");
    mpi["spec"]["mlPolicy"] = json!({"numNodes": 3, "mpi": {"runLauncherAsNode": true}});
    mpi["spec"]["template"]["spec"]["replicatedJobs"] = json!([
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "busybox"}]}}}}},
        // Named shorter than `node`, so the node pods' index digits set the bound.
        {"name": "l", "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}}}
    ]);
    apply(&client, &mpi, Some(&ns.name))
        .await
        .expect("the runtime");
    let mut runtimes = vec![(RuntimeKind::Namespaced, mpi)];
    let shipped = trainset_e2e::repo_root().join("deploy/runtimes");
    for entry in std::fs::read_dir(&shipped).expect("deploy/runtimes") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("a runtime file");
        for object in trainset_e2e::yaml_documents(&text) {
            if object["kind"] == "ClusterTrainingRuntime" {
                runtimes.push((RuntimeKind::Cluster, object));
            }
        }
    }
    assert!(
        runtimes.len() > 5,
        "the shipped runtimes: {}",
        runtimes.len()
    );

    let key = trainset::compile::SshKeyPair {
        private_key: "k".into(),
        public_key: "p".into(),
    };
    let manifest = |name: &str, runtime: &Value, kind: RuntimeKind, nodes: Option<i32>| {
        let mut spec =
            json!({"runtimeRef": {"name": runtime["metadata"]["name"], "kind": kind.as_str()}});
        if let Some(nodes) = nodes {
            spec["trainer"] = json!({"numNodes": nodes});
        }
        json!({"apiVersion": TRAINER_API, "kind": "TrainJob",
               "metadata": {"name": name, "namespace": ns.name}, "spec": spec})
    };
    // The compiler's verdict on a name of `length` characters: its error when too long.
    let compiled = |runtime: &Value, kind: RuntimeKind, nodes: Option<i32>, length: usize| {
        let job = serde_json::from_value(manifest(&"a".repeat(length), runtime, kind, nodes))
            .expect("a TrainJob");
        let spec: TrainingRuntimeSpec =
            serde_json::from_value(runtime["spec"].clone()).expect("a runtime spec");
        let name = runtime["metadata"]["name"].as_str().unwrap_or_default();
        let runtime = Runtime {
            kind,
            name,
            spec: &spec,
        };
        compile_trainjob(&job, &runtime, Some(&key)).map_err(|e| e.to_string())
    };
    // Until the apiserver has loaded the policy and Kueue's webhook knows the runtimes.
    let too_long = manifest(&"a".repeat(63), &runtimes[1].1, RuntimeKind::Cluster, None);
    wait_for(Duration::from_secs(30), "the policy to refuse", || async {
        let refused = dry_run_create(&client, &too_long, &ns.name).await.err()?;
        refused
            .to_string()
            .contains("metadata.name: Too long")
            .then_some(())
    })
    .await;

    let mut compared = 0;
    for (kind, runtime) in &runtimes {
        for nodes in [None, Some(1), Some(10), Some(11), Some(101)] {
            let case = format!("{} with numNodes {nodes:?}", runtime["metadata"]["name"]);
            let longest = (1..=63)
                .rev()
                .find(|&length| compiled(runtime, *kind, nodes, length).is_ok())
                .unwrap_or_else(|| panic!("{case}: no name compiles"));
            let admitted = manifest(&"a".repeat(longest), runtime, *kind, nodes);
            wait_for(
                Duration::from_secs(30),
                &format!("{case}: {longest} admitted"),
                || async { dry_run_create(&client, &admitted, &ns.name).await.ok() },
            )
            .await;
            if longest < 63 {
                let expected = compiled(runtime, *kind, nodes, longest + 1)
                    .expect_err("one more character is too long");
                assert!(
                    expected.starts_with("metadata.name: Too long"),
                    "{case}: {expected}"
                );
                let refused = manifest(&"a".repeat(longest + 1), runtime, *kind, nodes);
                let error = dry_run_create(&client, &refused, &ns.name)
                    .await
                    .expect_err(&format!("{case}: {} refused", longest + 1));
                assert!(
                    error.to_string().contains(&expected),
                    "{case}: {error} lacks {expected}"
                );
            }
            compared += 1;
        }
    }
    assert_eq!(compared, runtimes.len() * 5);
    ns.delete().await;
}

/// A runtime whose pods Kubernetes refuses (an init container without an image): the Job
/// controller says so only in `FailedCreate` events, and the TrainJob fails naming the field.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_trainjob_whose_pods_kubernetes_refuses_fails_naming_the_field() {
    let (client, ns) = setup("tj-refused").await;
    let mut imageless = runtime("imageless", 0, "Never");
    imageless["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["initContainers"] = json!([{"name": "init"}]);
    apply(&client, &imageless, Some(&ns.name))
        .await
        .expect("the runtime");
    let mut job = trainjob("refused", 1, delay(1), json!({}));
    job["spec"]["runtimeRef"] = json!({"name": "imageless", "kind": "TrainingRuntime"});
    let api = create_trainjob(&client, &ns.name, &job).await;
    fails_with(
        &api,
        "refused",
        "InvalidSpec",
        "spec.initContainers[0].image: Required value",
    )
    .await;
    wait_for(Duration::from_secs(60), "the JobSet to go", || async {
        let jobset = jobsets(&client, &ns.name).get_opt("refused").await.ok()?;
        jobset.is_none().then_some(())
    })
    .await;
    ns.delete().await;
}
