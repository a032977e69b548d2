//! Compilation rules that the example snapshots do not show: Kueue, priority, suspend, owner
//! references, user metadata, restart-policy mapping.

use serde_json::{Value, json};
use trainset::api::PyTorchJob;
use trainset::compile::Options;
use trainset::kinds::compile_manifest;

use crate::support::Job;

fn compile(manifest: Value) -> Value {
    let compiled = compile_manifest(manifest, &Options::default()).expect("compiles");
    serde_json::to_value(&compiled.jobset).expect("JSON")
}

fn pytorch(metadata: Value, run_policy: Value, template: Value) -> Value {
    Job::of::<PyTorchJob>("job")
        .metadata(metadata)
        .spec(json!({"runPolicy": run_policy}))
        .template(template)
        .master(1)
        .workers(2)
        .replica_field("Worker", "restartPolicy", json!("ExitCode"))
        .build()
}

fn template() -> Value {
    json!({"metadata": {"labels": {"team": "vision"}, "annotations": {"sidecar.istio.io/inject": "false"}},
           "spec": {"containers": [{"name": "pytorch", "image": "p"}, {"name": "logger", "image": "l"}]}})
}

#[test]
fn a_queued_job_passes_its_kueue_labels_and_is_created_suspended() {
    let metadata = json!({"name": "queued", "labels": {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high", "other": "x"}});
    let jobset = compile(pytorch(metadata, json!({}), template()));
    assert_eq!(jobset["spec"]["suspend"], true);
    let labels = &jobset["metadata"]["labels"];
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "team-a");
    assert_eq!(labels["kueue.x-k8s.io/priority-class"], "high");
    assert!(
        labels["other"].is_null(),
        "only Kueue's labels are passed to the JobSet"
    );
}

#[test]
fn suspend_follows_the_run_policy() {
    let jobset = compile(pytorch(
        json!({"name": "held"}),
        json!({"suspend": true}),
        template(),
    ));
    assert_eq!(jobset["spec"]["suspend"], true);
    let jobset = compile(pytorch(json!({"name": "free"}), json!({}), template()));
    assert_eq!(jobset["spec"]["suspend"], false);
}

#[test]
fn the_priority_class_reaches_every_pod_unless_the_template_sets_one() {
    let policy = json!({"schedulingPolicy": {"priorityClass": "urgent"}});
    let jobset = compile(pytorch(json!({"name": "prio"}), policy.clone(), template()));
    for rjob in jobset["spec"]["replicatedJobs"].as_array().expect("jobs") {
        assert_eq!(
            rjob["template"]["spec"]["template"]["spec"]["priorityClassName"],
            "urgent"
        );
    }
    let mut own = template();
    own["spec"]["priorityClassName"] = json!("mine");
    let jobset = compile(pytorch(json!({"name": "prio"}), policy, own));
    assert_eq!(
        jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["priorityClassName"],
        "mine"
    );
}

#[test]
fn user_pod_metadata_is_kept_and_env_reaches_every_container() {
    let jobset = compile(pytorch(json!({"name": "meta"}), json!({}), template()));
    let pod = &jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["team"], "vision");
    assert_eq!(
        pod["metadata"]["annotations"]["sidecar.istio.io/inject"],
        "false"
    );
    for container in pod["spec"]["containers"].as_array().expect("containers") {
        let names: Vec<&str> = container["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(
            names.contains(&"RANK") && names.contains(&"MASTER_ADDR"),
            "{names:?}"
        );
    }
}

#[test]
fn restart_policies_map_to_pods_and_jobs() {
    let jobset = compile(pytorch(
        json!({"name": "policies"}),
        json!({"backoffLimit": 4}),
        template(),
    ));
    let master = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(
        master["template"]["spec"]["restartPolicy"], "OnFailure",
        "PyTorch defaults to OnFailure"
    );
    assert_eq!(master["backoffLimit"], 4);
    assert!(master["podFailurePolicy"].is_null());
    let worker = &jobset["spec"]["replicatedJobs"][1]["template"]["spec"];
    assert_eq!(worker["template"]["spec"]["restartPolicy"], "Never");
    let rules = worker["podFailurePolicy"]["rules"]
        .as_array()
        .expect("rules");
    assert_eq!(
        rules[0],
        json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    );
    assert_eq!(rules[1]["onExitCodes"]["containerName"], "pytorch");
    let codes: Vec<i64> = rules[1]["onExitCodes"]["values"]
        .as_array()
        .expect("codes")
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    assert_eq!(codes, (1..=127).collect::<Vec<i64>>());
}

#[test]
fn a_job_with_a_uid_owns_its_jobset() {
    let metadata = json!({"name": "owned", "namespace": "ml", "uid": "1234-5678"});
    let jobset = compile(pytorch(metadata, json!({}), template()));
    assert_eq!(jobset["metadata"]["namespace"], "ml");
    assert_eq!(
        jobset["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "owned", "uid": "1234-5678", "controller": true, "blockOwnerDeletion": true}])
    );
}

#[test]
fn a_custom_cluster_domain_ends_every_tf_config_endpoint() {
    let manifest = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {"tfReplicaSpecs": {
            "PS": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "t"}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "t"}]}}}
        }}
    });
    let tf_config = |options: &Options<'_>| {
        let compiled = compile_manifest(manifest.clone(), options).expect("compiles");
        let jobset = serde_json::to_value(&compiled.jobset).expect("JSON");
        let env = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
            [0]["env"];
        env.as_array()
            .and_then(|vars| vars.iter().find(|v| v["name"] == "TF_CONFIG"))
            .and_then(|v| v["value"].as_str())
            .expect("TF_CONFIG")
            .to_owned()
    };
    let plain = tf_config(&Options::default());
    assert!(
        plain.contains(r#""ps":["mnist-ps-0-0.mnist.ml.svc:2222"]"#),
        "{plain}"
    );
    let custom = tf_config(&Options {
        cluster_domain: Some("cluster.example"),
        ..Options::default()
    });
    assert!(
        custom.contains(r#""ps":["mnist-ps-0-0.mnist.ml.svc.cluster.example:2222"]"#),
        "{custom}"
    );
    assert_eq!(
        custom.matches(".svc.cluster.example:2222").count(),
        3,
        "every endpoint: {custom}"
    );
}
