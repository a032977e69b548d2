//! The schemas trainset generates for upstream's types, compared field by field with the CRDs
//! upstream generates, read from the Go module cache at the versions pinned in `e2e/gomod/`. Descriptions aside, every property, type, format, default,
//! enum, bound, list type and CEL rule must be the same; the Kubernetes types embedded in them
//! (a Job template, PVC templates, conditions) come from k8s-openapi and are compared by presence.

use std::path::PathBuf;
use std::process::Command;

use jobset_types::JobSet;
use kube::CustomResourceExt;
use serde_json::Value;
use trainset::crds::without_option_markers;
use trainset_e2e::{repo_root, yaml_documents};

/// Where the Go module cache holds `module` at the version pinned in `e2e/gomod/<pin>/`,
/// downloading it first if it is not there yet (`go mod download` checks the pinned sum).
fn module_dir(pin: &str, module: &str) -> PathBuf {
    let output = Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(repo_root().join("e2e/gomod").join(pin))
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("go mod download");
    assert!(
        output.status.success(),
        "go mod download {module}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let info: Value = serde_json::from_slice(&output.stdout).expect("go mod download -json");
    PathBuf::from(info["Dir"].as_str().expect("the module's directory"))
}

/// The schema without descriptions, and with the Kubernetes types at `opaque` paths (`.a.b[]`,
/// or `*.b[]` for every path ending so) replaced by a marker.
fn skeleton(schema: &Value, path: &str, opaque: &[&str]) -> Value {
    let is_opaque = |pattern: &&str| match pattern.strip_prefix('*') {
        Some(suffix) => path.ends_with(suffix),
        None => path == *pattern,
    };
    if opaque.iter().any(is_opaque) {
        return Value::String("<Kubernetes type>".to_owned());
    }
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = serde_json::Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "description" => continue,
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, property)| {
                        let at = format!("{path}.{name}");
                        (name.clone(), skeleton(property, &at, opaque))
                    })
                    .collect(),
            ),
            "items" => skeleton(value, &format!("{path}[]"), opaque),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// Every difference between two skeletons, as `path: ours vs upstream`.
