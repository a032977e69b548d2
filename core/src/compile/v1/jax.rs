//! JAXJob: workers only; worker 0 coordinates.

use k8s_openapi::api::core::v1::EnvVar;

use super::{Context, Framework, Group, MasterRole, Success, env};
use crate::api::{JAXJob, RestartPolicy};

pub struct Jax;

super::compiles_with!(JAXJob, Jax);

impl Framework for Jax {
    type Job = JAXJob;
    const FRAMEWORK: &'static str = "jax";
    const REPLICA_SELECTOR: bool = true;
    const OPERATOR_NAME: &'static str = "jaxjob-controller";
    const PORT: Option<(&'static str, i32)> = Some(("jaxjob-port", 6666));

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::Never
    }

    /// v1 marks the pod of index 0, whatever its type.
    fn master_role(_ctx: &Context<'_, JAXJob>, _group: &Group<'_>) -> MasterRole {
        MasterRole::FirstPod
    }

    fn env(ctx: &Context<'_, JAXJob>, group: &Group<'_>) -> Vec<EnvVar> {
        vec![
            env::value("PYTHONUNBUFFERED", "1"),
            env::value("COORDINATOR_PORT", group.port.unwrap_or(6666).to_string()),
            env::value("COORDINATOR_ADDRESS", ctx.address(group, 0)),
            env::value("NUM_PROCESSES", ctx.total_replicas().to_string()),
            env::field("PROCESS_ID", group.index_path()),
        ]
    }

    fn success(_ctx: &Context<'_, JAXJob>) -> Success {
        Success::all_of(&["worker"])
    }
}
