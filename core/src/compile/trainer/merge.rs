//! The part of Kubernetes' strategic merge patch that runtime patches and `resourcesPerNode` need
//! (Trainer v2.3.0 applies both with `strategicpatch.StrategicMergePatch` on the JobSet and core
//! types): objects merge key by key, a `null` removes a key, a list of named things merges item by
//! item on its merge key, and every other list is replaced whole.

use serde_json::Value;

/// The merge key of each list that has one, by field name (the `patchMergeKey` struct tags of
/// k8s.io/api and JobSet v0.12.0 for the fields a pod, Job or JobSet template can hold).
const MERGE_KEYS: &[(&str, &str)] = &[
    ("replicatedJobs", "name"),
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("volumes", "name"),
    ("imagePullSecrets", "name"),
    ("schedulingGates", "name"),
    ("resourceClaims", "name"),
    ("claims", "name"),
    ("env", "name"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("ports", "containerPort"),
    ("hostAliases", "ip"),
    ("topologySpreadConstraints", "topologyKey"),
];

fn merge_key(field: &str) -> Option<&'static str> {
    MERGE_KEYS
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, key)| *key)
}

/// Merges `patch` into `base`.
pub fn merge(base: &mut Value, patch: &Value) {
    let (Value::Object(base), Value::Object(patch)) = (&mut *base, patch) else {
        *base = patch.clone();
        return;
    };
    for (field, change) in patch {
        if change.is_null() {
            base.remove(field);
            continue;
        }
        match (base.get_mut(field), change, merge_key(field)) {
            (Some(current @ Value::Object(_)), Value::Object(_), _) => merge(current, change),
            (Some(Value::Array(items)), Value::Array(changes), Some(key)) => {
                for change in changes {
                    match items
                        .iter_mut()
                        .find(|item| item.get(key) == change.get(key))
                    {
                        Some(item) => merge(item, change),
                        None => items.push(change.clone()),
                    }
                }
            }
            _ => {
                base.insert(field.clone(), change.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge;

    #[test]
    fn maps_merge_named_lists_merge_other_lists_are_replaced_null_removes() {
        let mut base = json!({
            "labels": {"a": "1", "b": "2"},
            "containers": [
                {"name": "node", "image": "x", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "y"}
            ],
            "tolerations": [{"key": "old"}],
            "nodeSelector": {"pool": "cpu"},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]
        });
        merge(
            &mut base,
            &json!({
                "labels": {"b": "3", "c": "4"},
                "containers": [
                    {"name": "node", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "1"}]},
                    {"name": "new", "image": "z"}
                ],
                "tolerations": [{"key": "new"}],
                "nodeSelector": null,
                "volumeMounts": [{"name": "data2", "mountPath": "/data"}]
            }),
        );
        assert_eq!(
            base,
            json!({
                "labels": {"a": "1", "b": "3", "c": "4"},
                "containers": [
                    {"name": "node", "image": "x", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "1"}]},
                    {"name": "side", "image": "y"},
                    {"name": "new", "image": "z"}
                ],
                "tolerations": [{"key": "new"}],
                "volumeMounts": [{"name": "data2", "mountPath": "/data"}]
            })
        );
    }
}
