//! MPIJob: one kind, two APIs. A job runs as the API it was created through says
//! ([`MPIJob::api`]): mpi-operator's `v2beta1` over SSH ([`super::mpi_ssh`]), training-operator
//! v1's `v1` over `kubectl exec` ([`super::mpi_kubectl_exec`]); what both share of the job's
//! ConfigMap is in [`super::mpi_config`].

use super::mpi_kubectl_exec::MpiKubectlExec;
use super::mpi_ssh::MpiSsh;
use super::{Compile, CompileError, Compiled, Framework, Options, compile};
use crate::api::{MPIJob, MpiApi};

impl Compile for MPIJob {
    const FRAMEWORK: &'static str = MpiSsh::FRAMEWORK;
    const OPERATOR_NAMES: &'static [&'static str] =
        &[MpiSsh::OPERATOR_NAME, MpiKubectlExec::OPERATOR_NAME];
    const NEEDS_SSH_KEY: bool = true;
    const REPLICA_SELECTOR: bool = false;

    fn operator_name(&self) -> &'static str {
        match self.api() {
            MpiApi::V2beta1 => MpiSsh::OPERATOR_NAME,
            MpiApi::V1 => MpiKubectlExec::OPERATOR_NAME,
        }
    }

    fn detailed_failure_reason(&self) -> bool {
        match self.api() {
            MpiApi::V2beta1 => MpiSsh::DETAILED_FAILURE_REASON,
            MpiApi::V1 => MpiKubectlExec::DETAILED_FAILURE_REASON,
        }
    }

    fn needs_ssh_key(&self) -> bool {
        match self.api() {
            MpiApi::V2beta1 => MpiSsh::NEEDS_SSH_KEY,
            MpiApi::V1 => MpiKubectlExec::NEEDS_SSH_KEY,
        }
    }

    fn launcher_job_before(&self) -> bool {
        self.api() == MpiApi::V2beta1
    }

    fn exec_targets(&self) -> Option<&'static str> {
        (self.api() == MpiApi::V1).then_some(super::mpi_kubectl_exec::EXEC_TARGETS)
    }

    /// One schema serves both APIs, so a field of the other one is refused here, naming it, as
    /// the other API's CRD would have refused it.
    fn compile(&self, options: &Options<'_>) -> Result<Compiled, CompileError> {
        let api = self.api();
        if let Some(field) = api.foreign_fields(&self.spec).first() {
            let other = match api {
                MpiApi::V2beta1 => MpiApi::V1,
                MpiApi::V1 => MpiApi::V2beta1,
            };
            return Err(CompileError::invalid(
                format!("spec.{field}"),
                format!(
                    "a field of MPIJob kubeflow.org/{}, not of kubeflow.org/{}, which this job \
                     was created as",
                    other.version(),
                    api.version()
                ),
            ));
        }
        match api {
            MpiApi::V2beta1 => compile::<MpiSsh>(self, options),
            MpiApi::V1 => compile::<MpiKubectlExec>(self, options),
        }
    }
}
