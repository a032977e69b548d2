//! XGBoostJob (`kubeflow.org/v1`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    JobStatus, MULTIKUEUE, ReplicaSpecs, Rule, RunPolicy, TRAINING_OPERATOR, TrainingJob,
    training_job_accessors,
};

/// A distributed XGBoost (or LightGBM) training job: one Master and any number of Workers.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "XGBoostJob",
    plural = "xgboostjobs",
    shortname = "xgboostjob",
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
pub struct XGBoostJobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    /// Replica specs keyed by Master (required, exactly 1) and Worker (any case).
    #[serde(rename = "xgbReplicaSpecs")]
    pub xgb_replica_specs: ReplicaSpecs,
}

impl TrainingJob for XGBoostJob {
    const REPLICA_SPECS_FIELD: &'static str = "xgbReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Master", "Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("xgboost");
    const MANAGED_BY_VALUES: &'static [&'static str] = &[TRAINING_OPERATOR, MULTIKUEUE];

    training_job_accessors!(xgb_replica_specs);

    fn extra_rules() -> Vec<Rule> {
        vec![
            Rule::on_replica_specs(
                "self.exists(k, k.lowerAscii() == 'master')",
                "a Master replica spec is required",
            ),
            Rule::on_replica_specs(
                "self.all(k, k.lowerAscii() != 'master' || !has(self[k].replicas) || self[k].replicas == 1)",
                "Master replicas must be exactly 1",
            ),
        ]
    }
}
