//! A TrainJob and its runtime compiled into one JobSet, as Trainer v2.3.0 builds it
//! the whole JobSet of an SDK-shaped job on a torch
//! runtime as a snapshot, and each rule on its own.

use serde_json::{Value, json};
use trainset::api::trainer::{TrainJob, TrainingRuntimeSpec};
use trainset::compile::trainer::{Runtime, RuntimeKind, compile_trainjob};

/// A torch runtime as Trainer's `torch-distributed` is shaped (written here): one `node`
/// replicated job, the trainer ancestor.
fn torch_runtime() -> Value {
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

fn with_policy(policy: Value) -> Value {
    let mut runtime = torch_runtime();
    runtime["mlPolicy"] = policy;
    runtime
}

fn trainjob(spec: Value) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "team", "uid": "u-1"},
        "spec": spec
    }))
    .expect("a TrainJob")
}

fn compile(runtime: Value, spec: Value) -> Result<Value, String> {
    compile_named(runtime, "torch-distributed", spec)
}

fn compile_named(runtime: Value, name: &str, spec: Value) -> Result<Value, String> {
    let runtime: TrainingRuntimeSpec = serde_json::from_value(runtime).expect("a runtime");
    let job = trainjob(spec);
    let resolved = Runtime {
        kind: RuntimeKind::Cluster,
        name,
        spec: &runtime,
    };
    compile_trainjob(&job, &resolved, None)
        .map(|compiled| serde_json::to_value(compiled.jobset).expect("JSON"))
        .map_err(|e| e.to_string())
}

fn node(jobset: &Value) -> &Value {
    &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
}

fn env(container: &Value) -> Vec<(String, Value)> {
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

fn env_value(container: &Value, name: &str) -> Value {
    env(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or(Value::Null)
}

#[test]
fn an_sdk_trainjob_on_a_torch_runtime() {
    let jobset = compile(
        torch_runtime(),
        json!({
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "4"}, "limits": {"memory": "16Gi"}},
                "command": ["bash", "-c", "torchrun train.py"],
                "env": [{"name": "EPOCHS", "value": "3"}]
            },
            "runtimePatches": [{
                "manager": "trainer.kubeflow.org/kubeflow-sdk",
                "trainingRuntimeSpec": {"template": {
                    "metadata": {"labels": {"tier": "gold"}},
                    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                        "nodeSelector": {"pool": "a100"},
                        "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                        "volumes": [{"name": "data", "emptyDir": {}}]
                    }}}}}]}
                }}
            }],
            "suspend": false
        }),
    )
    .expect("compiles");
    let yaml = serde_norway::to_string(&jobset).expect("YAML");
    insta::assert_snapshot!(yaml);
}

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