fn differences(ours: &Value, upstream: &Value, path: &str, out: &mut Vec<String>) {
    match (ours, upstream) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{path}/{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differences(x, y, &here, out),
                    (Some(x), None) => out.push(format!("{here}: ours only: {x}")),
                    (None, Some(y)) => out.push(format!("{here}: upstream only: {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// What a CRD's schema says beyond the `apiVersion`, `kind` and `metadata` every object has:
/// `spec`, `status`, and the rules on the whole object.
fn own_schema(crd: &Value) -> Value {
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut own = serde_json::json!({
        "type": root["type"],
        "properties": {"spec": root["properties"]["spec"]},
    });
    if !root["properties"]["status"].is_null() {
        own["properties"]["status"] = root["properties"]["status"].clone();
    }
    if !root["x-kubernetes-validations"].is_null() {
        own["x-kubernetes-validations"] = root["x-kubernetes-validations"].clone();
    }
    own
}

/// The differences between our CRD and upstream's, as `path: ours vs upstream` lines.
fn compare(ours: &Value, upstream: &Value, opaque: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    differences(
        &skeleton(&own_schema(ours), "", opaque),
        &skeleton(&own_schema(upstream), "", opaque),
        "",
        &mut found,
    );
    found
}

#[test]
#[ignore = "needs Go and its module proxy (JobSet's module)"]
fn jobset_types_schema_is_jobset_v0_12s() {
    let file = module_dir("jobset", "sigs.k8s.io/jobset")
        .join("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let upstream = yaml_documents(&text).pop().expect("the JobSet CRD");
    let mut ours = serde_json::to_value(JobSet::crd()).expect("CRD");
    without_option_markers(&mut ours);
    let opaque = [
        ".spec.replicatedJobs[].template",
        ".spec.volumeClaimPolicies[].templates[]",
        ".status.conditions[]",
    ];
    let found = compare(&ours, &upstream, &opaque);
    assert!(
        found.is_empty(),
        "{} differences:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
#[ignore = "needs Go and its module proxy (Trainer's module)"]
fn trainer_crds_are_trainer_v2_3s() {
    let dir = module_dir("trainer", "github.com/kubeflow/trainer/v2").join("manifests/base/crds");
    let opaque = [
        // Kubernetes types, from k8s-openapi.
        "*.env[]",
        "*.resourcesPerNode",
        "*.secretRef",
        "*.conditions[]",
        "*.time",
        "*.lastUpdatedTime",
        "*.affinity",
        "*.tolerations[]",
        "*.volumes[]",
        "*.volumeMounts[]",
        "*.imagePullSecrets[]",
        "*.schedulingGates[]",
        "*.securityContext",
        // The runtime's JobSet spec is jobset-types' (the test above).
        ".spec.template.spec",
    ];
    let mut found = Vec::new();
    for crd in trainset::crds::trainer().expect("the Trainer CRDs") {
        let ours = serde_json::to_value(&crd).expect("CRD");
        let name = crd.metadata.name.clone().unwrap_or_default();
        let file = dir.join(format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let upstream = yaml_documents(&text).pop().expect("a CRD");
        found.extend(
            compare(&ours, &upstream, &opaque)
                .into_iter()
                .map(|d| format!("{name}{d}")),
        );
    }
    // trainset's two additive status fields (docs/trainer.md), and nothing else.
    let additive: Vec<String> = ["startTime", "completionTime"]
        .iter()
        .map(|field| {
            format!(
                "trainjobs.trainer.kubeflow.org/properties/status/properties/{field}: ours only"
            )
        })
        .collect();
    // And the bounds trainset adds so the apiserver refuses what the types cannot hold
    // (`crds::bound_integers`): int32 limits, and a port's range on int-or-string ports.
    let bounds = [
        "/minimum: ours only: -2147483648.0",
        "/maximum: ours only: 2147483647.0",
        "/port/minimum: ours only: 1.0",
        "/port/maximum: ours only: 65535.0",
    ];
    let (bounded, found): (Vec<String>, Vec<String>) = found
        .into_iter()
        .partition(|d| bounds.iter().any(|b| d.ends_with(b)));
    assert!(!bounded.is_empty(), "no bound added to the Trainer CRDs");
    let (expected, found): (Vec<String>, Vec<String>) = found
        .into_iter()
        .partition(|d| additive.iter().any(|a| d.starts_with(a)));
    assert_eq!(expected.len(), additive.len(), "{expected:?}");
    assert!(
        found.is_empty(),
        "{} differences:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// YAML's `nvidia.com/gpu: 2` is a number; a Quantity is written as the string `"2"` (as the
/// apiserver stores it too).
fn quantities_as_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "limits" || key == "requests" {
                    for quantity in child
                        .as_object_mut()
                        .into_iter()
                        .flat_map(|m| m.values_mut())
                    {
                        if let Value::Number(number) = quantity {
                            *quantity = Value::String(number.to_string());
                        }
                    }
                } else {
                    quantities_as_strings(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

/// Every ClusterTrainingRuntime Trainer v2.3.0 ships reads into trainset's types and writes back
/// unchanged: no field is lost or reshaped.
#[test]
#[ignore = "needs Go and its module proxy (Trainer's module)"]
fn trainers_runtimes_round_trip() {
    use trainset::api::trainer::ClusterTrainingRuntime;
    let dir =
        module_dir("trainer", "github.com/kubeflow/trainer/v2").join("manifests/base/runtimes");
    let mut pending = vec![dir];
    let mut runtimes = 0;
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("manifest");
            for document in yaml_documents(&text) {
                if document["kind"] != "ClusterTrainingRuntime" {
                    continue;
                }
                let runtime: ClusterTrainingRuntime = serde_json::from_value(document.clone())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let written = serde_json::to_value(&runtime).expect("runtime");
                let mut expected = document;
                quantities_as_strings(&mut expected);
                assert_eq!(written, expected, "{}", path.display());
                runtimes += 1;
            }
        }
    }
    assert!(runtimes >= 8, "{runtimes} runtimes");
}
