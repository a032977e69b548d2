//! v1's per-pod labels (`deploy/pod-labels.yaml`, installed by `e2e/cluster up`) and pod logs
//! (`e2e/kubelet-logs.py`) on the real control plane, for every kind in both layouts.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset::compile::{JOB_NAME, JOB_ROLE, REPLICA_INDEX, REPLICA_TYPE};
use trainset_e2e::{
    TestNamespace, client, create, delay, http_get, install_crds, operator, wait_for,
};

/// One pod as v1 labels it: (replica type, replica-index, job-role).
type Marked = (String, Option<String>, Option<String>);

struct Case {
    manifest: Value,
    /// What v1 puts on each pod, by the rules in kubeflow-v1.md and mpi-operator's code.
    expected: BTreeSet<Marked>,
    /// Added to the index read from the pod's hostname (mpi-operator's workers count from 1
    /// when the launcher is a worker).
    worker_offset: u32,
}

fn marked(replica_type: &str, index: Option<u32>, role: Option<&str>) -> Marked {
    (
        replica_type.to_owned(),
        index.map(|i| i.to_string()),
        role.map(str::to_owned),
    )
}

fn case(kind: &str, name: &str, types: &[(&str, u32)], spec: Value, expected: &[Marked]) -> Case {
    let (api_version, field) = match kind {
        "MPIJob" => ("kubeflow.org/v2beta1", "mpiReplicaSpecs".to_owned()),
        "XGBoostJob" => ("kubeflow.org/v1", "xgbReplicaSpecs".to_owned()),
        "TFJob" => ("kubeflow.org/v1", "tfReplicaSpecs".to_owned()),
        other => (
            "kubeflow.org/v1",
            format!(
                "{}ReplicaSpecs",
                other.trim_end_matches("Job").to_lowercase()
            ),
        ),
    };
    let container = match kind {
        "TFJob" => "tensorflow",
        "PyTorchJob" => "pytorch",
        "XGBoostJob" => "xgboost",
        "PaddleJob" => "paddle",
        "JAXJob" => "jax",
        _ => "main",
    };
    let specs: serde_json::Map<String, Value> = types
        .iter()
        .map(|(t, n)| {
            let template = json!({"metadata": delay(60), "spec": {"containers": [{"name": container, "image": "busybox"}]}});
            ((*t).to_owned(), json!({"replicas": n, "template": template}))
        })
        .collect();
    let mut manifest = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": {field: specs}});
    if let (Some(target), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
        target.extend(extra.clone());
    }
    Case {
        manifest,
        expected: expected.iter().cloned().collect(),
        worker_offset: u32::from(spec["runLauncherAsWorker"] == true),
    }
}

/// `count` workers numbered from `first`, with `role` on the first one and `others` on the rest.
fn workers(first: u32, count: u32, role: Option<&str>, others: Option<&str>) -> Vec<Marked> {
    (first..first + count)
        .map(|i| marked("worker", Some(i), if i == first { role } else { others }))
        .collect()
}

fn cases() -> Vec<Case> {
    let m = Some("master");
    let w = Some("worker");
    vec![
        case(
            "TFJob",
            "tf-ps",
            &[("PS", 1), ("Worker", 2)],
            json!({}),
            &[vec![marked("ps", Some(0), None)], workers(0, 2, m, None)].concat(),
        ),
        case(
            "TFJob",
            "tf-chief",
            &[("Chief", 1), ("Worker", 2)],
            json!({}),
            &[vec![marked("chief", Some(0), m)], workers(0, 2, None, None)].concat(),
        ),
        // Rank-offset layout: each worker is its own Job.
        case(
            "PyTorchJob",
            "pt-master",
            &[("Master", 1), ("Worker", 2)],
            json!({}),
            &[
                vec![marked("master", Some(0), m)],
                workers(0, 2, None, None),
            ]
            .concat(),
        ),
        case(
            "PyTorchJob",
            "pt-workers",
            &[("Worker", 3)],
            json!({}),
            &workers(0, 3, m, None),
        ),
        case(
            "XGBoostJob",
            "xgb",
            &[("Master", 1), ("Worker", 2)],
            json!({}),
            &[
                vec![marked("master", Some(0), m)],
                workers(0, 2, None, None),
            ]
            .concat(),
        ),
        case(
            "PaddleJob",
            "paddle",
            &[("Worker", 2)],
            json!({}),
            &workers(0, 2, None, None),
        ),
        case(
            "JAXJob",
            "jax",
            &[("Worker", 2)],
            json!({}),
            &workers(0, 2, m, None),
        ),
        case(
            "MPIJob",
            "mpi",
            &[("Launcher", 1), ("Worker", 2)],
            json!({}),
            &[
                vec![marked("launcher", None, Some("launcher"))],
                workers(0, 2, w, w),
            ]
            .concat(),
        ),
        case(
            "MPIJob",
            "mpi-law",
            &[("Launcher", 1), ("Worker", 2)],
            json!({"runLauncherAsWorker": true}),
            &[
                vec![marked("launcher", Some(0), Some("launcher"))],
                workers(1, 2, w, w),
            ]
            .concat(),
        ),
    ]
}