#[test]
fn torch_env_node_count_and_port() {
    let jobset = compile(
        torch_runtime(),
        json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 3}}),
    )
    .expect("compiles");
    let job = &jobset["spec"]["replicatedJobs"][0];
    assert_eq!(job["replicas"], 1);
    assert_eq!(job["template"]["spec"]["parallelism"], 3);
    assert_eq!(job["template"]["spec"]["completions"], 3);
    let node = node(&jobset);
    assert_eq!(env_value(node, "PET_NNODES"), "3");
    assert_eq!(env_value(node, "PET_NPROC_PER_NODE"), "auto");
    assert_eq!(env_value(node, "PET_MASTER_ADDR"), "tj-node-0-0.tj");
    assert_eq!(env_value(node, "PET_MASTER_PORT"), "29500");
    assert_eq!(
        env_value(node, "PET_NODE_RANK")["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    assert_eq!(node["ports"], json!([{"containerPort": 29500}]));
    // The runtime's own variable stays first; injected ones follow.
    assert_eq!(env(node)[0].0, "LOG_LEVEL");
}

#[test]
fn without_a_trainer_section_no_torch_env_and_the_policy_node_count() {
    let jobset = compile(
        with_policy(json!({"numNodes": 2, "torch": {}})),
        json!({"runtimeRef": {"name": "torch-distributed"}}),
    )
    .expect("compiles");
    assert_eq!(
        jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"],
        2
    );
    assert!(env_value(node(&jobset), "PET_NNODES").is_null());
}

#[test]
fn processes_per_node_come_from_the_merged_resources() {
    // Raising memory alone on a 4-GPU runtime keeps `auto` (Trainer v2.3.0 would say 1, #3974).
    let gpu = compile(
        torch_runtime(),
        json!({"runtimeRef": {"name": "t"}, "trainer": {"resourcesPerNode": {"limits": {"memory": "32Gi"}}}}),
    )
    .expect("compiles");
    assert_eq!(env_value(node(&gpu), "PET_NPROC_PER_NODE"), "auto");
    assert_eq!(
        node(&gpu)["resources"]["limits"],
        json!({"memory": "32Gi", "nvidia.com/gpu": "4"})
    );

    let mut cpu_runtime = torch_runtime();
    cpu_runtime["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["resources"] = json!({"requests": {"cpu": "1500m"}});
    let cpu = compile(
        cpu_runtime.clone(),
        json!({"runtimeRef": {"name": "t"}, "trainer": {}}),
    )
    .expect("compiles");
    assert_eq!(env_value(node(&cpu), "PET_NPROC_PER_NODE"), "2");

    let explicit = compile(
        cpu_runtime,
        json!({"runtimeRef": {"name": "t"}, "trainer": {"numProcPerNode": 6}}),
    )
    .expect("compiles");
    assert_eq!(env_value(node(&explicit), "PET_NPROC_PER_NODE"), "6");
}

#[test]
fn jax_and_xgboost_env() {
    let jax = compile(
        with_policy(json!({"jax": {}})),
        json!({"runtimeRef": {"name": "j"}, "trainer": {"numNodes": 2}}),
    )
    .expect("compiles");
    assert_eq!(env_value(node(&jax), "JAX_NUM_PROCESSES"), "2");
    assert_eq!(
        env_value(node(&jax), "JAX_COORDINATOR_ADDRESS"),
        "tj-node-0-0.tj:29500"
    );

    let xgboost = compile(
        with_policy(json!({"xgboost": {}})),
        json!({"runtimeRef": {"name": "x"}, "trainer": {"numNodes": 2}}),
    )
    .expect("compiles");
    // Two nodes of four GPUs: eight workers.
    assert_eq!(env_value(node(&xgboost), "DMLC_NUM_WORKER"), "8");
    assert_eq!(
        env_value(node(&xgboost), "DMLC_TRACKER_URI"),
        "tj-node-0-0.tj"
    );
    assert_eq!(env_value(node(&xgboost), "DMLC_TRACKER_PORT"), "29500");
}

#[test]
fn the_trainer_section_sets_image_command_args_and_env() {
    let jobset = compile(
        with_policy(json!({})),
        json!({"runtimeRef": {"name": "p"}, "trainer": {
            "image": "me/train:1", "command": ["python"], "args": ["train.py"],
            "env": [{"name": "LOG_LEVEL", "value": "debug"}]
        }}),
    )
    .expect("compiles");
    let node = node(&jobset);
    assert_eq!(node["image"], "me/train:1");
    assert_eq!(node["command"], json!(["python"]));
    assert_eq!(node["args"], json!(["train.py"]));
    assert_eq!(env(node), vec![("LOG_LEVEL".to_owned(), json!("debug"))]);
}

#[test]
fn initializers_get_their_storage_uri_env_and_secret() {
    let mut runtime = torch_runtime();
    let initializer = json!({
        "name": "dataset-initializer",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "i",
                "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}]}}}
        }
    });
    runtime["template"]["spec"]["replicatedJobs"]
        .as_array_mut()
        .expect("replicated jobs")
        .insert(0, initializer.clone());
    // Trainer's rule: the initializer's container mounts the `initializer` volume.
    let mut unmounted = runtime.clone();
    unmounted["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        [0]["volumeMounts"] = json!([]);
    assert_eq!(
        compile(unmounted, json!({"runtimeRef": {"name": "t"}, "initializer": {"dataset": {"storageUri": "s3://x"}}})),
        Err("spec.initializer.dataset: container dataset-initializer of the runtime's dataset-initializer job has no volumeMount named initializer".to_owned())
    );
    assert_eq!(
        compile(
            torch_runtime(),
            json!({"runtimeRef": {"name": "t"}, "initializer": {"model": {"storageUri": "hf://m"}}})
        ),
        Err(
            "spec.initializer.model: the runtime has no model-initializer replicated job"
                .to_owned()
        )
    );
    let jobset = compile(
        runtime,
        json!({"runtimeRef": {"name": "t"}, "initializer": {"dataset": {
            "storageUri": "hf://tatsu-lab/alpaca",
            "env": [{"name": "REVISION", "value": "main"}],
            "secretRef": {"name": "hf-token"}
        }}}),
    )
    .expect("compiles");
    let container = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        [0];
    assert_eq!(
        env(container),
        vec![
            ("STORAGE_URI".to_owned(), json!("hf://tatsu-lab/alpaca")),
            ("REVISION".to_owned(), json!("main"))
        ]
    );
    assert_eq!(
        container["envFrom"],
        json!([{"secretRef": {"name": "hf-token"}}])
    );
}

#[test]
fn labels_suspend_and_owner() {
    let jobset = compile(
        torch_runtime(),
        json!({"runtimeRef": {"name": "t"}, "suspend": true, "runtimePatches": [
            {"manager": "a.io/one", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"runtime": "patched", "x": "1"}}}}},
            {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
        ]}),
    )
    .expect("compiles");
    assert_eq!(jobset["metadata"]["name"], "tj");
    assert_eq!(jobset["metadata"]["namespace"], "team");
    assert_eq!(jobset["metadata"]["labels"]["runtime"], "patched");
    assert_eq!(jobset["metadata"]["labels"]["x"], "1");
    assert_eq!(jobset["spec"]["suspend"], true);
    let owner = &jobset["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "TrainJob");
    assert_eq!(owner["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(owner["uid"], "u-1");
    assert_eq!(owner["controller"], true);
}

#[test]
fn bad_input_is_an_error_naming_the_field() {
    let cases = [
        (
            json!({"runtimeRef": {"name": "t"}, "trainer": {"env": [{"name": "PET_NNODES", "value": "9"}]}}),
            "spec.trainer.env[0].name: PET_NNODES is set by the runtime's ML policy",
        ),
        (
            json!({"runtimeRef": {"name": "t"}, "trainer": {"numNodes": 0}}),
            "spec.trainer.numNodes: must be at least 1",
        ),
        (
            json!({"runtimeRef": {"name": "t"}, "runtimePatches": [{"manager": "a.io/b", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}}}]}),
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name: the runtime has no replicated job \"launcher\"",
        ),
        (
            json!({"runtimeRef": {"name": "t"}, "runtimePatches": [{"manager": "a.io/b", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "sidecar"}]}}}}}
            ]}}}}]}),
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].name: replicated job \"node\" of the runtime has no container \"sidecar\"",
        ),
        (
            json!({"runtimeRef": {"name": "t"}, "runtimePatches": [{"manager": "a.io/b", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]}}}}}
            ]}}}}]}),
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env: the \"node\" container's env comes from spec.trainer and spec.initializer, not from runtime patches",
        ),
    ];
    for (spec, expected) in cases {
        assert_eq!(compile(torch_runtime(), spec), Err(expected.to_owned()));
    }
    assert_eq!(
        compile(
            with_policy(json!({"mpi": {"mpiImplementation": "Intel"}})),
            json!({"runtimeRef": {"name": "deepspeed-distributed"}})
        ),
        Err(
            "spec.runtimeRef: the runtime's mlPolicy.mpi.mpiImplementation \"Intel\" is not supported (OpenMPI is)"
                .to_owned()
        )
    );
    assert_eq!(
        compile(
            with_policy(json!({"flux": {}})),
            json!({"runtimeRef": {"name": "flux"}})
        ),
        Err(
            "spec.runtimeRef: the runtime's mlPolicy.flux is not supported by trainset yet"
                .to_owned()
        )
    );
    assert_eq!(
        compile(
            json!({"mlPolicy": {"torch": {}}}),
            json!({"runtimeRef": {"name": "t"}})
        ),
        Err(
            "spec.runtimeRef: ClusterTrainingRuntime torch-distributed has no template.spec"
                .to_owned()
        )
    );
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn quantity() -> impl Strategy<Value = String> {
        prop_oneof![
            (0..64u32).prop_map(|n| n.to_string()),
            (0..64000u32).prop_map(|n| format!("{n}m")),
            Just("1.5".to_owned()),
            Just("4Gi".to_owned()),
            Just("x".to_owned()),
            Just("1e400".to_owned()),
        ]
    }

    fn resources() -> impl Strategy<Value = Value> {
        (
            proptest::option::of(quantity()),
            proptest::option::of(quantity()),
        )
            .prop_map(|(cpu, gpu)| {
                let mut limits = serde_json::Map::new();
                if let Some(cpu) = cpu {
                    limits.insert("cpu".into(), json!(cpu));
                }
                if let Some(gpu) = gpu {
                    limits.insert("nvidia.com/gpu".into(), json!(gpu));
                }
                json!({"limits": limits})
            })
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("node".to_owned()),
            Just("dataset-initializer".to_owned()),
            "[a-z]{1,3}"
        ]
    }

    /// torchtune's args: the ones that choose a recipe, a path only the runtime may set, others.
    fn tune_arg() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("model.quantize_base=True".to_owned()),
            Just("model.use_dora=true".to_owned()),
            Just("model.lora_attn_modules=[q_proj]".to_owned()),
            Just("output_dir=/x".to_owned()),
            "[a-z.=]{0,6}",
        ]
    }

    fn runtime_name() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("torch-distributed"),
            Just("torchtune-llama3.2-1b"),
            Just("torchtune-llama3.3-70b"),
            Just("torchtune-qwen2.5-1.5b"),
            Just("torchtune-x-y"),
            Just("torchtune-"),
        ]
    }

    fn runtime() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                Just(Value::Null),
                Just(json!({"torch": {}})),
                Just(json!({"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["a"]}]}}})),
                Just(json!({"jax": {}, "numNodes": 3})),
                Just(json!({"xgboost": {}, "numNodes": -1})),
                Just(json!({"mpi": {}})),
                Just(json!({})),
            ],
            proptest::collection::vec((name(), name(), resources(), proptest::option::of(-1..4i32)), 0..4),
        )
            .prop_map(|(policy, jobs)| {
                let jobs: Vec<Value> = jobs
                    .into_iter()
                    .map(|(job, step, resources, parallelism)| {
                        json!({"name": job, "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": if step == "node" { "trainer".to_owned() } else { step.clone() }}},
                            "spec": {"parallelism": parallelism, "template": {"spec": {"containers": [
                                {"name": step, "image": "i", "resources": resources}
                            ]}}}
                        }})
                    })
                    .collect();
                let mut runtime = json!({"template": {"spec": {"replicatedJobs": jobs}}});
                if !policy.is_null() {
                    runtime["mlPolicy"] = policy;
                }
                runtime
            })
    }

    fn trainjob_spec() -> impl Strategy<Value = Value> {
        (
            proptest::option::of(-2..10i32),
            proptest::option::of(-2..10i32),
            proptest::option::of(resources()),
            proptest::option::of(prop_oneof![Just("PET_NNODES"), Just("JAX_PROCESS_ID"), Just("X")]),
            proptest::collection::vec((name(), name()), 0..3),
            any::<bool>(),
            proptest::option::of(proptest::collection::vec(tune_arg(), 0..4)),
        )
            .prop_map(|(nodes, procs, per_node, env, patches, suspend, tune)| {
                let patches: Vec<Value> = patches
                    .into_iter()
                    .enumerate()
                    .map(|(i, (job, container))| {
                        json!({"manager": format!("e.io/{i}"), "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                            {"name": job, "template": {"spec": {"template": {"spec": {"containers": [{"name": container, "env": [{"name": "P", "value": "1"}]}]}}}}}
                        ]}}}})
                    })
                    .collect();
                let mut trainer = json!({"numNodes": nodes, "numProcPerNode": procs, "resourcesPerNode": per_node});
                if let Some(env) = env {
                    trainer["env"] = json!([{"name": env, "value": "1"}]);
                }
                if let Some(args) = tune {
                    trainer["command"] = json!(["tune", "run"]);
                    trainer["args"] = json!(args);
                }
                json!({"runtimeRef": {"name": "r"}, "trainer": trainer, "runtimePatches": patches, "suspend": suspend,
                       "initializer": {"dataset": {"storageUri": "s3://b/k", "secretRef": {"name": "s"}}}})
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn compile_never_panics_and_is_deterministic(runtime in runtime(), name in runtime_name(), spec in trainjob_spec()) {
            let first = super::compile_named(runtime.clone(), name, spec.clone());
            let second = super::compile_named(runtime, name, spec);
            prop_assert_eq!(first, second);
        }
    }
}

