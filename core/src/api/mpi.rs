//! MPIJob (`kubeflow.org/v2beta1`, mpi-operator semantics: SSH, launcher as a Job).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    JobStatus, MPI_OPERATOR, MULTIKUEUE, ReplicaSpecs, Rule, RunPolicy, TrainingJob,
    training_job_accessors, training_kind,
};

training_kind! {
    /// An MPI job: one Launcher that reaches its Workers over SSH.
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
    const MANAGED_BY_VALUES: &'static [&'static str] = &[MPI_OPERATOR, MULTIKUEUE];

    training_job_accessors!(mpi_replica_specs);

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
