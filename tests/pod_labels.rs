//! The committed `deploy/pod-labels.yaml` is exactly what `trainset pod-labels` prints, and the
//! compiler annotates templates as the policy expects.

use std::path::Path;

use serde_json::json;
use trainset::compile::{JOB_ROLE, MASTER_REPLICA_INDEX, Options, REPLICA_INDEX_OFFSET};
use trainset::kinds::compile_manifest;

#[test]
fn committed_policy_matches_the_code() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/pod-labels.yaml"
    ));
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("deploy/pod-labels.yaml: {e}; run `cargo run -- pod-labels`"));
    assert_eq!(
        committed,
        trainset::pod_labels::to_yaml().expect("YAML"),
        "deploy/pod-labels.yaml drifted; run `cargo run -q -- pod-labels > deploy/pod-labels.yaml`"
    );
}

/// (replicated job, its template's replica-index offset, master index, job-role label).
type Marks = Vec<(String, Option<String>, Option<String>, Option<String>)>;

fn marks(manifest: serde_json::Value) -> Marks {
    let key = trainset::compile::SshKeyPair {
        private_key: "k".into(),
        public_key: "p".into(),
    };
    let options = Options {
        ssh_key: Some(&key),
        ..Default::default()
    };
    let compiled = compile_manifest(manifest, &options).expect("compiles");
    compiled
        .jobset
        .spec
        .replicated_jobs
        .iter()
        .map(|rj| {
            let meta = rj
                .template
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.clone())
                .unwrap_or_default();
            let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k)).cloned();
            let role = meta.labels.as_ref().and_then(|l| l.get(JOB_ROLE)).cloned();
            (
                rj.name.clone(),
                annotation(REPLICA_INDEX_OFFSET),
                annotation(MASTER_REPLICA_INDEX),
                role,
            )
        })
        .collect()
}

fn job(kind: &str, field: &str, types: &[&str], extra: serde_json::Value) -> serde_json::Value {
    let container = json!({"name": "c", "image": "i"});
    let specs: serde_json::Map<String, serde_json::Value> = types
        .iter()
        .map(|t| {
            (
                (*t).to_owned(),
                json!({
                    "replicas": if matches!(*t, "Master" | "Chief" | "Launcher") { 1 } else { 2 },
                    "template": {"spec": {"containers": [container]}},
                }),
            )
        })
        .collect();
    let api_version = if kind == "MPIJob" {
        "kubeflow.org/v2beta1"
    } else {
        "kubeflow.org/v1"
    };
    let mut spec = json!({ field: specs });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "j", "namespace": "n"}, "spec": spec})
}

fn mark(rj: &str, offset: Option<&str>, master: Option<&str>, role: Option<&str>) -> Marks {
    vec![(
        rj.to_owned(),
        offset.map(str::to_owned),
        master.map(str::to_owned),
        role.map(str::to_owned),
    )]
}

/// v1's IsMasterRole per kind (training-operator v1.9.4) and mpi-operator's index labels.
#[test]
fn templates_carry_each_kinds_v1_rule() {
    let some = Some("0");
    let cases: Vec<(serde_json::Value, Marks)> = vec![
        (
            job("TFJob", "tfReplicaSpecs", &["Worker", "PS"], json!({})),
            [
                mark("ps", some, None, None),
                mark("worker", some, some, None),
            ]
            .concat(),
        ),
        (
            job("TFJob", "tfReplicaSpecs", &["Chief", "Worker"], json!({})),
            [
                mark("chief", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job("PyTorchJob", "pytorchReplicaSpecs", &["Worker"], json!({})),
            mark("worker", some, some, None),
        ),
        (
            job(
                "PyTorchJob",
                "pytorchReplicaSpecs",
                &["Master", "Worker"],
                json!({}),
            ),
            [
                mark("master", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job(
                "XGBoostJob",
                "xgbReplicaSpecs",
                &["Master", "Worker"],
                json!({}),
            ),
            [
                mark("master", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job("PaddleJob", "paddleReplicaSpecs", &["Worker"], json!({})),
            mark("worker", some, None, None),
        ),
        (
            job("JAXJob", "jaxReplicaSpecs", &["Worker"], json!({})),
            mark("worker", some, some, None),
        ),
        (
            job(
                "MPIJob",
                "mpiReplicaSpecs",
                &["Launcher", "Worker"],
                json!({}),
            ),
            [
                mark("launcher", None, None, Some("launcher")),
                mark("worker", some, None, Some("worker")),
            ]
            .concat(),
        ),
        (
            job(
                "MPIJob",
                "mpiReplicaSpecs",
                &["Launcher", "Worker"],
                json!({"runLauncherAsWorker": true}),
            ),
            [
                mark("launcher", some, None, Some("launcher")),
                mark("worker", Some("1"), None, Some("worker")),
            ]
            .concat(),
        ),
    ];
    for (manifest, expected) in cases {
        let kind = manifest["kind"].clone();
        assert_eq!(marks(manifest), expected, "{kind}");
    }
}
