//! Trainer v2: a TrainJob and its runtime compiled into one JobSet, as Trainer v2.3.0 builds it,
//! its status, its name rule and the runtimes trainset ships. The helpers here build runtimes and
//! TrainJobs from JSON and read the compiled JobSet.

mod compile;
mod gang;
mod mpi;
mod names;
mod properties;
mod render;
mod runtimes;
mod status;
mod torchtune;

use serde_json::{Value, json};
use trainset::api::trainer::{TrainJob, TrainingRuntimeSpec};
use trainset::compile::Compiled;
use trainset::compile::trainer::{Runtime, RuntimeKind, compile_trainjob};

/// A torch runtime as Trainer's `torch-distributed` is shaped (written here): one `node`
/// replicated job, the trainer ancestor.
pub fn torch_runtime() -> Value {
    json!({
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"metadata": {"labels": {"runtime": "torch"}}, "spec": {"replicatedJobs": [{
            "name": "node",
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "node",
                    "image": "pytorch/pytorch:2",
                    "command": ["torchrun", "/workspace/train.py"],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "8Gi"}}
                }]}}}
            }
        }]}}
    })
}

pub fn with_policy(policy: Value) -> Value {
    let mut runtime = torch_runtime();
    runtime["mlPolicy"] = policy;
    runtime
}

pub fn trainjob(spec: Value) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "team", "uid": "u-1"},
        "spec": spec
    }))
    .expect("a TrainJob")
}

pub fn compile(runtime: Value, spec: Value) -> Result<Value, String> {
    compile_named(runtime, "torch-distributed", spec)
}

pub fn compile_named(runtime: Value, name: &str, spec: Value) -> Result<Value, String> {
    compile_all(runtime, name, spec)
        .map(|compiled| serde_json::to_value(compiled.jobset).expect("JSON"))
}

/// The JobSet and every object beside it.
pub fn compile_all(runtime: Value, name: &str, spec: Value) -> Result<Compiled, String> {
    let runtime: TrainingRuntimeSpec = serde_json::from_value(runtime).expect("a runtime");
    let job = trainjob(spec);
    let resolved = Runtime {
        kind: RuntimeKind::Cluster,
        name,
        spec: &runtime,
    };
    compile_trainjob(&job, &resolved, None).map_err(|e| e.to_string())
}

pub fn node(jobset: &Value) -> &Value {
    &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
}

pub fn env(container: &Value) -> Vec<(String, Value)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|var| {
            let value = if var["value"].is_null() {
                var["valueFrom"].clone()
            } else {
                var["value"].clone()
            };
            (var["name"].as_str().unwrap_or_default().to_owned(), value)
        })
        .collect()
}

pub fn env_value(container: &Value, name: &str) -> Value {
    env(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or(Value::Null)
}
