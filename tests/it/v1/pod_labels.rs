//! The committed `deploy/pod-labels.yaml` is exactly what `trainset pod-labels` prints, and the
//! compiler annotates templates as the policy expects.

use std::path::Path;

use serde_json::json;
use trainset::api::{JAXJob, MPIJob, PaddleJob, PyTorchJob, TFJob, TrainingJob, XGBoostJob};
use trainset::compile::{JOB_ROLE, MASTER_REPLICA_INDEX, Options, REPLICA_INDEX_OFFSET};

use crate::support::Job;
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

/// A job of kind `K` with one replica of each master-like type and two of any other, in
/// namespace `n`.
fn job<K: TrainingJob>(types: &[&str]) -> Job {
    types
        .iter()
        .fold(Job::of::<K>("j").namespace("n"), |job, t| {
            let count = if matches!(*t, "Master" | "Chief" | "Launcher") {
                1
            } else {
                2
            };
            job.replicas(t, count)
        })
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
            job::<TFJob>(&["Worker", "PS"]).build(),
            [
                mark("ps", some, None, None),
                mark("worker", some, some, None),
            ]
            .concat(),
        ),
        (
            job::<TFJob>(&["Chief", "Worker"]).build(),
            [
                mark("chief", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job::<PyTorchJob>(&["Worker"]).build(),
            mark("worker", some, some, None),
        ),
        (
            job::<PyTorchJob>(&["Master", "Worker"]).build(),
            [
                mark("master", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job::<XGBoostJob>(&["Master", "Worker"]).build(),
            [
                mark("master", some, None, Some("master")),
                mark("worker", some, None, None),
            ]
            .concat(),
        ),
        (
            job::<PaddleJob>(&["Worker"]).build(),
            mark("worker", some, None, None),
        ),
        (
            job::<JAXJob>(&["Worker"]).build(),
            mark("worker", some, some, None),
        ),
        (
            job::<MPIJob>(&["Launcher", "Worker"]).build(),
            [
                mark("launcher", None, None, Some("launcher")),
                mark("worker", some, None, Some("worker")),
            ]
            .concat(),
        ),
        (
            job::<MPIJob>(&["Launcher", "Worker"])
                .spec(json!({"runLauncherAsWorker": true}))
                .build(),
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
