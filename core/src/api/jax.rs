//! JAXJob (`kubeflow.org/v1`).

use super::{
    JobStatus, ReplicaSpecs, RunPolicy, TrainingJob, training_job_accessors, training_kind,
};

training_kind! {
    /// A distributed JAX training job: Workers only; worker 0 is the coordinator.
    kind = "JAXJob", version = "v1", plural = "jaxjobs", shortname = "jaxjob";
    #[kube(scale(
        spec_replicas_path = ".spec.jaxReplicaSpecs.Worker.replicas",
        status_replicas_path = ".status.replicaStatuses.Worker.active",
        label_selector_path = ".status.replicaStatuses.Worker.selector"
    ))]
    pub struct JAXJobSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// Replica specs keyed by Worker (any case).
        pub jax_replica_specs: ReplicaSpecs,
    }
}

impl TrainingJob for JAXJob {
    const REPLICA_SPECS_FIELD: &'static str = "jaxReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("jax");

    training_job_accessors!(jax_replica_specs);
}
