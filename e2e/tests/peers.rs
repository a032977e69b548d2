//! The upstream operators on the local control plane (`e2e/peers ...`): each comes up
//! from its Go module and runs a job to the end. They swap CRDs and stop trainset operators, so
//! `run-tests` runs this file alone, one test at a time (`--test-threads=1`), like the chaos
//! tests.

use std::time::Duration;

use serde_json::json;
use trainset_e2e::{
    Peer, TestNamespace, client, condition, create, create_when_admitted, wait_condition,
};

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds training-operator v1.9.4"]
async fn peer_a_pytorchjob_succeeds_under_training_operator() {
    let client = client().await;
    let _peer = Peer::start("training-operator");
    let ns = TestNamespace::create(&client, "peer-v1").await;
    let manifest = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "smoke"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}}
        }}
    });
    let api = create(&client, &ns.name, &manifest).await;
    let status = wait_condition(&api, "smoke", "Succeeded", Duration::from_secs(120)).await;
    assert_eq!(
        condition(&status, "Succeeded")["reason"],
        "PyTorchJobSucceeded"
    );
    // Upstream's own pods, not a JobSet's: one per replica, named <job>-<type>-<index>.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = pods
        .list(&Default::default())
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(
        names,
        ["smoke-master-0", "smoke-worker-0", "smoke-worker-1"],
        "{names:?}"
    );
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds Trainer v2.3.0"]
async fn peer_a_trainjob_completes_under_trainer() {
    let client = client().await;
    let _peer = Peer::start("trainer");
    let ns = TestNamespace::create(&client, "peer-v2").await;
    let manifest = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "smoke"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "1"}}}
        }
    });
    // The runtimes were applied as Trainer started; its and Kueue's webhooks may not have them
    // cached yet.
    let api = create_when_admitted(&client, &ns.name, &manifest, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("creating smoke: {e}"));
    let status = wait_condition(&api, "smoke", "Complete", Duration::from_secs(180)).await;
    assert_eq!(condition(&status, "Complete")["reason"], "AllJobsCompleted");
    // Trainer built a JobSet of the runtime's shape for it.
    let jobsets = trainset_e2e::dynamic_api(
        &client,
        &json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}),
        Some(&ns.name),
    );
    let jobset = jobsets.get("smoke").await.expect("the TrainJob's JobSet");
    let replicated: Vec<&str> = jobset.data["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(replicated.contains(&"node"), "{replicated:?}");
    ns.delete().await;
}
