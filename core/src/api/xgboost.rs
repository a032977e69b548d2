//! XGBoostJob (`kubeflow.org/v1`).

use super::{
    JobStatus, ReplicaSpecs, Rule, RunPolicy, TrainingJob, training_job_accessors, training_kind,
};

training_kind! {
    /// A distributed XGBoost (or LightGBM) training job: one Master and any number of Workers.
    kind = "XGBoostJob", version = "v1", plural = "xgboostjobs", shortname = "xgboostjob";
    pub struct XGBoostJobSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// Replica specs keyed by Master (required, exactly 1) and Worker (any case).
        #[serde(rename = "xgbReplicaSpecs")]
        pub xgb_replica_specs: ReplicaSpecs,
    }
}

impl TrainingJob for XGBoostJob {
    const REPLICA_SPECS_FIELD: &'static str = "xgbReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Master", "Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("xgboost");

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
