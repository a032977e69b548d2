//! The runtimes trainset ships (`deploy/runtimes/`).

/// The runtimes trainset ships (`deploy/runtimes/`): what the Kubeflow SDK requires of a runtime
/// (the framework label, an ML policy, a trainer `node` container with an image), and an
/// SDK-shaped TrainJob renders against each.
#[test]
fn every_shipped_runtime_is_what_the_sdk_expects_and_renders() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/runtimes");
    let kustomization: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(format!("{dir}/kustomization.yaml")).expect("kustomization"),
    )
    .expect("kustomization YAML");
    let listed: Vec<&str> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).expect("deploy/runtimes") {
        let path = entry.expect("entry").path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .expect("file name");
        if file == "kustomization.yaml" {
            continue;
        }
        assert!(listed.contains(&file), "{file} is not in the kustomization");
        let text = std::fs::read_to_string(&path).expect("runtime");
        for document in serde_norway::Deserializer::from_str(&text) {
            let value = <serde_json::Value as serde::Deserialize>::deserialize(document)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            if value["kind"] == "ClusterTrainingRuntime" {
                names.push(check_shipped_runtime(value, &text));
            }
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "deepspeed-distributed",
            "jax-distributed",
            "mlx-distributed",
            "torch-distributed",
            "torchtune-llama3.2-1b",
            "torchtune-llama3.2-3b",
            "torchtune-qwen2.5-1.5b",
            "xgboost-distributed"
        ]
    );
}

/// One shipped runtime: what the SDK requires of it, and the TrainJob the SDK's `train()` makes
/// for it (a `CustomTrainer` on two nodes; torchtune's `BuiltinTrainer` on one) renders.
fn check_shipped_runtime(value: serde_json::Value, text: &str) -> String {
    use trainset::api::trainer::ClusterTrainingRuntime;
    use trainset::render::{Format, Operator, render};
    let runtime: ClusterTrainingRuntime =
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
    let name = runtime.metadata.name.clone().expect("name");
    let labels = runtime.metadata.labels.clone().unwrap_or_default();
    assert!(
        labels.contains_key("trainer.kubeflow.org/framework"),
        "{name}"
    );
    let spec = &runtime.spec.runtime;
    assert!(spec.ml_policy.is_some(), "{name}");
    let jobs = &spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .expect("spec")
        .replicated_jobs;
    let trainer = jobs
        .iter()
        .find(|job| {
            job.template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref())
                .is_some_and(|l| {
                    l.get("trainer.kubeflow.org/trainjob-ancestor-step")
                        .map(String::as_str)
                        == Some("trainer")
                })
        })
        .unwrap_or_else(|| panic!("{name}: no trainer replicated job"));
    let pod = trainer
        .template
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod");
    assert!(
        pod.containers
            .iter()
            .any(|c| c.name == "node" && c.image.is_some()),
        "{name}: no node container with an image"
    );
    let torchtune = labels
        .get("trainer.kubeflow.org/framework")
        .map(String::as_str)
        == Some("torchtune");
    let trainer = if torchtune {
        "{command: [tune, run], args: [epochs=1], resourcesPerNode: {limits: {nvidia.com/gpu: '2'}}}"
    } else {
        "{numNodes: 2, command: [bash, -c, run], resourcesPerNode: {requests: {cpu: '2'}, limits: {cpu: '2'}}}"
    };
    let job = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: sdk}}\nspec:\n  runtimeRef: {{name: {name}, kind: ClusterTrainingRuntime}}\n  trainer: {trainer}\n"
    );
    let rendered = render(&job, text, "default", &Operator::default(), Format::Json)
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let objects: serde_json::Value = serde_json::from_str(&rendered).expect("a List");
    let items = objects["items"].as_array().expect("items");
    let jobs = items[0]["spec"]["replicatedJobs"]
        .as_array()
        .expect("replicated jobs");
    let pods: i64 = jobs
        .iter()
        .map(|r| r["template"]["spec"]["parallelism"].as_i64().unwrap_or(1))
        .sum();
    if torchtune {
        // The two initializers and one node, which runs a distributed recipe on its two GPUs.
        assert_eq!(pods, 3, "{name}: {rendered}");
        let node = jobs.iter().find(|r| r["name"] == "node").expect("node");
        let command = &node["template"]["spec"]["template"]["spec"]["containers"][0]["command"];
        assert_eq!(
            command[2], "--rdzv_endpoint=sdk-node-0-0.sdk:29500",
            "{name}"
        );
        assert_eq!(command[3], "full_finetune_distributed", "{name}");
    } else {
        // Two nodes: one pod each, whether all are the trainer's or a launcher leads them.
        assert_eq!(pods, 2, "{name}: {rendered}");
    }
    let kinds: Vec<&str> = items.iter().filter_map(|o| o["kind"].as_str()).collect();
    let mpi = spec.ml_policy.as_ref().is_some_and(|m| m.mpi.is_some());
    let expected: &[&str] = if mpi {
        &["JobSet", "ConfigMap", "Secret"]
    } else {
        &["JobSet"]
    };
    assert_eq!(kinds, expected, "{name}");
    name
}
