//! The runtime snapshot: the runtime a TrainJob started from, kept beside it in the ConfigMap
//! `<trainjob>-runtime-snapshot` (key `runtime`, the runtime object as YAML), as Trainer v2.3.0
//! keeps it (KEP-2599). A JobSet made again, or resumed, comes from the snapshot, so editing or
//! deleting a runtime never changes a TrainJob that already started.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::RuntimeKind;
use crate::api::trainer::{AnyRuntime, ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use crate::compile::meta::{MANAGED_BY, Owner, TRAINSET};

/// The ConfigMap key holding the runtime.
pub const KEY: &str = "runtime";

/// `<trainjob>-runtime-snapshot`.
pub fn name(job: &str) -> String {
    format!("{job}-runtime-snapshot")
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("ConfigMap {name} has no key {KEY:?}")]
    Missing { name: String },
    #[error("ConfigMap {name}, key {KEY:?}: {message}")]
    Malformed { name: String, message: String },
    #[error("ConfigMap {name} holds {found}, not the {wanted} the TrainJob names")]
    Other {
        name: String,
        found: String,
        wanted: String,
    },
}

/// The snapshot of `runtime` for `job`, owned by the job. Only what the runtime says is kept: its
/// kind, name, labels, annotations and spec (no uid, version or managed fields).
pub fn snapshot(job: &TrainJob, runtime: &AnyRuntime) -> Result<ConfigMap, serde_norway::Error> {
    let kept = |meta: &ObjectMeta| ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..ObjectMeta::default()
    };
    let text = match runtime {
        AnyRuntime::Cluster(r) => serde_norway::to_string(&ClusterTrainingRuntime {
            metadata: kept(&r.metadata),
            ..r.clone()
        }),
        AnyRuntime::Namespaced(r) => serde_norway::to_string(&TrainingRuntime {
            metadata: kept(&r.metadata),
            ..r.clone()
        }),
    }?;
    let owner = Owner::of(job, job.namespace().unwrap_or_default());
    let labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
    Ok(ConfigMap {
        metadata: owner.object_meta(name(&job.name_any()), labels),
        data: Some(BTreeMap::from([(KEY.to_owned(), text)])),
        ..ConfigMap::default()
    })
}

/// The runtime a snapshot holds, which must be the one `kind`/`runtime_name` names.
pub fn restore(
    config_map: &ConfigMap,
    kind: RuntimeKind,
    runtime_name: &str,
) -> Result<AnyRuntime, SnapshotError> {
    let name = config_map.name_any();
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(KEY))
        .ok_or_else(|| SnapshotError::Missing { name: name.clone() })?;
    let malformed = |message: String| SnapshotError::Malformed {
        name: name.clone(),
        message,
    };
    let value: serde_json::Value =
        serde_norway::from_str(text).map_err(|e| malformed(e.to_string()))?;
    let found = format!(
        "{} {}",
        value["kind"].as_str().unwrap_or("no kind"),
        value["metadata"]["name"]
            .as_str()
            .unwrap_or("without a name")
    );
    let wanted = format!("{kind} {runtime_name}");
    if found != wanted {
        return Err(SnapshotError::Other {
            name,
            found,
            wanted,
        });
    }
    let runtime = match kind {
        RuntimeKind::Cluster => serde_json::from_value(value).map(AnyRuntime::Cluster),
        RuntimeKind::Namespaced => serde_json::from_value(value).map(AnyRuntime::Namespaced),
    }
    .map_err(|e| malformed(e.to_string()))?;
    Ok(runtime)
}
