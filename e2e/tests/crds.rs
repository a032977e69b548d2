//! The committed CRDs on the real apiserver: every example is accepted and `managedBy` is
//! immutable. Invalid manifests are the invalid corpus's (`e2e/tests/invalid.rs`).

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

fn replica(replicas: i64, container: &str) -> Value {
    json!({"replicas": replicas, "template": pod(json!([{"name": container, "image": "img"}]))})
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn every_example_is_accepted() {
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

/// The Trainer v2 CRDs trainset builds are accepted by the real apiserver: a structural schema,
/// and every CEL rule compiles within the cost budget (a dry-run apply: nothing is installed yet,
/// since nothing serves TrainJobs; Trainer's own CRDs may be there from the peer tests).
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn the_trainer_crds_are_accepted() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = client().await;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client);
    let params = PatchParams::apply("trainset-e2e").force().dry_run();
    let built = trainset::crds::trainer().expect("the Trainer CRDs");
    assert_eq!(built.len(), 3);
    for crd in built {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("{name} refused: {e}"));
    }
}

/// A running job's replica counts are fixed, but for the Worker of an elastic job within its
/// bounds; a suspended job may change any. Through the scale subresource, as `kubectl scale` and
/// an HPA change them.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn replicas_change_only_within_elastic_bounds_or_while_suspended() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "resize").await;
    let elastic = job(
        "PyTorchJob",
        "elastic",
        json!({"elasticPolicy": {"minReplicas": 2, "maxReplicas": 4},
               "pytorchReplicaSpecs": {"Worker": replica(2, "pytorch")}}),
    );
    let fixed = job(
        "JAXJob",
        "fixed",
        json!({"jaxReplicaSpecs": {"Worker": replica(2, "jax")}}),
    );
    let suspended = job(
        "PaddleJob",
        "suspended",
        json!({"runPolicy": {"suspend": true},
               "paddleReplicaSpecs": {"Worker": replica(2, "paddle")}}),
    );
    let scale = |replicas: i64| json!({"spec": {"replicas": replicas}});
    for manifest in [&elastic, &fixed, &suspended] {
        let api = dynamic_api(&client, manifest, Some(&ns.name));
        let object = serde_json::from_value(manifest.clone()).expect("object");
        api.create(&PostParams::default(), &object)
            .await
            .expect("created");
    }
    let refused = "replicas of a running job";
    for (manifest, replicas, allowed) in [
        (&elastic, 4, true),
        (&elastic, 3, true),
        (&elastic, 5, false),
        (&elastic, 1, false),
        (&fixed, 3, false),
        (&suspended, 5, true),
    ] {
        let api = dynamic_api(&client, manifest, Some(&ns.name));
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
        let result = api
            .patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(&scale(replicas)),
            )
            .await;
        match (result, allowed) {
            (Ok(scaled), true) => {
                assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(replicas as i32))
            }
            (Err(error), false) => {
                let error = error.to_string();
                assert!(error.contains(refused), "{name} to {replicas}: {error}");
                assert!(
                    error.contains("ReplicaSpecs"),
                    "the field is named: {error}"
                );
            }
            (Ok(_), false) => panic!("{name} scaled to {replicas}: should be refused"),
            (Err(error), true) => panic!("{name} to {replicas} refused: {error}"),
        }
    }
    ns.delete().await;
}
