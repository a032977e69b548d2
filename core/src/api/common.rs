//! Types every Kubeflow training kind shares: replica specs, run policy and job status, with the
//! `kubeflow.org/v1` field names and wire shapes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Replica specs keyed by replica type (`Worker`, `PS`, ...). Keys are matched case-insensitively,
/// as v1 does, and kept exactly as the user wrote them. Each spec is boxed: a B-tree node holds
/// room for 11 values, and a spec with its pod template is 1.8 KB inline, so unboxed a job of two
/// replica types kept 20 KB in the controller's store (heap profile, docs/benchmarks.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct ReplicaSpecs(pub BTreeMap<String, Box<ReplicaSpec>>);

impl ReplicaSpecs {
    /// The spec whose key equals `replica_type` ignoring ASCII case.
    pub fn get(&self, replica_type: &str) -> Option<&ReplicaSpec> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(replica_type))
            .map(|(_, spec)| spec)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &ReplicaSpec)> {
        self.0.iter().map(|(key, spec)| (key, spec.as_ref()))
    }
}

/// How many pods of one replica type run, what they run and how they restart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of pods of this replica type. Defaults to 1 (MPIJob Worker: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::limits::MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// The pod template of every replica of this type; passed to the JobSet unchanged apart from
    /// the labels, env and restart policy trainset adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// Always, OnFailure, Never or ExitCode (Never, retrying exit codes >= 128). The default
    /// depends on the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

impl ReplicaSpec {
    /// The replica count after defaulting to `default`.
    pub fn replicas_or(&self, default: i32) -> i32 {
        self.replicas.unwrap_or(default)
    }
}

/// Restart policy of a replica type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
    /// Never restart in place; exit codes >= 128 are retried, 1-127 fail the job.
    ExitCode,
}

/// What happens to the pods once the job has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CleanPodPolicy {
    All,
    Running,
    None,
}

/// Runtime policies shared by every kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Which pods to delete once the job has finished: All, Running or None (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// Seconds after completion before the training job itself is deleted. Unset keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Seconds since startTime after which the job fails with DeadlineExceeded, counted across
    /// restarts and reset on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub active_deadline_seconds: Option<i64>,
    /// Retries of each Job before it is marked failed. Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    /// Gang-scheduling hints; priorityClass becomes the pods' priorityClassName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
    /// Suspends the job: its pods are deleted until it is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// The controller that reconciles this job. Any value other than trainset's own hands the job
    /// off (for example to MultiKueue). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// Gang-scheduling settings from v1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Becomes the priorityClassName of every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Observed state of a training job, in the v1 shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Created, Running, Restarting, Succeeded, Failed and Suspended, one entry per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<JobCondition>,
    /// Pod counts per replica type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_statuses: BTreeMap<String, ReplicaStatus>,
    /// When the job started running; reset when it is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job reached Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,
    /// One word for the current state: Created, Running, Restarting, Suspended, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// How many times the JobSet restarted the whole gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i32>,
    /// The JobSet trainset made for the job, once it made one: a JobSet missing later was lost
    /// (and is made again, saying so), where a job without one never had a JobSet of trainset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_set: Option<String>,
    /// Set on a job that another operator had started or finished when trainset first saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<Takeover>,
}

/// How trainset took a job over from the operator that ran it before (training-operator,
/// mpi-operator): docs/migration.md.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Takeover {
    /// The `training.kubeflow.org/operator-name` of the pods that operator made, when the job
    /// had any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_operator: Option<String>,
    /// True while pods that operator made run on: trainset follows them to the job's end and
    /// makes no JobSet. False once they are gone; the job then runs as trainset's own JobSet.
    #[serde(default)]
    pub following: bool,
}

/// One condition of a training job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// Created, Running, Restarting, Succeeded, Failed or Suspended.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// `<Kind><Reason>`, for example PyTorchJobRunning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Pod counts of one replica type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Deprecated in v1 and never set; kept so old objects round-trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Label selector of this replica type's pods, in string form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}
