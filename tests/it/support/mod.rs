//! Shared by the compiler's tests: a fixed SSH key and compiling with it.

use serde_json::{Value, json};
use trainset::compile::gang::GangScheduler;
use trainset::compile::{CompileError, Compiled, Options, SshKeyPair};
use trainset::kinds::compile_manifest;

/// A fixed key so compiled MPIJobs are stable; real runs generate one.
pub fn test_key() -> SshKeyPair {
    SshKeyPair {
        private_key: "test-private-key\n".into(),
        public_key: "ecdsa-sha2-nistp521 test-public-key".into(),
    }
}

/// Compiles with [`test_key`], `namespace` for jobs that name none, and no cluster domain.
pub fn compile_with_test_key(
    manifest: &serde_json::Value,
    namespace: Option<&str>,
) -> Result<Compiled, CompileError> {
    compile_with_gang(manifest, namespace, None)
}

/// Compiles `manifest` with v1 jobs placed by `gang_scheduler`.
pub fn compile_with_gang(
    manifest: &serde_json::Value,
    namespace: Option<&str>,
    gang_scheduler: Option<&GangScheduler>,
) -> Result<Compiled, CompileError> {
    let key = test_key();
    let options = Options {
        default_namespace: namespace,
        ssh_key: Some(&key),
        gang_scheduler,
        ..Default::default()
    };
    compile_manifest(manifest.clone(), &options)
}

/// A compiled job's gang objects, then per replicated job: its pod template's scheduler, group
/// label, annotations, scheduling group, and the replicated jobs it waits for (YAML documents).
pub fn gang_yaml(compiled: &Compiled) -> String {
    let pods: Vec<Value> = compiled
        .jobset
        .spec
        .replicated_jobs
        .iter()
        .map(|rj| {
            let pod = rj.template.spec.as_ref().map(|s| &s.template);
            let meta = pod.and_then(|p| p.metadata.as_ref());
            let spec = pod.and_then(|p| p.spec.as_ref());
            json!({
                "replicatedJob": rj.name,
                "schedulerName": spec.and_then(|s| s.scheduler_name.clone()),
                "groupLabel": meta.and_then(|m| m.labels.as_ref()).and_then(|l| l.get("scheduling.x-k8s.io/pod-group")),
                "annotations": meta.and_then(|m| m.annotations.clone()),
                "schedulingGroup": spec.and_then(|s| s.scheduling_group.clone()),
                "dependsOn": rj.depends_on.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut documents: Vec<Value> = compiled
        .gang
        .iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect();
    documents.push(json!({"pods": pods}));
    documents
        .iter()
        .map(|d| serde_norway::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

mod job;
pub use job::Job;
