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
