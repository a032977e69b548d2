//! How long compiling one training job into its JobSet takes (pure compile, no I/O).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use trainset::api::{PyTorchJob, TFJob};
use trainset::compile::Options;
use trainset::compile::v1::Compile;

fn container(name: &str) -> Value {
    json!({"name": name, "image": "registry.example/train:1.0", "command": ["python", "train.py"],
           "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}})
}

/// A Master and 7 Workers: 8 replicas.
fn pytorch_8() -> PyTorchJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "bench-pytorch", "namespace": "ml", "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container("pytorch")]}}},
            "Worker": {"replicas": 7, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container("pytorch")]}}}
        }}
    }))
    .expect("a valid PyTorchJob")
}

/// Two PS and 64 Workers: TF_CONFIG lists all 66 endpoints.
fn tf_64() -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "bench-tf", "namespace": "ml", "uid": "00000000-0000-0000-0000-000000000002"},
        "spec": {"tfReplicaSpecs": {
            "PS": {"replicas": 2, "template": {"spec": {"containers": [container("tensorflow")]}}},
            "Worker": {"replicas": 64, "restartPolicy": "ExitCode", "template": {"spec": {"containers": [container("tensorflow")]}}}
        }}
    }))
    .expect("a valid TFJob")
}

fn bench(c: &mut Criterion) {
    let options = Options::default();
    let pytorch = pytorch_8();
    c.bench_function("compile PyTorchJob, 8 replicas", |b| {
        b.iter(|| black_box(&pytorch).compile(&options).expect("compiles"))
    });
    let tf = tf_64();
    c.bench_function("compile TFJob, 64 workers + 2 PS", |b| {
        b.iter(|| black_box(&tf).compile(&options).expect("compiles"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
