//! MPI runtimes: the launcher, the node count, slots, the hostfile and the SSH Secret.

use serde_json::{Value, json};
use trainset::api::trainer::TrainingRuntimeSpec;
use trainset::compile::trainer::{Runtime, RuntimeKind, compile_trainjob};

use super::*;

/// The shipped `deepspeed-distributed` runtime (OpenMPI, the launcher a node too).
fn deepspeed_runtime() -> TrainingRuntimeSpec {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/runtimes/deepspeed-distributed.yaml"
    ))
    .expect("deploy/runtimes/deepspeed-distributed.yaml");
    let runtime: trainset::api::trainer::ClusterTrainingRuntime =
        serde_norway::from_str(&text).expect("a runtime");
    runtime.spec.runtime
}

fn compile_mpi(spec: Value) -> Result<trainset::compile::Compiled, String> {
    let runtime = deepspeed_runtime();
    let resolved = Runtime {
        kind: RuntimeKind::Cluster,
        name: "deepspeed-distributed",
        spec: &runtime,
    };
    let key = trainset::compile::SshKeyPair {
        private_key: "PRIVATE KEY".to_owned(),
        public_key: "ecdsa-sha2-nistp521 PUBLIC".to_owned(),
    };
    compile_trainjob(&trainjob(spec), &resolved, Some(&key)).map_err(|e| e.to_string())
}

#[test]
fn an_sdk_trainjob_on_an_mpi_runtime() {
    let compiled = compile_mpi(json!({
        "runtimeRef": {"name": "deepspeed-distributed"},
        "trainer": {
            "numNodes": 3,
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}},
            "command": ["mpirun", "--hostfile", "/etc/mpi/hostfile", "bash", "-c", "python train.py"],
            "env": [{"name": "EPOCHS", "value": "3"}]
        }
    }))
    .expect("compiles");
    let objects = compiled.objects().expect("JSON");
    let yaml = serde_norway::to_string(&objects).expect("YAML");
    insta::assert_snapshot!(yaml);
}

#[test]
fn mpi_counts_slots_and_the_hostfile() {
    let compiled = compile_mpi(json!({"runtimeRef": {"name": "deepspeed-distributed"},
                                      "trainer": {"numNodes": 3}}))
    .expect("compiles");
    let jobset = serde_json::to_value(&compiled.jobset).expect("JSON");
    let counts: Vec<(&str, i64)> = jobset["spec"]["replicatedJobs"]
        .as_array()
        .expect("replicated jobs")
        .iter()
        .map(|r| {
            let name = r["name"].as_str().unwrap_or_default();
            (
                name,
                r["template"]["spec"]["parallelism"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    // The launcher is a node: three nodes are two `node` pods and the launcher.
    assert_eq!(counts, [("node", 2), ("launcher", 1)]);
    let hostfile = compiled.config_map.expect("hostfile");
    assert_eq!(hostfile.metadata.name.as_deref(), Some("tj-mpi-hostfile"));
    assert_eq!(
        hostfile.data.unwrap_or_default()["hostfile"],
        "tj-node-0-0.tj slots=1\ntj-node-0-1.tj slots=1\ntj-launcher-0-0.tj slots=1\n"
    );
    let secret = compiled.secret.expect("SSH Secret");
    assert_eq!(secret.metadata.name.as_deref(), Some("tj-mpi-ssh-auth"));
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    assert_eq!(secret.immutable, Some(true));

    // numProcPerNode wins; without it, a node's GPUs (merged resources) when the runtime says 1.
    let slots = |trainer: Value| {
        let compiled = compile_mpi(json!({"runtimeRef": {"name": "d"}, "trainer": trainer}))
            .expect("compiles");
        let launcher = serde_json::to_value(&compiled.jobset).expect("JSON")["spec"]
            ["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]
            .clone();
        env_value(&launcher, "OMPI_MCA_orte_set_default_slots")
    };
    assert_eq!(slots(json!({"numProcPerNode": 3})), "3");
    assert_eq!(
        slots(json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}})),
        "4"
    );
    assert_eq!(
        slots(json!({"resourcesPerNode": {"limits": {"cpu": "4"}}})),
        "1"
    );
    // The OpenMPI variables are the policy's.
    assert_eq!(
        compile_mpi(json!({"runtimeRef": {"name": "d"}, "trainer": {"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "x"}]}})).err(),
        Some("spec.trainer.env[0].name: OMPI_MCA_plm_rsh_args is set by the runtime's ML policy".to_owned())
    );
    // The hostfile is bounded: a TrainJob asking for more nodes than it may list is refused
    // before anything is built in proportion to it.
    assert_eq!(
        compile_mpi(json!({"runtimeRef": {"name": "d"}, "trainer": {"numNodes": i32::MAX}})).err(),
        Some("spec.trainer.numNodes: the MPI hostfile may list at most 20000 pods".to_owned())
    );
    // No key given (the Secret exists): no Secret.
    let runtime = deepspeed_runtime();
    let resolved = Runtime {
        kind: RuntimeKind::Cluster,
        name: "d",
        spec: &runtime,
    };
    let without_key = compile_trainjob(
        &trainjob(json!({"runtimeRef": {"name": "d"}})),
        &resolved,
        None,
    )
    .expect("compiles");
    assert!(without_key.secret.is_none() && without_key.config_map.is_some());
}
