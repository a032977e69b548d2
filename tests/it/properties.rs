//! Over arbitrary specs, compilation never panics and is deterministic: the same input gives
//! byte-identical output (the SSH key is an input, so it is fixed here).

use crate::support as common;
use proptest::prelude::*;
use serde_json::{Value, json};

use common::compile_with_test_key;

const KINDS: &[(&str, &str, &str, &[&str], &str)] = &[
    (
        "kubeflow.org/v1",
        "TFJob",
        "tfReplicaSpecs",
        &["Chief", "Master", "PS", "Worker", "Evaluator"],
        "tensorflow",
    ),
    (
        "kubeflow.org/v1",
        "PyTorchJob",
        "pytorchReplicaSpecs",
        &["Master", "Worker"],
        "pytorch",
    ),
    (
        "kubeflow.org/v1",
        "XGBoostJob",
        "xgbReplicaSpecs",
        &["Master", "Worker"],
        "xgboost",
    ),
    (
        "kubeflow.org/v1",
        "PaddleJob",
        "paddleReplicaSpecs",
        &["Master", "Worker"],
        "paddle",
    ),
    (
        "kubeflow.org/v1",
        "JAXJob",
        "jaxReplicaSpecs",
        &["Worker"],
        "jax",
    ),
    (
        "kubeflow.org/v2beta1",
        "MPIJob",
        "mpiReplicaSpecs",
        &["Launcher", "Worker"],
        "mpi",
    ),
];

fn container(default: &'static str) -> impl Strategy<Value = Value> {
    (
        prop_oneof![6 => Just(default.to_owned()), 1 => Just("main".to_owned()), 1 => "[a-z]{0,3}"],
        prop_oneof![8 => Just(Some("img:1".to_owned())), 1 => Just(Some(String::new())), 1 => Just(None)],
        proptest::option::of(prop_oneof![Just("RANK"), Just("TF_CONFIG"), Just("X")]),
        proptest::option::of(1..70000i64),
    )
        .prop_map(|(name, image, env, port)| {
            let mut c = json!({"name": name});
            if let Some(image) = image {
                c["image"] = json!(image);
            }
            if let Some(env) = env {
                c["env"] = json!([{"name": env, "value": "$(RANK)-$$-$(NOPE)"}]);
            }
            if let Some(port) = port {
                c["ports"] = json!([{"name": "tfjob-port", "containerPort": port}, {"name": "master", "containerPort": port}]);
            }
            c
        })
}

fn replica_spec(default: &'static str) -> impl Strategy<Value = Value> {
    (
        prop_oneof![1 => Just(None), 6 => (1..8i64).prop_map(Some), 1 => (-3..40i64).prop_map(Some)],
        proptest::option::of(prop_oneof![Just("Always"), Just("OnFailure"), Just("Never"), Just("ExitCode")]),
        prop_oneof![9 => proptest::collection::vec(container(default), 1..3), 1 => proptest::collection::vec(container(default), 0..1)],
        prop_oneof![9 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(replicas, restart, containers, has_template)| {
            let mut spec = json!({});
            if let Some(r) = replicas {
                spec["replicas"] = json!(r);
            }
            if let Some(r) = restart {
                spec["restartPolicy"] = json!(r);
            }
            if has_template {
                spec["template"] = json!({"metadata": {"labels": {"team": "a"}}, "spec": {"containers": containers}});
            }
            spec
        })
}

fn manifest() -> impl Strategy<Value = Value> {
    (0..KINDS.len()).prop_flat_map(|k| {
        let (api_version, kind, field, types, default) = KINDS[k];
        let key = prop_oneof![
            4 => proptest::sample::select(types.to_vec()).prop_map(str::to_owned),
            2 => proptest::sample::select(types.to_vec()).prop_map(|t| t.to_ascii_lowercase()),
            1 => "[A-Za-z]{1,6}",
        ];
        (
            prop_oneof![6 => Just("job".to_owned()), 3 => "[a-z][a-z0-9-]{0,60}", 1 => ".{0,8}"],
            proptest::collection::btree_map(key, replica_spec(default), 1..4),
            any::<(bool, bool, bool)>(),
            proptest::option::of(-2..10i64),
            proptest::option::of(prop_oneof![Just("auto"), Just("4"), Just("gpu")]),
            proptest::option::of((proptest::option::of(0..6i64), proptest::option::of(0..6i64))),
        )
            .prop_map(move |(name, specs, (flag_a, flag_b, queued), number, nproc, elastic)| {
                let mut spec = json!({field: specs, "runPolicy": {"suspend": flag_a}});
                if let Some(n) = number {
                    spec["runPolicy"]["backoffLimit"] = json!(n);
                    spec["slotsPerWorker"] = json!(n);
                }
                match kind {
                    "TFJob" => {
                        spec["enableDynamicWorker"] = json!(flag_b);
                        spec["successPolicy"] = json!(if flag_a { "AllWorkers" } else { "" });
                    }
                    "PyTorchJob" => {
                        if let Some(n) = nproc {
                            spec["nprocPerNode"] = json!(n);
                        }
                        if let Some((min, max)) = elastic {
                            spec["elasticPolicy"] = json!({"minReplicas": min, "maxReplicas": max, "rdzvConf": [{"key": "k", "value": "v"}], "standalone": flag_b});
                        }
                    }
                    "MPIJob" => {
                        spec["runLauncherAsWorker"] = json!(flag_b);
                        spec["mpiImplementation"] = json!(if flag_a { "Intel" } else if flag_b { "MPICH" } else { "OpenMPI" });
                        spec["launcherCreationPolicy"] = json!(if flag_b { "WaitForWorkersReady" } else { "AtStartup" });
                    }
                    _ => {}
                }
                let mut labels = json!({});
                if queued {
                    labels["kueue.x-k8s.io/queue-name"] = json!("q");
                }
                json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "labels": labels}, "spec": spec})
            })
    })
}

fn compile_to_text(manifest: &Value) -> Result<String, String> {
    compile_with_test_key(manifest, Some("ns"))
        .map_err(|e| e.to_string())
        .and_then(|c| c.objects().map_err(|e| e.to_string()))
        .map(|objects| serde_json::to_string(&objects).unwrap_or_default())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn compile_never_panics_and_is_deterministic(manifest in manifest()) {
        let first = compile_to_text(&manifest);
        let second = compile_to_text(&manifest);
        prop_assert_eq!(first, second);
    }

    #[test]
    fn arbitrary_json_never_panics(manifest in arbitrary_json()) {
        let _ = compile_to_text(&manifest);
    }
}

/// Any JSON, with a training kind's apiVersion and kind half of the time.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,6}".prop_map(Value::from)
    ];
    let tree = leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (tree, 0..KINDS.len(), any::<bool>()).prop_map(|(mut value, k, typed)| {
        if typed && let Some(object) = value.as_object_mut() {
            object.insert("apiVersion".into(), json!(KINDS[k].0));
            object.insert("kind".into(), json!(KINDS[k].1));
        }
        value
    })
}

#[test]
fn generated_manifests_include_valid_ones() {
    // Guards the property above against a generator that only ever produces invalid input.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = manifest();
    let valid = (0..500)
        .filter(|_| {
            let tree = strategy.new_tree(&mut runner).expect("value");
            compile_to_text(&proptest::strategy::ValueTree::current(&tree)).is_ok()
        })
        .count();
    assert!(
        valid > 25,
        "only {valid} of 500 generated manifests compiled"
    );
}
