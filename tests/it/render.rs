//! Every example renders, its output is snapshotted, and invalid input is refused with a
//! message that names the field.

use std::path::Path;
use std::process::Command;

use crate::support as common;

use common::compile_with_test_key;
use trainset::render::{Format, Operator, render};

fn examples() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.file_stem().expect("name").to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).expect("readable"),
            )
        })
        .collect()
}

#[test]
fn every_example_compiles_to_its_snapshot() {
    let examples = examples();
    assert!(examples.len() >= 10);
    for (name, text) in examples {
        let manifest: serde_json::Value = serde_norway::from_str(&text).expect("YAML");
        let compiled = compile_with_test_key(&manifest, Some("default"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let documents: Vec<String> = compiled
            .objects()
            .expect("serializes")
            .iter()
            .map(|o| serde_norway::to_string(o).expect("YAML"))
            .collect();
        insta::assert_snapshot!(name, documents.join("---\n"));
    }
}

#[test]
fn every_example_renders_as_yaml_and_json() {
    for (name, text) in examples() {
        let yaml = render(&text, "", "default", &Operator::default(), Format::Yaml)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let first: serde_json::Value = serde_norway::Deserializer::from_str(&yaml)
            .next()
            .map(|d| serde::Deserialize::deserialize(d).expect("doc"))
            .expect("one document");
        assert_eq!(first["kind"], "JobSet", "{name}: the JobSet comes first");
        let json = render(&text, "", "default", &Operator::default(), Format::Json)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let list: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(
            (list["apiVersion"].as_str(), list["kind"].as_str()),
            (Some("v1"), Some("List"))
        );
        let kinds: Vec<&str> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["kind"].as_str())
            .collect();
        let expected: &[&str] = match name.as_str() {
            "mpijob" => &["JobSet", "ConfigMap", "Secret"],
            "mpijob-v1" => &[
                "JobSet",
                "ConfigMap",
                "ServiceAccount",
                "Role",
                "RoleBinding",
            ],
            _ => &["JobSet"],
        };
        assert_eq!(kinds, expected, "{name}");
    }
}

#[test]
fn many_documents_render_in_order() {
    let examples = examples();
    let example = |name: &str| {
        examples
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, text)| text.clone())
            .unwrap_or_else(|| panic!("examples/{name}.yaml"))
    };
    let input = format!("{}\n---\n{}", example("jaxjob"), example("mpijob"));
    let out = render(&input, "", "team", &Operator::default(), Format::Json).expect("renders");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["jax-simple", "mpi-pi", "mpi-pi-config", "mpi-pi-ssh"]
    );
    assert!(
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|i| i["metadata"]["namespace"] == "team")
    );
}

fn pytorch(name: &str, specs: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {{name: {name}}}\nspec:\n  pytorchReplicaSpecs:\n{specs}"
    )
}

const WORKER: &str = "    Worker:\n      replicas: 1\n      template: {spec: {containers: [{name: pytorch, image: img}]}}\n";

/// (what, input, text the error must contain). Schema and rule violations are the invalid
/// corpus's (`tests/it/invalid.rs`); these are the inputs that are not training jobs at all.
fn invalid_inputs() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "not a training kind",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n".into(),
            "apiVersion/kind: v1/Pod is not a training kind",
        ),
        (
            "a training kind at a version not served",
            pytorch("a", WORKER).replace("kubeflow.org/v1", "kubeflow.org/v2"),
            "apiVersion/kind: kubeflow.org/v2/PyTorchJob is not a training kind",
        ),
        (
            "malformed YAML",
            "apiVersion: kubeflow.org/v1\nkind: [TFJob\n".into(),
            "document 1: malformed YAML",
        ),
        (
            "not an object",
            "- just\n- a list\n".into(),
            "document 1: not a Kubernetes object",
        ),
    ]
}

#[test]
fn invalid_input_is_refused_with_a_message_naming_the_field() {
    let mut failures = Vec::new();
    for (what, input, expected) in invalid_inputs() {
        match render(&input, "", "default", &Operator::default(), Format::Yaml) {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                if !text.iter().any(|t| t.contains(expected)) {
                    failures.push(format!("{what}: expected {expected:?} in {text:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_cli_exits_1_with_every_error_and_prints_nothing() {
    let input = format!(
        "{}\n---\n{}",
        pytorch("9lives", WORKER),
        pytorch("ok", WORKER)
    );
    let path = std::env::temp_dir().join(format!("trainset-render-{}.yaml", std::process::id()));
    std::fs::write(&path, input).expect("temp file");
    let output = Command::new(env!("CARGO_BIN_EXE_trainset"))
        .args(["render", "-f"])
        .arg(&path)
        .output()
        .expect("runs");
    let _ = std::fs::remove_file(&path);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "nothing printed on failure");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("document 1 (PyTorchJob 9lives): metadata.name must be a DNS-1035 label"),
        "{stderr}"
    );
}

#[test]
fn the_cli_renders_json_from_standard_input() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainset"))
        .args(["render", "-f", "-", "-o", "json", "-n", "team-a"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(pytorch("ok", WORKER).as_bytes())
        .expect("writes");
    let output = child.wait_with_output().expect("runs");
    assert!(output.status.success());
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(list["items"][0]["metadata"]["namespace"], "team-a");
}
