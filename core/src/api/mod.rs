//! The training CRDs trainset serves: `kubeflow.org/v1` TFJob, PyTorchJob, XGBoostJob, PaddleJob,
//! JAXJob and `kubeflow.org/v2beta1` MPIJob, with every v1 field.

mod common;
pub mod jax;
pub mod limits;
pub mod mpi;
pub mod paddle;
pub mod pytorch;
pub mod tensorflow;
pub mod trainer;
mod validation;
pub mod xgboost;

pub use common::*;
pub use jax::JAXJob;
pub use mpi::{LauncherCreationPolicy, MPIImplementation, MPIJob, MpiApi};
pub use paddle::PaddleJob;
pub use pytorch::{ElasticPolicy, PyTorchJob, RdzvBackend};
pub use tensorflow::{TFJob, TFSuccessPolicy};
pub use validation::{Rule, with_rules};
pub use xgboost::XGBoostJob;

use kube::{CustomResourceExt, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The `runPolicy.managedBy` value that means trainset reconciles a `kubeflow.org/v1` job.
pub const TRAINING_OPERATOR: &str = "kubeflow.org/training-operator";
/// mpi-operator's own `managedBy` value; trainset serves MPIJob v2beta1 in its place.
pub const MPI_OPERATOR: &str = "kubeflow.org/mpi-operator";
/// MultiKueue's `managedBy` value: the job runs on a worker cluster, not here. Every kind's CRD
/// accepts it.
pub const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// Records the API version a job was created through, for a kind served at more than one
/// ([`TrainingJob::ALSO_SERVED_AT`]): the apiserver stores every version alike, and the version
/// decides how the job runs. Set at creation by the admission policy of `crate::api_version`
/// (and by `trainset render` from the manifest's apiVersion); absent means the storage version.
pub const API_VERSION_ANNOTATION: &str = "trainset.io/api-version";

/// An autoscaler's bounds and metrics for a job's Worker count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Autoscaling<'a> {
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub metrics: &'a [k8s_openapi::api::autoscaling::v2::MetricSpec],
}

/// What every training kind exposes to validation, compilation and status.
pub trait TrainingJob:
    Resource<DynamicType = ()> + CustomResourceExt + Serialize + DeserializeOwned + Clone
{
    /// The spec field that holds the replica specs, e.g. `tfReplicaSpecs`.
    const REPLICA_SPECS_FIELD: &'static str;
    /// Valid replica types in their canonical spelling.
    const REPLICA_TYPES: &'static [&'static str];
    /// The container that must exist in every replica and that carries the framework's port and
    /// exit code; `None` where the kind requires no name (MPIJob uses container 0).
    const DEFAULT_CONTAINER: Option<&'static str>;
    /// The `runPolicy.managedBy` values that mean trainset reconciles the job; the CRD accepts
    /// these and [`MULTIKUEUE`].
    const MANAGED_HERE: &'static [&'static str] = &[TRAINING_OPERATOR];
    /// Versions of `kubeflow.org` the kind is served at besides its own (the storage version),
    /// with the same schema; which one a job was created through is recorded in
    /// [`API_VERSION_ANNOTATION`].
    const ALSO_SERVED_AT: &'static [&'static str] = &[];
    /// Whether the kind has `elasticPolicy`: a running job's Worker count may then change within
    /// its bounds, and trainset resizes the Worker Job in place.
    const ELASTIC: bool = false;

    fn replica_specs(&self) -> &ReplicaSpecs;
    fn run_policy(&self) -> Option<&RunPolicy>;
    fn job_status(&self) -> Option<&JobStatus>;
    fn set_job_status(&mut self, status: JobStatus);

    /// Which pods to delete once the job has finished (`None`: keep them).
    fn clean_pod_policy(&self) -> Option<CleanPodPolicy> {
        self.run_policy().and_then(|p| p.clean_pod_policy)
    }

    /// Whether this job sets `elasticPolicy` (only kinds with [`TrainingJob::ELASTIC`] can).
    fn is_elastic(&self) -> bool {
        false
    }

    /// What an autoscaler of the job's Worker count is to do, when the job asks for one
    /// (a PyTorchJob's `elasticPolicy.metrics`).
    fn autoscaling(&self) -> Option<Autoscaling<'_>> {
        None
    }

    /// CEL rules beyond the ones every kind shares, each placed at a schema path.
    fn extra_rules() -> Vec<Rule> {
        Vec::new()
    }
}

/// Declares a training kind's spec struct with the CRD settings every kind shares: group
/// `kubeflow.org`, categories `kubeflow` and `all`, namespaced, status `JobStatus`, and the State
/// and Age printer columns. Further `#[kube(...)]` settings (PyTorchJob's scale subresource) go
/// after the header line.
macro_rules! training_kind {
    (
        $(#[doc = $doc:literal])*
        kind = $kind:literal, version = $version:literal, plural = $plural:literal, shortname = $short:literal;
        $(#[$extra:meta])*
        pub struct $spec:ident { $($body:tt)* }
    ) => {
        $(#[doc = $doc])*
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            Default,
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
            schemars::JsonSchema
        )]
        #[kube(
            group = "kubeflow.org",
            version = $version,
            kind = $kind,
            plural = $plural,
            shortname = $short,
            category = "kubeflow",
            category = "all",
            namespaced,
            status = "JobStatus",
            printcolumn(name = "State", type_ = "string", json_path = ".status.state", description = "Current state"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        $(#[$extra])*
        #[serde(rename_all = "camelCase")]
        pub struct $spec { $($body)* }
    };
}
pub(crate) use training_kind;

/// Implements the accessors of [`TrainingJob`] for a kind whose spec has `runPolicy` and the
/// given replica-spec field.
macro_rules! training_job_accessors {
    ($field:ident) => {
        fn replica_specs(&self) -> &$crate::api::ReplicaSpecs {
            &self.spec.$field
        }
        fn run_policy(&self) -> Option<&$crate::api::RunPolicy> {
            self.spec.run_policy.as_ref()
        }
        fn job_status(&self) -> Option<&$crate::api::JobStatus> {
            self.status.as_ref()
        }
        fn set_job_status(&mut self, status: $crate::api::JobStatus) {
            self.status = Some(status);
        }
    };
}
pub(crate) use training_job_accessors;
