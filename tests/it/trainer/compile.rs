//! Each rule of the Trainer compiler on its own, and the whole JobSet of an SDK-shaped job on a
//! torch runtime as a snapshot.

use serde_json::json;

use super::*;

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
