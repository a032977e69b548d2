//! The schemas trainset generates for upstream's types, compared field by field with the CRDs
//! upstream generates, read from the Go module cache (`e2e/cluster up` downloads JobSet's module
//! to build the JobSet controller). Descriptions aside, every property, type, format, default,
//! enum, bound, list type and CEL rule must be the same; the Kubernetes types embedded in them
//! (a Job template, PVC templates, conditions) come from k8s-openapi and are compared by presence.

use std::path::PathBuf;
use std::process::Command;

use jobset_types::JobSet;
use kube::CustomResourceExt;
use serde_json::Value;
use trainset_e2e::{repo_root, yaml_documents};

/// `<GOMODCACHE>/<module>@<version>`, the version pinned in `e2e/gomod/<pin>/go.mod`.
fn module_dir(pin: &str, module: &str) -> PathBuf {
    let go_mod = repo_root().join("e2e/gomod").join(pin).join("go.mod");
    let text =
        std::fs::read_to_string(&go_mod).unwrap_or_else(|e| panic!("{}: {e}", go_mod.display()));
    let version = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(&format!("{module} ")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{} does not pin {module}", go_mod.display()));
    let output = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env GOMODCACHE");
    let cache = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    PathBuf::from(cache).join(format!("{module}@{version}"))
}

/// The schema without descriptions, and with the Kubernetes types at `opaque` paths (`.a.b[]`)
/// replaced by a marker.
fn skeleton(schema: &Value, path: &str, opaque: &[&str]) -> Value {
    if opaque.contains(&path) {
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

/// The schema of a CRD's `spec` and `status`.
fn spec_and_status(crd: &Value) -> Value {
    let properties = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    serde_json::json!({"spec": properties["spec"], "status": properties["status"]})
}

/// kube marks every `Option` field `nullable`, and schemars lists `null` among an optional enum's
/// values; Go's CRDs do neither. The CRDs trainset generates from these types drop both.
fn without_option_markers(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("nullable");
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|value| !value.is_null());
            }
            map.values_mut().for_each(without_option_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(without_option_markers),
        _ => {}
    }
}

#[test]
#[ignore = "needs JobSet's Go module in the module cache: e2e/cluster up"]
fn jobset_types_schema_is_jobset_v0_12s() {
    let file = module_dir("jobset", "sigs.k8s.io/jobset")
        .join("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let upstream = yaml_documents(&text).pop().expect("the JobSet CRD");
    let mut ours = spec_and_status(&serde_json::to_value(JobSet::crd()).expect("CRD"));
    without_option_markers(&mut ours);
    let opaque = [
        ".spec.replicatedJobs[].template",
        ".spec.volumeClaimPolicies[].templates[]",
        ".status.conditions[]",
    ];
    let mut found = Vec::new();
    let wrap = |schema: &Value| skeleton(&serde_json::json!({"properties": schema}), "", &opaque);
    differences(
        &wrap(&ours),
        &wrap(&spec_and_status(&upstream)),
        "",
        &mut found,
    );
    assert!(
        found.is_empty(),
        "{} differences:\n{}",
        found.len(),
        found.join("\n")
    );
}
