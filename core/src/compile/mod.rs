//! Compiles a training job into one JobSet (and, for MPI, its hostfile ConfigMap and SSH
//! Secret). Pure: no client, no I/O, no panic on any input, deterministic output. Each family has
//! its compiler ([`v1`], [`trainer`]); what both share is here and in `bounds`, `env`, `meta` and
//! `ssh`.

pub mod bounds;
mod env;
pub mod gang;
mod meta;
pub mod ssh;
pub mod trainer;
pub mod v1;

use jobset_types::JobSet;
use kube::core::DynamicObject;

use gang::GangScheduler;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::Value;

pub use meta::{
    JOB_NAME, JOB_ROLE, MANAGED_BY, MASTER_REPLICA_INDEX, OPERATOR_NAME, Owner, REPLICA_INDEX,
    REPLICA_INDEX_OFFSET, REPLICA_TYPE, TRAINSET,
};
pub use ssh::SshKeyPair;

/// Why a training job cannot be compiled. Every message starts with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("{path}: {message}")]
    Malformed { path: String, message: String },
    #[error("apiVersion/kind: {kind} is not a training kind trainset serves ({served})")]
    NotATrainingKind {
        /// `<apiVersion>/<kind>` as the manifest gave them.
        kind: String,
        /// The kinds that are, as [`crate::kinds::served`] names them.
        served: String,
    },
    #[error(
        "spec: the compiled {kind} would take {bytes} bytes, more than the {max} an object may take (fewer replicas, or shorter names and templates, make it fit)",
        max = bounds::MAX_OBJECT_BYTES
    )]
    TooLarge { kind: String, bytes: usize },
    #[error("MPIJob {name}: compiling needs an SSH key pair for the <name>-ssh Secret")]
    MissingSshKey { name: String },
}

impl CompileError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// What one training job compiles to.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub jobset: JobSet,
    /// MPI only: an MPIJob's `<name>-config` (hostfile and `discover_hosts.sh`), a TrainJob's
    /// `<name>-mpi-hostfile`.
    pub config_map: Option<ConfigMap>,
    /// MPI only: `<name>-ssh` (MPIJob) or `<name>-mpi-ssh-auth` (TrainJob), type
    /// `kubernetes.io/ssh-auth`.
    pub secret: Option<Secret>,
    /// MPIJob `kubeflow.org/v1` only: the launcher's identity and what it may do.
    pub launcher_access: Option<LauncherAccess>,
    /// The gang scheduler's objects (a PodGroup, or a Workload and its PodGroups), created
    /// before the JobSet, in this order.
    pub gang: Vec<DynamicObject>,
    /// The HorizontalPodAutoscaler of `elasticPolicy.metrics` (PyTorchJob): not made with the
    /// JobSet, but by the plan while the job runs (`crate::autoscaler`).
    pub autoscaler: Option<HorizontalPodAutoscaler>,
}

impl Compiled {
    /// Every object as JSON, the JobSet first.
    pub fn objects(&self) -> Result<Vec<Value>, serde_json::Error> {
        let mut objects = vec![serde_json::to_value(&self.jobset)?];
        if let Some(config_map) = &self.config_map {
            objects.push(serde_json::to_value(config_map)?);
        }
        if let Some(secret) = &self.secret {
            objects.push(serde_json::to_value(secret)?);
        }
        if let Some(access) = &self.launcher_access {
            if let Some(account) = &access.service_account {
                objects.push(serde_json::to_value(account)?);
            }
            objects.push(serde_json::to_value(&access.role)?);
            objects.push(serde_json::to_value(&access.role_binding)?);
        }
        for object in &self.gang {
            objects.push(serde_json::to_value(object)?);
        }
        if let Some(autoscaler) = &self.autoscaler {
            objects.push(serde_json::to_value(autoscaler)?);
        }
        Ok(objects)
    }
}

/// What the launcher of an MPIJob `kubeflow.org/v1` runs as: `<name>-launcher`, a
/// ServiceAccount of that name unless the launcher's template names its own, a Role that lets it
/// read the namespace's pods and exec into this job's workers, and the binding of the two.
#[derive(Clone, Debug)]
pub struct LauncherAccess {
    /// `None` when the launcher's template names a ServiceAccount: that one is bound, not made.
    pub service_account: Option<ServiceAccount>,
    pub role: Role,
    pub role_binding: RoleBinding,
}

/// The image v1's launcher gets `kubectl` from, unless trainset is told another
/// (`--mpi-kubectl-delivery-image`): training-operator v1.9.4's default.
pub const DEFAULT_KUBECTL_DELIVERY_IMAGE: &str =
    "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest";

/// Inputs that are not part of the training job.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// Namespace for a job whose manifest names none.
    pub default_namespace: Option<&'a str>,
    /// The key pair for an MPIJob's SSH Secret; required for MPIJob.
    pub ssh_key: Option<&'a SshKeyPair>,
    /// v1's `CUSTOM_CLUSTER_DOMAIN` (an operator setting): appended to TF_CONFIG's endpoints.
    pub cluster_domain: Option<&'a str>,
    /// The gang scheduler v1 jobs are placed by (`--gang-scheduler`); none when `None`.
    pub gang_scheduler: Option<&'a GangScheduler>,
    /// The image of an MPIJob `kubeflow.org/v1` launcher's `kubectl-delivery` init container;
    /// [`DEFAULT_KUBECTL_DELIVERY_IMAGE`] when `None`.
    pub kubectl_delivery_image: Option<&'a str>,
}

/// Deserializes a manifest into its kind, naming the field at fault on error.
pub fn parse<K: serde::de::DeserializeOwned>(manifest: Value) -> Result<K, CompileError> {
    serde_path_to_error::deserialize(manifest).map_err(|error| CompileError::Malformed {
        path: error.path().to_string(),
        message: error.inner().to_string(),
    })
}