fn label(pod: &Pod, key: &str) -> Option<String> {
    pod.labels().get(key).cloned()
}

/// The pod's index within its replica type, read from the hostname JobSet gave it:
/// `<job>-<type>-<job index>-<completion index>`, one of the two always 0.
fn hostname_index(pod: &Pod) -> u32 {
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_default();
    let mut numbers = host
        .rsplit('-')
        .map(|n| n.parse::<u32>().unwrap_or(u32::MAX));
    let completion = numbers.next().unwrap_or(u32::MAX);
    let job = numbers.next().unwrap_or(u32::MAX);
    assert!(
        completion == 0 || job == 0,
        "{}: hostname {host}",
        pod.name_any()
    );
    job + completion
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("{JOB_NAME}={job}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn every_pod_carries_v1_per_pod_labels_and_serves_a_log() {
    let client: Client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    let ns = TestNamespace::create(&client, "pod-labels").await;
    let cases = cases();
    for case in &cases {
        create(&client, &ns.name, &case.manifest).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    for case in &cases {
        let job = case.manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let found = wait_for(
            Duration::from_secs(90),
            &format!("the {} pods of {job}", case.expected.len()),
            || async {
                let list = pods_of(&pods, job).await;
                (list.len() == case.expected.len()).then_some(list)
            },
        )
        .await;
        let got: BTreeSet<Marked> = found
            .iter()
            .map(|p| {
                (
                    label(p, REPLICA_TYPE).unwrap_or_default(),
                    label(p, REPLICA_INDEX),
                    label(p, JOB_ROLE),
                )
            })
            .collect();
        assert_eq!(
            got, case.expected,
            "{job}: (replica type, index, job-role) per pod"
        );
        for pod in &found {
            if let Some(index) = label(pod, REPLICA_INDEX) {
                let offset = if label(pod, REPLICA_TYPE).as_deref() == Some("worker") {
                    case.worker_offset
                } else {
                    0
                };
                assert_eq!(
                    index,
                    (hostname_index(pod) + offset).to_string(),
                    "{}: the index label names the pod JobSet placed there",
                    pod.name_any()
                );
            }
        }
        // What `kubectl get pods -l ...` asks the apiserver.
        let selector = format!("{JOB_NAME}={job},{REPLICA_INDEX}=1,{REPLICA_TYPE}=worker");
        let selected = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("pods by selector");
        assert_eq!(selected.items.len(), 1, "{job}: {selector}");
    }

    // Every pod, every container: the log endpoint of its KWOK node answers.
    for pod in pods.list(&ListParams::default()).await.expect("pods").items {
        let name = pod.name_any();
        for container in pod.spec.iter().flat_map(|s| &s.containers) {
            let params = LogParams {
                container: Some(container.name.clone()),
                ..Default::default()
            };
            let log = pods
                .logs(&name, &params)
                .await
                .unwrap_or_else(|e| panic!("logs of {name}/{}: {e}", container.name));
            let replica_type = label(&pod, REPLICA_TYPE).unwrap_or_default();
            let index = label(&pod, REPLICA_INDEX).unwrap_or_else(|| "-".to_owned());
            let first = log.lines().next().unwrap_or_default();
            assert_eq!(
                first,
                format!(
                    "pod {}/{name} container {}: replica type {replica_type}, index {index}",
                    ns.name, container.name
                ),
                "log of {name}"
            );
        }
    }

    let (_, metrics) = http_get(&operator::metrics_address(), "/metrics")
        .await
        .expect("metrics");
    assert!(
        metrics.lines().any(|l| l == "trainset_pod_labels_policy 1"),
        "the operator found the policy at startup"
    );
    ns.delete().await;
}
