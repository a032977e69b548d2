//! PaddleJob: collective mode (workers only) or parameter-server mode (a master).

use k8s_openapi::api::core::v1::EnvVar;

use super::{Context, Framework, Group, MasterRole, Success, env};
use crate::api::{PaddleJob, RestartPolicy};

pub struct Paddle;

super::compiles_with!(PaddleJob, Paddle);

impl Framework for Paddle {
    type Job = PaddleJob;
    const FRAMEWORK: &'static str = "paddle";
    const REPLICA_SELECTOR: bool = true;
    const OPERATOR_NAME: &'static str = "paddlejob-controller";
    const PORT: Option<(&'static str, i32)> = Some(("master", 36543));

    fn master_role(_ctx: &Context<'_, PaddleJob>, group: &Group<'_>) -> MasterRole {
        MasterRole::type_is(group, "Master")
    }

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::OnFailure
    }

    /// `PADDLE_MASTER` is the rank-0 pod's address for every pod (v1 gave rank 0 its own pod
    /// IP, which names the same pod).
    fn env(ctx: &Context<'_, PaddleJob>, group: &Group<'_>) -> Vec<EnvVar> {
        let master = ctx.group("Master");
        let mut vars = vec![
            env::value("PYTHONUNBUFFERED", "1"),
            env::value("PADDLE_JOB_ID", ctx.name()),
            env::value("PADDLE_NNODES", ctx.total_replicas().to_string()),
        ];
        if let Some(rank0) = master.or_else(|| ctx.group("Worker")) {
            vars.push(env::value(
                "PADDLE_MASTER",
                format!("{}:{}", ctx.address(rank0, 0), rank0.port.unwrap_or(36543)),
            ));
        }
        if master.is_some() {
            match group.replica_type {
                "Master" => vars.push(env::value("PADDLE_SERVER_NUM", "1")),
                _ => vars.push(env::value("PADDLE_TRAINER_NUM", "1")),
            }
        }
        vars
    }

    fn success(ctx: &Context<'_, PaddleJob>) -> Success {
        if ctx.group("Master").is_some() {
            Success::all_of(&["master"])
        } else {
            Success::all_of(&["worker"])
        }
    }
}