mod render {
    use trainset::render::{Format, render};

    const RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: pytorch/pytorch}]}}}
"#;

    const TRAINJOB: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: mnist}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
"#;

    #[test]
    fn a_trainjob_renders_against_a_runtime_given_beside_it_or_in_its_input() {
        let beside = render(TRAINJOB, RUNTIME, "team", None, Format::Yaml).expect("renders");
        let within = render(
            &format!("{RUNTIME}\n---\n{TRAINJOB}"),
            "",
            "team",
            None,
            Format::Yaml,
        )
        .expect("renders");
        assert_eq!(beside, within);
        assert!(beside.contains("kind: JobSet"), "{beside}");
        assert!(beside.contains("namespace: team"), "{beside}");
        assert!(beside.contains("value: mnist-node-0-0.mnist"), "{beside}");
        assert!(
            !beside.contains("ClusterTrainingRuntime"),
            "runtimes are inputs: {beside}"
        );
    }

    #[test]
    fn a_trainjob_the_apiserver_would_refuse_is_refused_with_every_field_named() {
        let job = TRAINJOB
            .replace("name: mnist", "name: MNIST_v2")
            .replace("trainer: {numNodes: 2}", "trainer: {numNodes: 2, gpus: 8}");
        let errors = render(&job, RUNTIME, "team", None, Format::Yaml).expect_err("refused");
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "document 1 (TrainJob MNIST_v2): unknown field \"spec.trainer.gpus\"; \
                 metadata.name must match RFC 1035 DNS label format"
            ]
        );
    }

    #[test]
    fn a_missing_or_foreign_runtime_is_an_error_naming_the_field() {
        let errors = render(TRAINJOB, "", "team", None, Format::Yaml).expect_err("no runtime");
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "document 1 (TrainJob mnist): spec.runtimeRef.name: no ClusterTrainingRuntime \"torch-distributed\" among the runtimes given (--runtime FILE)"
            ]
        );
        // A TrainingRuntime serves TrainJobs of its own namespace only.
        let namespaced = RUNTIME
            .replace("kind: ClusterTrainingRuntime", "kind: TrainingRuntime")
            .replace(
                "metadata: {name: torch-distributed,",
                "metadata: {name: torch-distributed, namespace: other,",
            );
        let job = TRAINJOB.replace(
            "runtimeRef: {name: torch-distributed}",
            "runtimeRef: {name: torch-distributed, kind: TrainingRuntime}",
        );
        assert!(render(&job, &namespaced, "team", None, Format::Yaml).is_err());
        assert!(render(&job, &namespaced, "other", None, Format::Yaml).is_ok());
        // Only runtimes belong beside the input.
        let errors =
            render(TRAINJOB, TRAINJOB, "team", None, Format::Yaml).expect_err("not a runtime");
        assert_eq!(
            errors[0].to_string(),
            "runtimes, document 1: not a TrainingRuntime or ClusterTrainingRuntime"
        );
    }
}

