//! PaddleJob (`kubeflow.org/v1`).

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    JobStatus, ReplicaSpecs, RunPolicy, TrainingJob, training_job_accessors, training_kind,
};

training_kind! {
    /// A distributed PaddlePaddle training job: Workers only (collective mode) or Master and Workers
    /// (parameter-server mode).
    kind = "PaddleJob", version = "v1", plural = "paddlejobs", shortname = "paddlejob";
    #[kube(scale(
        spec_replicas_path = ".spec.paddleReplicaSpecs.Worker.replicas",
        status_replicas_path = ".status.replicaStatuses.Worker.active",
        label_selector_path = ".status.replicaStatuses.Worker.selector"
    ))]
    pub struct PaddleJobSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// Accepted for compatibility; v1's Paddle controller never acted on it either.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub elastic_policy: Option<PaddleElasticPolicy>,
        /// Replica specs keyed by Master and Worker (any case).
        pub paddle_replica_specs: ReplicaSpecs,
    }
}

/// Paddle elastic bounds (not acted upon, as in v1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaddleElasticPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::limits::MAX_REPLICAS))]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::limits::MAX_REPLICAS))]
    pub max_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
}

impl TrainingJob for PaddleJob {
    const REPLICA_SPECS_FIELD: &'static str = "paddleReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Master", "Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("paddle");
    const ELASTIC: bool = true;

    fn is_elastic(&self) -> bool {
        self.spec.elastic_policy.is_some()
    }

    training_job_accessors!(paddle_replica_specs);
}
