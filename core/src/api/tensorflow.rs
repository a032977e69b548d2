//! TFJob (`kubeflow.org/v1`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    JobStatus, ReplicaSpecs, Rule, RunPolicy, TrainingJob, training_job_accessors, training_kind,
};

training_kind! {
    /// A distributed TensorFlow training job: Chief (or Master), PS, Worker and Evaluator replicas.
    kind = "TFJob", version = "v1", plural = "tfjobs", shortname = "tfjob";
    pub struct TFJobSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// When the job succeeds without a Chief/Master: "" (default, worker 0 succeeded) or
        /// "AllWorkers".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub success_policy: Option<TFSuccessPolicy>,
        /// Replica specs keyed by Chief, Master, PS, Worker or Evaluator (any case).
        #[serde(rename = "tfReplicaSpecs")]
        pub tf_replica_specs: ReplicaSpecs,
        /// Gives each worker a sparse TF_CONFIG (its own address and the PS addresses), so workers
        /// can come and go.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub enable_dynamic_worker: Option<bool>,
    }
}

/// TFJob success policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TFSuccessPolicy {
    /// Worker 0 succeeding completes the job.
    #[serde(rename = "")]
    Default,
    /// Every worker must succeed.
    AllWorkers,
}

impl TrainingJob for TFJob {
    const REPLICA_SPECS_FIELD: &'static str = "tfReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] =
        &["Chief", "Master", "PS", "Worker", "Evaluator"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("tensorflow");

    training_job_accessors!(tf_replica_specs);

    fn extra_rules() -> Vec<Rule> {
        vec![Rule::on_replica_specs(
            "size(self.filter(k, k.lowerAscii() in ['chief', 'master'])) <= 1",
            "at most one of Chief and Master may be given",
        )]
    }
}