/// The spec of a shipped torchtune runtime (`deploy/runtimes/torchtune.yaml`).
fn torchtune_runtime(name: &str) -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/runtimes/torchtune.yaml"
    ))
    .expect("deploy/runtimes/torchtune.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| <Value as serde::Deserialize>::deserialize(document).expect("YAML"))
        .find(|runtime| runtime["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no runtime {name}"))["spec"]
        .clone()
}

/// The TrainJob the SDK's `train()` makes for a `BuiltinTrainer` (`TorchTuneConfig` with LoRA and
/// a dataset config) with Hugging Face initializers, on one node of two GPUs.
#[test]
fn an_sdk_builtin_trainer_on_a_torchtune_runtime() {
    let jobset = compile_named(
        torchtune_runtime("torchtune-llama3.2-1b"),
        "torchtune-llama3.2-1b",
        json!({
            "runtimeRef": {"name": "torchtune-llama3.2-1b"},
            "initializer": {
                "dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"},
                "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"}
            },
            "trainer": {
                "numNodes": 1,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
                "command": ["tune", "run"],
                "args": ["dtype=bf16", "batch_size=2", "epochs=1", "dataset.data_dir=/workspace/dataset/data",
                         "model.lora_rank=8", "model.lora_attn_modules=[q_proj,v_proj]",
                         "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet"]
            }
        }),
    )
    .expect("compiles");
    let yaml = serde_norway::to_string(&jobset).expect("YAML");
    insta::assert_snapshot!(yaml);
}

