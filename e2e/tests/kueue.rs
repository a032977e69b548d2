//! trainset with the real Kueue manager, in both ways Kueue can queue a training job:
//! - a PyTorchJob: Kueue's JobSet integration queues the JobSet (Kueue's shipped configuration
//!   leaves the v1 Kubeflow kinds out);
//! - an MPIJob: Kueue's `kubeflow.org/mpijob` integration (on by default) queues the MPIJob
//!   itself, and trainset carries Kueue's decisions to the JobSet.
//!
//! For each: a job waits behind a ClusterQueue without quota, runs on the flavor's nodes once
//! quota is granted and succeeds; and a higher-priority job preempts a running one, which shows
//! as suspended and runs again afterwards.

use std::time::{Duration, Instant};

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::ResourceExt;
use serde_json::{Value, json};
use trainset_e2e::kueue::{HIGH, LOW, Queues, queued};
use trainset_e2e::{
    client, condition, create, install_crds, operator, status, wait_for, wait_state,
};

/// A queued kind: API version, replica-specs field, default container, replica types.
struct Kind {
    api_version: &'static str,
    kind: &'static str,
    field: &'static str,
    container: &'static str,
    replicas: [(&'static str, i64); 2],
    /// The kind of object Kueue queues (owner of the Workload).
    queued_object: &'static str,
}

const PYTORCH: Kind = Kind {
    api_version: "kubeflow.org/v1",
    kind: "PyTorchJob",
    field: "pytorchReplicaSpecs",
    container: "pytorch",
    replicas: [("Master", 1), ("Worker", 2)],
    queued_object: "JobSet",
};

const MPI: Kind = Kind {
    api_version: "kubeflow.org/v2beta1",
    kind: "MPIJob",
    field: "mpiReplicaSpecs",
    container: "mpi",
    replicas: [("Launcher", 1), ("Worker", 2)],
    queued_object: "MPIJob",
};

/// A queued job named `name` at `priority`; its three pods ask for one CPU each and run `seconds`.
fn queued_job(kind: &Kind, name: &str, priority: &str, seconds: u32) -> Value {
    let delay = format!("{seconds}s");
    let mut specs = serde_json::Map::new();
    for (replica_type, count) in kind.replicas {
        let template = json!({
            "metadata": {"annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": delay,
                "pod-complete.stage.kwok.x-k8s.io/jitter-delay": delay}},
            "spec": {"containers": [{"name": kind.container, "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}});
        specs.insert(
            replica_type.to_owned(),
            json!({"replicas": count, "template": template}),
        );
    }
    json!({"apiVersion": kind.api_version, "kind": kind.kind,
           "metadata": {"name": name, "labels": queued(priority)}, "spec": {kind.field: specs}})
}

/// The test's namespace and queues, with `cpu` of quota, served by the shared operator.
async fn queues_for(kind: &Kind, cpu: &str) -> Queues {
    let client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    Queues::new(&client, &kind.kind.to_ascii_lowercase(), "cpu", cpu).await
}

/// Each replicated job's name and pod template.
fn pod_templates(jobset: &JobSet) -> impl Iterator<Item = (&str, &PodTemplateSpec)> {
    jobset
        .spec
        .replicated_jobs
        .iter()
        .filter_map(|r| Some((r.name.as_str(), &r.template.spec.as_ref()?.template)))
}

/// Every replicated job's pod template selects the flavor's nodes.
fn assert_on_flavor_nodes(jobset: &JobSet) {
    for (name, pod) in pod_templates(jobset) {
        let node_selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
        assert_eq!(
            node_selector
                .and_then(|s| s.get("type"))
                .map(String::as_str),
            Some("kwok"),
            "{name}: Kueue's flavor reached the pod template"
        );
    }
}

/// Holds a job without quota, grants quota, and checks the run; returns the finished JobSet.
async fn waits_for_quota_then_runs(kind: &Kind) -> JobSet {
    let mut queues = queues_for(kind, "0").await;
    let name = "held";
    let api = create(
        &queues.client,
        &queues.ns.name,
        &queued_job(kind, name, LOW, 3),
    )
    .await;

    // Queued: the Workload belongs to the object Kueue queues, and nothing runs.
    let queued = queues.workload(name).await;
    let owners: Vec<String> = queued
        .owner_references()
        .iter()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .collect();
    assert_eq!(owners, [format!("{}/{name}", kind.queued_object)]);
    wait_state(&api, name, "Suspended", Duration::from_secs(30)).await;
    let held_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < held_until {
        assert!(
            queues.pods_of(name).await.is_empty(),
            "pods ran without quota"
        );
        let jobset = queues.find_jobset(name).await;
        if kind.queued_object == "JobSet" {
            let suspended = jobset.and_then(|j| j.spec.suspend);
            assert_eq!(suspended, Some(true), "the JobSet waits for Kueue");
        } else {
            // Kueue suspends the job itself from its creation: its JobSet comes once admitted.
            assert!(jobset.is_none(), "no JobSet before Kueue admits the job");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Quota: Kueue admits, the pods run on the flavor's nodes, the job succeeds.
    queues.set_quota("8").await;
    let succeeded = wait_state(&api, name, "Succeeded", Duration::from_secs(120)).await;
    assert!(succeeded["startTime"].is_string(), "{succeeded}");
    let jobset = queues.jobset(name).await;
    assert_on_flavor_nodes(&jobset);
    // Kueue saw the end too: it finishes the Workload.
    let workloads = queues.workloads();
    let workload_name = queued.name_any();
    wait_for(
        Duration::from_secs(30),
        "the Workload to finish",
        || async {
            let workload = workloads.get(&workload_name).await.ok()?;
            let finished = condition(&status(&workload), "Finished")["status"] == "True";
            finished.then_some(())
        },
    )
    .await;
    queues.delete().await;
    jobset
}

/// A long low-priority job runs on all the quota; a high-priority one preempts it, runs and
/// succeeds; the low one is then admitted again and runs, with no JobSet restart counted.
async fn preemption_suspends_and_resumes(kind: &Kind) {
    let queues = queues_for(kind, "3").await;
    let (client, ns) = (&queues.client, queues.ns.name.as_str());
    let low = create(client, ns, &queued_job(kind, "low", LOW, 600)).await;
    wait_state(&low, "low", "Running", Duration::from_secs(60)).await;
    let high = create(client, ns, &queued_job(kind, "high", HIGH, 3)).await;

    let preempted = wait_state(&low, "low", "Suspended", Duration::from_secs(60)).await;
    assert_eq!(preempted["restarts"], 0, "{preempted}");
    wait_for(Duration::from_secs(60), "low's pods to go", || async {
        queues.pods_of("low").await.is_empty().then_some(())
    })
    .await;
    wait_state(&high, "high", "Succeeded", Duration::from_secs(120)).await;
    let resumed = wait_state(&low, "low", "Running", Duration::from_secs(120)).await;
    assert_eq!(resumed["restarts"], 0, "{resumed}");
    assert_eq!(
        condition(&resumed, "Suspended")["status"],
        "False",
        "{resumed}"
    );
    assert_on_flavor_nodes(&queues.jobset("low").await);
    let low_status = status(&low.get("low").await.expect("low"));
    assert_eq!(low_status["state"], "Running");
    queues.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_a_pytorchjob_through_its_jobset() {
    waits_for_quota_then_runs(&PYTORCH).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_an_mpijob_itself_and_trainset_carries_its_admission() {
    let jobset = waits_for_quota_then_runs(&MPI).await;
    // The pod-set labels Kueue wrote into the MPIJob's templates are on the JobSet's.
    for (name, pod) in pod_templates(&jobset) {
        let labels = pod.metadata.as_ref().and_then(|m| m.labels.as_ref());
        assert_eq!(
            labels
                .and_then(|l| l.get("kueue.x-k8s.io/podset"))
                .map(String::as_str),
            Some(name),
            "{name}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_preempts_a_pytorchjob_and_admits_it_again() {
    preemption_suspends_and_resumes(&PYTORCH).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_preempts_an_mpijob_and_admits_it_again() {
    preemption_suspends_and_resumes(&MPI).await;
}
