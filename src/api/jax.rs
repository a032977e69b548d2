//! JAXJob (`kubeflow.org/v1`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    JobStatus, MULTIKUEUE, ReplicaSpecs, RunPolicy, TRAINING_OPERATOR, TrainingJob,
    training_job_accessors,
};

/// A distributed JAX training job: Workers only; worker 0 is the coordinator.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "JAXJob",
    plural = "jaxjobs",
    shortname = "jaxjob",
    category = "kubeflow",
    category = "all",
    namespaced,
    status = "JobStatus",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.state",
        description = "Current state"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct JAXJobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    /// Replica specs keyed by Worker (any case).
    pub jax_replica_specs: ReplicaSpecs,
}

impl TrainingJob for JAXJob {
    const REPLICA_SPECS_FIELD: &'static str = "jaxReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("jax");
    const MANAGED_BY_VALUES: &'static [&'static str] = &[TRAINING_OPERATOR, MULTIKUEUE];

    training_job_accessors!(jax_replica_specs);
}
