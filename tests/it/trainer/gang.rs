//! TrainJobs whose runtime asks for a gang (`podGroupPolicy`): the PodGroup made beside the
//! JobSet, as Trainer v2.3.0's coscheduling and volcano plugins make it, and what each pod
//! carries to join it.

use serde_json::{Value, json};

use super::{compile_all, torch_runtime};
use crate::support::gang_yaml;

/// The torch runtime with `podGroupPolicy`, its node asking for 2 CPUs and a GPU.
fn torch_with(pod_group_policy: Value) -> Value {
    let mut runtime = torch_runtime();
    runtime["podGroupPolicy"] = pod_group_policy;
    let node = &mut runtime["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        ["spec"];
    node["containers"][0]["resources"] =
        json!({"requests": {"cpu": "2", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    node["priorityClassName"] = json!("training");
    runtime
}

/// A runtime shaped like Trainer's torchtune ones: two initializers the trainer's node waits for.
fn initializers_then_node() -> Value {
    let step = |name: &str, step: &str, depends: Value| {
        json!({
            "name": name,
            "dependsOn": depends,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
                "spec": {"template": {"spec": {"containers": [{
                    "name": name, "image": "init:1",
                    "resources": {"requests": {"cpu": "1"}}
                }]}}}
            }
        })
    };
    let mut node = step(
        "node",
        "trainer",
        json!([
            {"name": "dataset-initializer", "status": "Complete"},
            {"name": "model-initializer", "status": "Complete"}
        ]),
    );
    node["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = json!("node");
    json!({
        "mlPolicy": {"numNodes": 2, "torch": {}},
        "podGroupPolicy": {"coscheduling": {}},
        "template": {"spec": {"replicatedJobs": [
            step("dataset-initializer", "dataset-initializer", json!([])),
            step("model-initializer", "model-initializer", json!([])),
            node
        ]}}
    })
}

/// `spec` with the runtime it names.
fn on_runtime(mut spec: Value) -> Value {
    spec["runtimeRef"] = json!({"name": "torch-distributed"});
    spec
}

fn gang_of(runtime: Value, spec: Value) -> String {
    let compiled = compile_all(runtime, "torch-distributed", on_runtime(spec))
        .unwrap_or_else(|e| panic!("compiles: {e}"));
    gang_yaml(&compiled)
}

#[test]
fn coscheduling_pod_group_counts_every_node_and_labels_the_pods() {
    let runtime = torch_with(json!({"coscheduling": {"scheduleTimeoutSeconds": 120}}));
    insta::assert_snapshot!(gang_of(runtime, json!({"trainer": {"numNodes": 3}})));
}

#[test]
fn coscheduling_timeout_defaults_to_a_minute() {
    let runtime = torch_with(json!({"coscheduling": {}}));
    let compiled = compile_all(runtime, "torch-distributed", on_runtime(json!({})))
        .unwrap_or_else(|e| panic!("compiles: {e}"));
    assert_eq!(compiled.gang[0].data["spec"]["scheduleTimeoutSeconds"], 60);
}

#[test]
fn volcano_pod_group_takes_queue_priority_and_topology_from_the_runtime() {
    let mut runtime = torch_with(
        json!({"volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": 2}}}),
    );
    runtime["template"]["metadata"]["annotations"] =
        json!({"scheduling.volcano.sh/queue-name": "research"});
    insta::assert_snapshot!(gang_of(runtime, json!({"trainer": {"numNodes": 2}})));
}

#[test]
fn ordered_replicated_jobs_gang_the_trainer_nodes_alone() {
    insta::assert_snapshot!(gang_of(initializers_then_node(), json!({})));
}

#[test]
fn a_gang_that_cannot_be_made_is_refused_naming_the_field() {
    let both = torch_with(json!({"coscheduling": {}, "volcano": {}}));
    let mut empty_queue = torch_with(json!({"volcano": {}}));
    empty_queue["template"]["metadata"]["annotations"] =
        json!({"scheduling.volcano.sh/queue-name": ""});
    // Ordered replicated jobs and no trainer step among them: no gang could ever be complete.
    let mut no_trainer = initializers_then_node();
    no_trainer["template"]["spec"]["replicatedJobs"][2]["template"]["metadata"]["labels"] =
        json!({});
    for (runtime, says) in [
        (both, "coscheduling and volcano"),
        (empty_queue, "queue name must not be empty"),
        (no_trainer, "none is the trainer's"),
    ] {
        let error = compile_all(runtime, "torch-distributed", on_runtime(json!({}))).map(|_| ());
        assert!(
            matches!(&error, Err(m) if m.starts_with("spec.runtimeRef") && m.contains(says)),
            "{error:?}"
        );
    }
}