/// torchtune's command (recipe, config, rendezvous, the runtime's paths) and Trainer's torchtune
/// rules, each an error naming the field.
#[test]
fn torchtune_recipes_configs_and_rules() {
    let tune = |runtime: &str, trainer: Value| -> Result<Vec<String>, String> {
        // Other names reuse the 1B runtime's template: the model is read from the name.
        let shipped = ["torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"];
        let spec = torchtune_runtime(if shipped.contains(&runtime) {
            runtime
        } else {
            "torchtune-llama3.2-1b"
        });
        let mut trainer = trainer;
        trainer["command"] = json!(["tune", "run"]);
        let jobset = compile_named(
            spec,
            runtime,
            json!({"runtimeRef": {"name": runtime}, "trainer": trainer}),
        )?;
        let node = &jobset["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]["containers"]
            [0];
        assert_eq!(
            env_value(node, "PET_MASTER_ADDR"),
            Value::Null,
            "torchtune rendezvous is its own"
        );
        assert_eq!(
            env_value(node, "PET_NNODES"),
            json!(trainer["numNodes"].as_i64().unwrap_or(1).to_string())
        );
        Ok(serde_json::from_value(node["command"].clone()).expect("a command"))
    };
    let paths = [
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ];
    let with_paths = |head: &[&str]| -> Vec<String> {
        head.iter()
            .chain(paths.iter())
            .map(|s| (*s).to_owned())
            .collect()
    };
    let one_gpu = json!({"limits": {"nvidia.com/gpu": "1"}});

    // The runtime's two GPUs: distributed, with the first node as the rendezvous.
    assert_eq!(
        tune("torchtune-llama3.2-1b", json!({})),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full"
        ]))
    );
    // One GPU: one device, no rendezvous.
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"resourcesPerNode": one_gpu})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "full_finetune_single_device",
            "--config",
            "llama3_2/1B_full_single_device"
        ]))
    );
    assert_eq!(
        tune(
            "torchtune-llama3.2-3b",
            json!({"numProcPerNode": 1, "args": ["model.lora_attn_modules=[q_proj]"]})
        ),
        Ok([
            "tune",
            "run",
            "lora_finetune_single_device",
            "--config",
            "llama3_2/3B_lora_single_device",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model"
        ]
        .map(str::to_owned)
        .to_vec())
    );
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"resourcesPerNode": one_gpu, "args": ["model.quantize_base=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "lora_finetune_single_device",
            "--config",
            "llama3_2/1B_qlora_single_device"
        ]))
    );
    // Qwen's tokenizer has a merges file.
    assert_eq!(
        tune(
            "torchtune-qwen2.5-1.5b",
            json!({"numProcPerNode": 4, "args": ["model.lora_attn_modules=[q_proj]"]})
        ),
        Ok([
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "lora_finetune_distributed",
            "--config",
            "qwen2_5/1.5B_lora",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/vocab.json",
            "tokenizer.merges_file=/workspace/model/merges.txt",
            "checkpointer.checkpoint_dir=/workspace/model"
        ]
        .map(str::to_owned)
        .to_vec())
    );
    // 70B: many nodes, and QLoRA across one node's devices.
    assert_eq!(
        tune("torchtune-llama3.3-70b", json!({"numNodes": 2})),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_3/70B_full_multinode"
        ]))
    );
    assert_eq!(
        tune(
            "torchtune-llama3.3-70b",
            json!({"args": ["model.quantize_base=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "lora_finetune_distributed",
            "--config",
            "llama3_3/70B_qlora"
        ]))
    );
    // DoRA on a quantized base is not QLoRA.
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"args": ["model.quantize_base=True", "model.use_dora=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full"
        ]))
    );

    let field = |result: Result<Vec<String>, String>| -> String {
        let error = result.expect_err("refused");
        error.split(':').next().unwrap_or_default().to_owned()
    };
    assert_eq!(
        field(tune("torch-distributed", json!({}))),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune("torchtune-mistral-7b", json!({}))),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune("torchtune-llama3.2-1b", json!({"numNodes": 2}))),
        "spec.trainer.numNodes"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.3-70b",
            json!({"numNodes": 2, "args": ["model.lora_attn_modules=[q_proj]"]})
        )),
        "spec.trainer.numNodes"
    );
    assert_eq!(
        field(tune(
            "torchtune-qwen2.5-1.5b",
            json!({"resourcesPerNode": one_gpu, "args": ["model.quantize_base=True"]})
        )),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.2-3b",
            json!({"args": ["model.quantize_base=true"]})
        )),
        "spec.trainer.numProcPerNode"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.2-1b",
            json!({"args": ["epochs=1", "output_dir=/tmp/out"]})
        )),
        "spec.trainer.args[1]"
    );
}

