//! trainset with the real Kueue manager, in both ways Kueue can queue a training job:
//! - a PyTorchJob: Kueue's JobSet integration queues the JobSet (Kueue's shipped configuration
//!   leaves the v1 Kubeflow kinds out);
//! - an MPIJob: Kueue's `kubeflow.org/mpijob` integration (on by default) queues the MPIJob
//!   itself, and trainset carries Kueue's decisions to the JobSet.
//!
//! Each test holds its job behind a ClusterQueue without quota, checks that nothing runs, then
//! grants quota and expects the job to run on the flavor's nodes and succeed.

use std::time::{Duration, Instant};

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::{
    TestNamespace, apply, client, create, dynamic_api, install_crds, operator, wait_for, wait_state,
};

const FLAVOR: &str = "trainset-e2e-kwok";
const QUEUE: &str = "training";

/// A ClusterQueue for this namespace only, with `cpu` of quota, and its LocalQueue.
async fn queues(client: &Client, ns: &str, cpu: &str) -> Value {
    let flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR}, "spec": {"nodeLabels": {"type": "kwok"}}});
    let cluster_queue = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
    "metadata": {"name": ns},
    "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]
    }});
    let local_queue = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": QUEUE}, "spec": {"clusterQueue": ns}});
    for (object, namespace) in [
        (&flavor, None),
        (&cluster_queue, None),
        (&local_queue, Some(ns)),
    ] {
        apply(client, object, namespace)
            .await
            .unwrap_or_else(|e| panic!("applying {}: {e}", object["kind"]));
    }
    cluster_queue
}

/// A queued job with `replicas` of each replica type; every pod asks for one CPU and runs 3 s.
fn queued_job(
    api_version: &str,
    kind: &str,
    field: &str,
    container: &str,
    replicas: &[(&str, i64)],
) -> Value {
    let mut specs = serde_json::Map::new();
    for (replica_type, count) in replicas {
        specs.insert(
            (*replica_type).to_owned(),
            json!({"replicas": count, "template": {
            "metadata": {"annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": "3s",
                "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3s"}},
            "spec": {"containers": [{"name": container, "image": "busybox",
                                      "resources": {"requests": {"cpu": "1"}}}]}}}),
        );
    }
    let name = kind.to_ascii_lowercase();
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
           "spec": {field: specs}})
}

/// The namespace's Workload, once Kueue has created it.
async fn workload(client: &Client, ns: &str) -> DynamicObject {
    let probe = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"});
    let workloads = dynamic_api(client, &probe, Some(ns));
    wait_for(Duration::from_secs(30), "Kueue's Workload", || async {
        workloads
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await
}

/// Holds the job without quota, grants quota, and checks the run; returns the JobSet.
async fn queue_then_run(kind: &str, job: Value, owner_kind: &str) -> JobSet {
    let client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    let ns = TestNamespace::create(&client, &kind.to_ascii_lowercase()).await;
    let mut cluster_queue = queues(&client, &ns.name, "0").await;
    let name = job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api = create(&client, &ns.name, &job).await;

    // Queued: the Workload belongs to the object Kueue queues, and nothing runs.
    let queued = workload(&client, &ns.name).await;
    let owners: Vec<String> = queued
        .owner_references()
        .iter()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .collect();
    assert_eq!(owners, [format!("{owner_kind}/{name}")], "Workload owners");
    wait_state(&api, &name, "Suspended", Duration::from_secs(30)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    let held_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < held_until {
        let running = pods.list(&ListParams::default()).await.expect("pods").items;
        assert!(
            running.is_empty(),
            "pods ran without quota: {}",
            running.len()
        );
        let jobset = jobsets.get(&name).await.expect("JobSet");
        assert_eq!(
            jobset.spec.suspend,
            Some(true),
            "the JobSet waits for Kueue"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Quota: Kueue admits, the pods run on the flavor's nodes, the job succeeds.
    cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] =
        json!("8");
    apply(&client, &cluster_queue, None)
        .await
        .expect("granting quota");
    let status = wait_state(&api, &name, "Succeeded", Duration::from_secs(120)).await;
    assert!(status["startTime"].is_string(), "{status}");
    let jobset = jobsets.get(&name).await.expect("JobSet");
    for replicated in &jobset.spec.replicated_jobs {
        let pod = replicated
            .template
            .spec
            .as_ref()
            .map(|s| &s.template)
            .expect("pod template");
        let node_selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone());
        assert_eq!(
            node_selector
                .and_then(|s| s.get("type").cloned())
                .as_deref(),
            Some("kwok"),
            "{}: Kueue's flavor reached the pods",
            replicated.name
        );
    }
    // Kueue saw the end too: it finishes the Workload.
    let probe = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"});
    let workloads = dynamic_api(&client, &probe, Some(&ns.name));
    let workload_name = queued.name_any();
    wait_for(
        Duration::from_secs(30),
        "the Workload to finish",
        || async {
            let workload = workloads.get(&workload_name).await.ok()?;
            let finished = workload.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Finished" && c["status"] == "True");
            finished.then_some(())
        },
    )
    .await;

    // Best effort, like the namespace: a leftover queue never makes a test pass or fail.
    let _ = dynamic_api(&client, &cluster_queue, None)
        .delete(&ns.name, &DeleteParams::background())
        .await;
    ns.delete().await;
    jobset
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_a_pytorchjob_through_its_jobset() {
    let job = queued_job(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchReplicaSpecs",
        "pytorch",
        &[("Master", 1), ("Worker", 2)],
    );
    queue_then_run("PyTorchJob", job, "JobSet").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_an_mpijob_itself_and_trainset_carries_its_admission() {
    let job = queued_job(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "mpiReplicaSpecs",
        "mpi",
        &[("Launcher", 1), ("Worker", 2)],
    );
    let jobset = queue_then_run("MPIJob", job, "MPIJob").await;
    // The pod-set labels Kueue wrote into the MPIJob's templates are on the JobSet's.
    for replicated in &jobset.spec.replicated_jobs {
        let labels = replicated
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        assert_eq!(
            labels.get("kueue.x-k8s.io/podset").map(String::as_str),
            Some(replicated.name.as_str()),
            "{}",
            replicated.name
        );
    }
}
