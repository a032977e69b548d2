//! The committed CRDs on the real apiserver: every example is accepted, and every invalid
//! manifest is refused with the message of the rule it breaks.

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use trainset_e2e::{
    TestNamespace, client, dry_run_create, dynamic_api, install_crds, repo_root, yaml_documents,
};

fn pod(containers: Value) -> Value {
    json!({"spec": {"containers": containers}})
}

fn job(kind: &str, name: &str, spec: Value) -> Value {
    let api_version = if kind == "MPIJob" {
        "kubeflow.org/v2beta1"
    } else {
        "kubeflow.org/v1"
    };
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

fn pytorch(name: &str, specs: Value) -> Value {
    job("PyTorchJob", name, json!({"pytorchReplicaSpecs": specs}))
}

fn replica(replicas: i64, container: &str) -> Value {
    json!({"replicas": replicas, "template": pod(json!([{"name": container, "image": "img"}]))})
}

/// (description, manifest, text the apiserver's message must contain)
fn invalid_manifests() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "name is not a DNS-1035 label",
            pytorch("1-bad.name", json!({"Worker": replica(1, "pytorch")})),
            "metadata.name must be a DNS-1035 label",
        ),
        (
            "name too long for the generated pod names",
            pytorch(
                "a-name-that-is-long-enough-to-overflow-the-pod-name-budget",
                json!({"Worker": replica(100, "pytorch")}),
            ),
            "metadata.name is too long",
        ),
        (
            "replica specs missing",
            job("TFJob", "no-specs", json!({})),
            "spec.tfReplicaSpecs: Required value",
        ),
        (
            "replica specs empty",
            job("TFJob", "empty-specs", json!({"tfReplicaSpecs": {}})),
            "spec.tfReplicaSpecs: Invalid value",
        ),
        (
            "unknown replica type",
            pytorch("unknown-type", json!({"Launcher": replica(1, "pytorch")})),
            "replica types must be Master, Worker (in any case)",
        ),
        (
            "replica type given twice in different case",
            pytorch(
                "twice",
                json!({"Worker": replica(1, "pytorch"), "worker": replica(1, "pytorch")}),
            ),
            "each replica type may be given only once",
        ),
        (
            "no containers",
            pytorch(
                "no-containers",
                json!({"Worker": {"replicas": 1, "template": pod(json!([]))}}),
            ),
            "template.spec.containers must hold at least one container",
        ),
        (
            "container without image",
            pytorch(
                "no-image",
                json!({"Worker": {"template": pod(json!([{"name": "pytorch"}]))}}),
            ),
            "needs an image",
        ),
        (
            "default container missing",
            pytorch("no-default", json!({"Worker": replica(1, "main")})),
            "needs a container named pytorch",
        ),
        (
            "PyTorch Master replicas not 1",
            pytorch(
                "two-masters",
                json!({"Master": replica(2, "pytorch"), "Worker": replica(1, "pytorch")}),
            ),
            "Master replicas must be exactly 1",
        ),
        (
            "XGBoost without Master",
            job(
                "XGBoostJob",
                "no-master",
                json!({"xgbReplicaSpecs": {"Worker": replica(2, "xgboost")}}),
            ),
            "a Master replica spec is required",
        ),
        (
            "JAX with a PS",
            job(
                "JAXJob",
                "jax-ps",
                json!({"jaxReplicaSpecs": {"PS": replica(1, "jax")}}),
            ),
            "replica types must be Worker",
        ),
        (
            "MPI Launcher replicas not 1",
            job(
                "MPIJob",
                "two-launchers",
                json!({"mpiReplicaSpecs": {"Launcher": replica(2, "l"), "Worker": replica(1, "w")}}),
            ),
            "Launcher replicas must be exactly 1",
        ),
        (
            "MPI without Launcher",
            job(
                "MPIJob",
                "no-launcher",
                json!({"mpiReplicaSpecs": {"Worker": replica(1, "w")}}),
            ),
            "a Launcher replica spec is required",
        ),
        (
            "negative replicas",
            job(
                "TFJob",
                "negative",
                json!({"tfReplicaSpecs": {"Worker": replica(-1, "tensorflow")}}),
            ),
            "should be greater than or equal to 0",
        ),
        (
            "unknown restartPolicy",
            job(
                "TFJob",
                "bad-restart",
                json!({"tfReplicaSpecs": {"Worker": {"restartPolicy": "Sometimes", "template": pod(json!([{"name": "tensorflow", "image": "i"}]))}}}),
            ),
            "spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: \"Sometimes\"",
        ),
        (
            "managedBy not allowed",
            job(
                "JAXJob",
                "bad-manager",
                json!({"runPolicy": {"managedBy": "example.com/other"}, "jaxReplicaSpecs": {"Worker": replica(1, "jax")}}),
            ),
            "spec.runPolicy.managedBy: Unsupported value",
        ),
        (
            "Chief and Master together",
            job(
                "TFJob",
                "chief-master",
                json!({"tfReplicaSpecs": {"Chief": replica(1, "tensorflow"), "Master": replica(1, "tensorflow")}}),
            ),
            "at most one of Chief and Master",
        ),
        (
            "elasticPolicy without Worker",
            job(
                "PyTorchJob",
                "elastic-master",
                json!({"elasticPolicy": {"minReplicas": 1}, "pytorchReplicaSpecs": {"Master": replica(1, "pytorch")}}),
            ),
            "elasticPolicy requires a Worker replica spec",
        ),
        (
            "elastic minReplicas above maxReplicas",
            job(
                "PyTorchJob",
                "elastic-bounds",
                json!({"elasticPolicy": {"minReplicas": 3, "maxReplicas": 2}, "pytorchReplicaSpecs": {"Worker": replica(2, "pytorch")}}),
            ),
            "minReplicas must not exceed maxReplicas",
        ),
    ]
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn examples_are_accepted_and_invalid_manifests_refused_with_the_rule_message() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "crds").await;

    let mut examples = 0;
    for entry in std::fs::read_dir(repo_root().join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        for doc in yaml_documents(&std::fs::read_to_string(&path).expect("readable")) {
            dry_run_create(&client, &doc, &ns.name)
                .await
                .unwrap_or_else(|e| panic!("{} refused: {e}", path.display()));
            examples += 1;
        }
    }
    assert!(examples >= 10, "at least 10 examples, found {examples}");

    let mut failures = Vec::new();
    for (what, manifest, expected) in invalid_manifests() {
        match dry_run_create(&client, &manifest, &ns.name).await {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(kube::Error::Api(status)) if status.message.contains(expected) => {}
            Err(other) => failures.push(format!("{what}: expected {expected:?}, got {other}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn managed_by_cannot_be_added_or_changed() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "managedby").await;
    let original = job(
        "JAXJob",
        "managed",
        json!({"runPolicy": {"suspend": true}, "jaxReplicaSpecs": {"Worker": replica(1, "jax")}}),
    );
    let object = serde_json::from_value(original.clone()).expect("object");
    let api = dynamic_api(&client, &original, Some(&ns.name));
    api.create(&PostParams::default(), &object)
        .await
        .expect("created");

    for value in [
        "kueue.x-k8s.io/multikueue",
        "kubeflow.org/training-operator",
    ] {
        let patch = json!({"spec": {"runPolicy": {"managedBy": value}}});
        let error = api
            .patch("managed", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("adding managedBy is refused");
        assert!(
            error
                .to_string()
                .contains("runPolicy.managedBy is immutable"),
            "{error}"
        );
    }
    ns.delete().await;
}
