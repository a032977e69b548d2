//! A TrainJob's name against the pods of its runtime: the compiler's limit, and the committed
//! `deploy/trainjob-names.yaml` being exactly what `trainset trainjob-names` prints.

use std::path::Path;

use serde_json::json;
use trainset::api::trainer::TrainingRuntimeSpec;
use trainset::compile::trainer::{Runtime, RuntimeKind, compile_trainjob};

use super::torchtune::torchtune_runtime;
use super::*;

#[test]
fn committed_policies_match_the_code() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/trainjob-names.yaml"
    ));
    let committed = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("deploy/trainjob-names.yaml: {e}; run `cargo run -- trainjob-names`")
    });
    assert_eq!(
        committed,
        trainset::trainjob_names::to_yaml().expect("YAML"),
        "deploy/trainjob-names.yaml drifted; run \
         `cargo run -q -- trainjob-names > deploy/trainjob-names.yaml`"
    );
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
