//! TrainJob: one training run, a runtime named by `runtimeRef` and what this run changes in it.

use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{GROUP, RuntimePatch, immutable};

/// The `managedBy` value meaning this cluster's TrainJob controller (trainset) runs the job.
pub const TRAINJOB_CONTROLLER: &str = "trainer.kubeflow.org/trainjob-controller";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainJob",
    plural = "trainjobs",
    namespaced,
    status = "TrainJobStatus",
    validation = kube::core::Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must match RFC 1035 DNS label format"),
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name must be no more than 63 characters"),
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.conditions[?(@.status==\"True\")].type"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    #[schemars(extend("x-kubernetes-validations" = immutable()))]
    pub runtime_ref: RuntimeRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = immutable()))]
    pub initializer: Option<Initializer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = immutable()))]
    pub trainer: Option<Trainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["manager"])
    )]
    pub runtime_patches: Vec<RuntimePatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub suspend: Option<bool>,
    /// Seconds from creation (or the last resume) before the job fails with `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("x-kubernetes-validations" = immutable()))]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        extend(
            "default" = TRAINJOB_CONTROLLER,
            "x-kubernetes-validations" = [
                {
                    "rule": "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']",
                    "message": "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
                },
                {"rule": "self == oldSelf", "message": "field is immutable"}
            ]
        )
    )]
    pub managed_by: Option<String>,
}

/// The runtime a TrainJob uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = GROUP))]
    pub api_group: Option<String>,
    /// `ClusterTrainingRuntime` (the default) or `TrainingRuntime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "ClusterTrainingRuntime"))]
    pub kind: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Initializer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<InitializerSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<InitializerSource>,
}

/// Where an initializer fetches a dataset or model from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializerSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 2048),
        extend("x-kubernetes-validations" = [{
            "rule": "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
            "message": "storageUri may be empty, or it must be a valid URI (scheme://...)"
        }])
    )]
    pub storage_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// What this run sets on the runtime's trainer (`node` container).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        inner(length(max = 1_048_576)),
        extend("x-kubernetes-list-type" = "atomic")
    )]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        inner(length(max = 1_048_576)),
        extend("x-kubernetes-list-type" = "atomic")
    )]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    /// Merged into the `node` container's resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
}

/// v2's status: conditions `Suspended`, `Complete` and `Failed` only, and the JobSet's counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 8),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub jobs_status: Vec<JobStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_status: Option<TrainerStatus>,
    /// When the TrainJob's JobSet first ran unsuspended (trainset's, additive: Trainer v2.3.0
    /// has no such field, KEP-2899 proposes it; clients that do not know it ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the TrainJob became `Complete` or `Failed` (trainset's, additive like `startTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// Counts of the Jobs (not pods) of one replicated job, copied from the JobSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(range(min = 0))]
    pub ready: i32,
    #[schemars(range(min = 0))]
    pub succeeded: i32,
    #[schemars(range(min = 0))]
    pub failed: i32,
    #[schemars(range(min = 0))]
    pub active: i32,
    #[schemars(range(min = 0))]
    pub suspended: i32,
}

/// Progress a trainer reports (Trainer's alpha status server; trainset does not serve it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.lastUpdatedTime)",
    "message": "lastUpdatedTime is required when trainerStatus is present"
}]))]
pub struct TrainerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress_percentage: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub estimated_remaining_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), extend("x-kubernetes-list-type" = "atomic"))]
    pub metrics: Vec<Metric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_time: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Metric {
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    #[schemars(length(min = 1, max = 64))]
    pub value: String,
}
