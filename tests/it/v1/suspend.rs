//! Who suspends and resumes a JobSet, and what a resume carries over from the training job.

use crate::support as common;
use jobset_types::JobSet;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::compile_with_test_key;
use trainset::suspend::{Control, change, resume_patch};

fn compile(manifest: &Value) -> JobSet {
    compile_with_test_key(manifest, Some("ns"))
        .expect("compiles")
        .jobset
}

fn mpijob(launcher_template_metadata: Value, worker_pod_spec_extra: Value) -> Value {
    let mut worker_spec = json!({"containers": [{"name": "mpi", "image": "m"}]});
    if let (Some(spec), Some(extra)) = (
        worker_spec.as_object_mut(),
        worker_pod_spec_extra.as_object(),
    ) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"runPolicy": {"suspend": true}, "mpiReplicaSpecs": {
            "Launcher": {"template": {"metadata": launcher_template_metadata,
                                      "spec": {"containers": [{"name": "mpi", "image": "m"}]}}},
            "Worker": {"replicas": 2, "template": {"spec": worker_spec}}
        }}
    })
}

/// Applies an RFC 6902 patch as the apiserver would.
fn apply(jobset: &JobSet, patch: &json_patch::Patch) -> Value {
    let mut document = serde_json::to_value(jobset).expect("JSON");
    json_patch::patch(&mut document, patch).expect("the patch applies");
    document
}

fn pod(jobset: &Value, replicated_job: usize) -> &Value {
    &jobset["spec"]["replicatedJobs"][replicated_job]["template"]["spec"]["template"]
}

#[test]
fn trainset_mirrors_suspend_unless_kueue_queues_the_jobset() {
    // Not queued: trainset follows runPolicy.suspend both ways.
    let own = Control::of(false, false);
    assert_eq!(own, Control::Trainset);
    assert_eq!(change(true, false, own), Some(true));
    assert_eq!(change(false, true, own), Some(false));
    assert_eq!(change(true, true, own), None);
    // Queued, and Kueue's Workload belongs to the training job (Kueue's mpijob integration):
    // Kueue toggles runPolicy.suspend, trainset carries it to the JobSet both ways.
    let job_queued = Control::of(true, true);
    assert_eq!(job_queued, Control::Trainset);
    assert_eq!(change(false, true, job_queued), Some(false));
    assert_eq!(change(true, false, job_queued), Some(true));
    // Queued through the JobSet's own Workload: Kueue unsuspends what it admitted and would
    // undo any change, so trainset changes nothing after creation.
    let jobset_queued = Control::of(true, false);
    assert_eq!(jobset_queued, Control::Kueue);
    assert_eq!(change(false, true, jobset_queued), None);
    assert_eq!(change(true, false, jobset_queued), None);
}

#[test]
fn a_resume_carries_kueues_scheduling_edits_and_nothing_else() {
    let before = mpijob(json!({}), json!({}));
    let mut live = compile(&before);
    live.spec.suspend = Some(true);
    // What Kueue's admission writes into the training job: suspend false, and per pod set the
    // flavor's node labels and tolerations plus its podset label.
    let mut admitted = mpijob(
        json!({"labels": {"kueue.x-k8s.io/podset": "launcher"}}),
        json!({"nodeSelector": {"pool": "gpu"},
               "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    admitted["spec"]["runPolicy"]["suspend"] = json!(false);
    let compiled = compile(&admitted);
    let patch = resume_patch(&live, &compiled);
    let resumed = apply(&live, &patch);
    let wanted = serde_json::to_value(&compiled).expect("JSON");

    assert_eq!(resumed["spec"]["suspend"], false);
    for index in 0..2 {
        for (part, field) in [
            ("metadata", "labels"),
            ("metadata", "annotations"),
            ("spec", "nodeSelector"),
            ("spec", "tolerations"),
            ("spec", "schedulingGates"),
        ] {
            assert_eq!(
                pod(&resumed, index)[part][field],
                pod(&wanted, index)[part][field],
                "replicated job {index} {part}.{field}"
            );
        }
    }
    assert_eq!(
        pod(&resumed, 0)["metadata"]["labels"]["kueue.x-k8s.io/podset"],
        "launcher"
    );
    assert_eq!(pod(&resumed, 1)["spec"]["nodeSelector"]["pool"], "gpu");
    // Everything else of the JobSet stays as it was: JobSet refuses other changes.
    let mut rest = resumed.clone();
    let mut original = serde_json::to_value(&live).expect("JSON");
    for document in [&mut rest, &mut original] {
        document["spec"]["suspend"] = Value::Null;
        for index in 0..2 {
            let pod =
                &mut document["spec"]["replicatedJobs"][index]["template"]["spec"]["template"];
            pod["metadata"]["labels"] = Value::Null;
            pod["spec"]["nodeSelector"] = Value::Null;
            pod["spec"]["tolerations"] = Value::Null;
        }
    }
    assert_eq!(rest, original);
    // Only the fields that differ are sent, then the resume.
    let ops = serde_json::to_value(&patch).expect("JSON");
    let paths: Vec<&str> = ops
        .as_array()
        .expect("ops")
        .iter()
        .filter_map(|op| op["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/spec/replicatedJobs/0/template/spec/template/metadata/labels",
            "/spec/replicatedJobs/1/template/spec/template/spec/nodeSelector",
            "/spec/replicatedJobs/1/template/spec/template/spec/tolerations",
            "/spec/suspend",
        ]
    );
}

#[test]
fn a_resume_removes_what_the_job_no_longer_has_and_adds_a_missing_metadata() {
    // Kueue restores the templates on eviction; a later resume without its edits drops them.
    let evicted = mpijob(json!({}), json!({}));
    let mut live = compile(&mpijob(json!({}), json!({"nodeSelector": {"pool": "gpu"}})));
    live.spec.suspend = Some(true);
    // A live template without metadata (written by something other than trainset).
    if let Some(spec) = live.spec.replicated_jobs[0].template.spec.as_mut() {
        spec.template.metadata = None;
    }
    let compiled = compile(&evicted);
    let resumed = apply(&live, &resume_patch(&live, &compiled));
    let wanted = serde_json::to_value(&compiled).expect("JSON");
    assert!(pod(&resumed, 1)["spec"]["nodeSelector"].is_null());
    assert_eq!(pod(&resumed, 0)["metadata"], pod(&wanted, 0)["metadata"]);
    assert_eq!(resumed["spec"]["suspend"], false);
}

#[test]
fn resuming_an_unchanged_job_sends_only_the_resume() {
    let manifest = mpijob(json!({}), json!({}));
    let mut live = compile(&manifest);
    live.spec.suspend = Some(true);
    assert_eq!(
        serde_json::to_value(resume_patch(&live, &compile(&manifest))).expect("JSON"),
        json!([{"op": "add", "path": "/spec/suspend", "value": false}])
    );
}
