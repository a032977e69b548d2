//! The invalid corpus (`e2e/testdata/invalid/`) against the real apiserver and the running
//! operator, in one burst with valid jobs: each manifest is refused by the apiserver with the
//! lines its header expects (`# refused:`), or accepted and failed by trainset with them
//! (`# failed:`), while the valid jobs succeed and the operator never restarts. `tests/invalid.rs`
//! holds `trainset render` to the same lines.

use std::time::Duration;

use jobset_types::JobSet;
use kube::api::Api;
use serde_json::{Value, json};
use trainset_e2e::{
    TestNamespace, client, condition, create_strict, delay, dynamic_api, install_crds, operator,
    repo_root, wait_event, wait_state, yaml_documents,
};

struct Case {
    file: String,
    manifest: Value,
    refused: Vec<String>,
    failed: Vec<String>,
}

fn corpus() -> Vec<Case> {
    let dir = repo_root().join("e2e/testdata/invalid");
    let mut cases: Vec<Case> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            let lines = |prefix: &str| -> Vec<String> {
                text.lines()
                    .filter_map(|l| l.strip_prefix(prefix).map(str::to_owned))
                    .collect()
            };
            Case {
                file: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                manifest: yaml_documents(&text).remove(0),
                refused: lines("# refused: "),
                failed: lines("# failed: "),
            }
        })
        .collect();
    cases.sort_by(|a, b| a.file.cmp(&b.file));
    cases
}

fn valid_job(kind: &str, name: &str, container: &str, types: &[&str]) -> Value {
    let api_version = if kind == "MPIJob" {
        "kubeflow.org/v2beta1"
    } else {
        "kubeflow.org/v1"
    };
    let field = match kind {
        "MPIJob" => "mpiReplicaSpecs".to_owned(),
        "XGBoostJob" => "xgbReplicaSpecs".to_owned(),
        "TFJob" => "tfReplicaSpecs".to_owned(),
        _ => format!(
            "{}ReplicaSpecs",
            kind.trim_end_matches("Job").to_ascii_lowercase()
        ),
    };
    let specs: serde_json::Map<String, Value> = types
        .iter()
        .map(|t| {
            let spec = json!({"replicas": 1, "template": {"metadata": delay(2), "spec": {"containers": [{"name": container, "image": "busybox"}]}}});
            ((*t).to_owned(), spec)
        })
        .collect();
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": {field: specs}})
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn every_invalid_manifest_is_refused_or_failed_while_valid_jobs_succeed() {
    let client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    let pid = operator::pid().expect("the operator runs");
    let ns = TestNamespace::create(&client, "invalid").await;
    let cases = corpus();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let valid = [
        valid_job(
            "PyTorchJob",
            "valid-pytorch",
            "pytorch",
            &["Master", "Worker"],
        ),
        valid_job("TFJob", "valid-tf", "tensorflow", &["PS", "Worker"]),
        valid_job("MPIJob", "valid-mpi", "mpi", &["Launcher", "Worker"]),
    ];

    // One burst: every manifest as `kubectl apply` sends a new object (create, strict fields).
    let results = futures::future::join_all(
        cases
            .iter()
            .map(|c| &c.manifest)
            .chain(valid.iter())
            .map(|manifest| create_strict(&client, manifest, &ns.name)),
    )
    .await;

    let mut failures = Vec::new();
    for (case, result) in cases.iter().zip(&results) {
        match (result, case.refused.is_empty()) {
            (Err(error), false) => {
                let text = error.to_string();
                for expected in &case.refused {
                    if !text.contains(expected.as_str()) {
                        failures.push(format!("{}: {expected:?} not in {text}", case.file));
                    }
                }
            }
            (Ok(_), false) => failures.push(format!("{}: the apiserver accepted it", case.file)),
            (Err(error), true) => failures.push(format!(
                "{}: refused, expected accepted: {error}",
                case.file
            )),
            (Ok(_), true) => {}
        }
    }
    for result in &results[cases.len()..] {
        if let Err(error) = result {
            failures.push(format!("a valid job was refused: {error}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    for case in cases.iter().filter(|c| !c.failed.is_empty()) {
        let name = case.manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let kind = case.manifest["kind"].as_str().unwrap_or_default();
        let api = dynamic_api(&client, &case.manifest, Some(&ns.name));
        let status = wait_state(&api, name, "Failed", Duration::from_secs(60)).await;
        let failed = condition(&status, "Failed");
        assert_eq!(
            failed["reason"],
            format!("{kind}InvalidSpec"),
            "{}: {status}",
            case.file
        );
        let message = failed["message"].as_str().unwrap_or_default();
        for expected in &case.failed {
            assert!(
                message.contains(expected.as_str()),
                "{}: {expected:?} not in {message}",
                case.file
            );
        }
        wait_event(&client, &ns.name, name, "Warning", "InvalidSpec").await;
        assert!(
            jobsets.get_opt(name).await.expect("get JobSet").is_none(),
            "{}: no JobSet for an invalid job",
            case.file
        );
    }
    for job in &valid {
        let name = job["metadata"]["name"].as_str().unwrap_or_default();
        let api = dynamic_api(&client, job, Some(&ns.name));
        wait_state(&api, name, "Succeeded", Duration::from_secs(120)).await;
    }
    assert_eq!(operator::pid(), Some(pid), "the operator never restarted");
    ns.delete().await;
}