/// Without `tune run` a torchtune runtime is a torch runtime: the TrainJob's command and torchrun's
/// master variables.
#[test]
fn another_command_on_a_torchtune_runtime_is_plain_torch() {
    let jobset = compile_named(
        torchtune_runtime("torchtune-llama3.2-1b"),
        "torchtune-llama3.2-1b",
        json!({"runtimeRef": {"name": "torchtune-llama3.2-1b"}, "trainer": {"command": ["python", "tune.py"]}}),
    )
    .expect("compiles");
    let node = &jobset["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]["containers"]
        [0];
    assert_eq!(node["command"], json!(["python", "tune.py"]));
    assert_eq!(env_value(node, "PET_MASTER_ADDR"), "tj-node-0-0.tj");
    assert_eq!(env_value(node, "PET_NPROC_PER_NODE"), "auto");
}

/// `envInjection`: the named containers and init containers of other replicated jobs get the
/// `PET_*` variables, the master's too; a target the runtime lacks is an error.
#[test]
fn torch_env_injection_targets() {
    let mut runtime = with_policy(
        json!({"numNodes": 2, "torch": {"envInjection": {"targets": [
            {"jobName": "node", "containerNames": ["wait-for-master"]},
            {"jobName": "metrics", "containerNames": ["exporter"]}
        ]}}}),
    );
    runtime["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "wait-for-master", "image": "busybox"}]);
    let metrics = json!({"name": "metrics", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "exporter", "image": "exporter"}]}}}}});
    runtime["template"]["spec"]["replicatedJobs"]
        .as_array_mut()
        .expect("jobs")
        .push(metrics);
    let jobset = compile(runtime.clone(), json!({"runtimeRef": {"name": "t"}})).expect("compiles");
    let init = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["initContainers"]
        [0];
    let exporter = &jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"]
        [0];
    for container in [init, exporter] {
        assert_eq!(env_value(container, "PET_NNODES"), "2");
        assert_eq!(env_value(container, "PET_NPROC_PER_NODE"), "auto");
        assert_eq!(env_value(container, "PET_MASTER_ADDR"), "tj-node-0-0.tj");
        assert_eq!(env_value(container, "PET_MASTER_PORT"), "29500");
        assert_eq!(
            env_value(container, "PET_NODE_RANK"),
            json!({"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}})
        );
    }
    runtime["mlPolicy"]["torch"]["envInjection"]["targets"][1]["containerNames"] =
        json!(["missing"]);
    let error = compile(runtime, json!({"runtimeRef": {"name": "t"}})).expect_err("refused");
    assert!(
        error.starts_with("spec.runtimeRef: ") && error.contains("\"missing\""),
        "{error}"
    );
}

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
    use trainset::render::{Format, render};
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
    let rendered = render(&job, text, "default", None, Format::Json)
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

/// A TrainJob name that leaves its pods no DNS-label name (`<name>-<replicated job>-<i>-<j>-` and
/// five random characters: the JobSet webhook would refuse the JobSet for ever) is an error
/// naming `metadata.name`: 34 characters on a torchtune runtime, whose `dataset-initializer` is
/// its longest replicated job.
#[test]
fn a_name_too_long_for_its_pods_names_is_refused() {
    let spec = torchtune_runtime("torchtune-llama3.2-1b");
    let runtime: TrainingRuntimeSpec = serde_json::from_value(spec).expect("a runtime");
    let resolved = Runtime {
        kind: RuntimeKind::Cluster,
        name: "torchtune-llama3.2-1b",
        spec: &runtime,
    };
    let named = |name: &str| {
        let mut job = trainjob(json!({"runtimeRef": {"name": "torchtune-llama3.2-1b"}}));
        job.metadata.name = Some(name.to_owned());
        compile_trainjob(&job, &resolved, None).map_err(|e| e.to_string())
    };
    let refused = named("llama-finetune-experiment-2026-12a").map(|_| ());
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.starts_with("metadata.name: Too long") && e.contains("64 characters")),
        "{refused:?}"
    );
    assert!(named("llama-finetune-experiment-2026-12").is_ok());
}
