//! MPIJob, served at two versions of one CRD: `kubeflow.org/v2beta1` (mpi-operator's API: the
//! launcher reaches its workers over SSH) and `kubeflow.org/v1` (training-operator v1's: over
//! `kubectl exec`). Both versions have one schema, the union of the two APIs, so that the
//! apiserver, which stores both alike and converts by rewriting `apiVersion` alone, prunes
//! nothing whichever version an object is written or read in; the version a job was created
//! through decides how it runs ([`MPIJob::api`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    API_VERSION_ANNOTATION, CleanPodPolicy, JobStatus, MPI_OPERATOR, ReplicaSpecs, Rule, RunPolicy,
    TRAINING_OPERATOR, TrainingJob, training_job_accessors, training_kind,
};

training_kind! {
    /// An MPI job: one Launcher that starts the ranks on its Workers.
    kind = "MPIJob", version = "v2beta1", plural = "mpijobs", shortname = "mpij";
    pub struct MPIJobSpec {
        /// Slots per worker in the hostfile. Defaults to 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = super::limits::MAX_SLOTS_PER_WORKER))]
        pub slots_per_worker: Option<i32>,
        /// Lists the launcher in the hostfile too, so it runs ranks itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_launcher_as_worker: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// Replica specs keyed by Launcher (required, exactly 1) and Worker (any case).
        #[serde(rename = "mpiReplicaSpecs")]
        pub mpi_replica_specs: ReplicaSpecs,
        /// Where the SSH key pair is mounted. Defaults to /root/.ssh.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ssh_auth_mount_path: Option<String>,
        /// AtStartup (default) or WaitForWorkersReady.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub launcher_creation_policy: Option<LauncherCreationPolicy>,
        /// OpenMPI (default), Intel or MPICH.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mpi_implementation: Option<MPIImplementation>,
        /// `kubeflow.org/v1` only: the container of each worker that `kubexec.sh` runs the
        /// launcher's commands in. Unset, `kubectl exec` picks the pod's default container.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub main_container: Option<String>,
        /// `kubeflow.org/v1` only, deprecated there: `runPolicy.cleanPodPolicy` wins when both
        /// are set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub clean_pod_policy: Option<CleanPodPolicy>,
    }
}

/// The MPIJob API a job was created through, which decides how it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpiApi {
    /// mpi-operator's `kubeflow.org/v2beta1`: SSH between the pods, the key in a Secret.
    V2beta1,
    /// training-operator v1's `kubeflow.org/v1`: the launcher runs its commands on the workers
    /// through the API server (`kubectl exec`), with a Role of its own.
    V1,
}

impl MpiApi {
    pub fn version(self) -> &'static str {
        match self {
            Self::V2beta1 => "v2beta1",
            Self::V1 => "v1",
        }
    }

    /// The spec fields only the other API has: a job of this API that sets one is refused.
    pub fn foreign_fields(self, spec: &MPIJobSpec) -> Vec<&'static str> {
        let fields: &[(&'static str, bool)] = match self {
            Self::V1 => &[
                ("runLauncherAsWorker", spec.run_launcher_as_worker.is_some()),
                ("sshAuthMountPath", spec.ssh_auth_mount_path.is_some()),
                (
                    "launcherCreationPolicy",
                    spec.launcher_creation_policy.is_some(),
                ),
                ("mpiImplementation", spec.mpi_implementation.is_some()),
            ],
            Self::V2beta1 => &[
                ("mainContainer", spec.main_container.is_some()),
                ("cleanPodPolicy", spec.clean_pod_policy.is_some()),
            ],
        };
        fields
            .iter()
            .filter_map(|&(field, set)| set.then_some(field))
            .collect()
    }
}

impl MPIJob {
    /// The API this job was created through: `v1` when [`API_VERSION_ANNOTATION`] says so, else
    /// the storage version, `v2beta1` (every MPIJob made before trainset served `v1`).
    pub fn api(&self) -> MpiApi {
        match self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(API_VERSION_ANNOTATION))
            .map(String::as_str)
        {
            Some("v1") => MpiApi::V1,
            _ => MpiApi::V2beta1,
        }
    }
}

/// When the launcher is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LauncherCreationPolicy {
    AtStartup,
    WaitForWorkersReady,
}

/// The MPI implementation the images use; decides env and hostfile format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MPIImplementation {
    OpenMPI,
    Intel,
    #[serde(rename = "MPICH")]
    Mpich,
}

impl TrainingJob for MPIJob {
    const REPLICA_SPECS_FIELD: &'static str = "mpiReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Launcher", "Worker"];
    /// mpi-operator requires no container name; trainset uses container 0.
    const DEFAULT_CONTAINER: Option<&'static str> = None;
    const MANAGED_HERE: &'static [&'static str] = &[MPI_OPERATOR, TRAINING_OPERATOR];
    const ALSO_SERVED_AT: &'static [&'static str] = &["v1"];

    training_job_accessors!(mpi_replica_specs);

    /// `runPolicy`'s, else (`v1`) the deprecated top-level one.
    fn clean_pod_policy(&self) -> Option<CleanPodPolicy> {
        self.run_policy()
            .and_then(|p| p.clean_pod_policy)
            .or(self.spec.clean_pod_policy)
    }

    fn extra_rules() -> Vec<Rule> {
        vec![
            Rule::on_replica_specs(
                "self.exists(k, k.lowerAscii() == 'launcher')",
                "a Launcher replica spec is required",
            ),
            Rule::on_field(
                "sshAuthMountPath",
                "self.startsWith('/')",
                "sshAuthMountPath must be an absolute path",
            ),
            Rule::on_replica_specs(
                "self.all(k, k.lowerAscii() != 'launcher' || !has(self[k].replicas) || self[k].replicas == 1)",
                "Launcher replicas must be exactly 1",
            ),
        ]
    }
}
