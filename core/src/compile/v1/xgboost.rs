//! XGBoostJob: rabit/LightGBM env in every container; workers use the rank-offset layout so
//! `RANK` is the JobSet's global job index (master 0, workers 1..N).

use k8s_openapi::api::core::v1::EnvVar;

use super::{Context, Framework, Group, Layout, MasterRole, Success, env};
use crate::api::{RestartPolicy, XGBoostJob};

pub struct XGBoost;

super::compiles_with!(XGBoostJob, XGBoost);

impl Framework for XGBoost {
    type Job = XGBoostJob;
    const FRAMEWORK: &'static str = "xgboost";
    const OPERATOR_NAME: &'static str = "xgboostjob-controller";
    const PORT: Option<(&'static str, i32)> = Some(("xgboostjob-port", 9999));

    fn master_role(_ctx: &Context<'_, XGBoostJob>, group: &Group<'_>) -> MasterRole {
        MasterRole::type_is(group, "Master")
    }

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::Never
    }

    fn layout(_job: &XGBoostJob, replica_type: &str) -> Layout {
        if replica_type == "Worker" {
            Layout::RankOffset
        } else {
            Layout::Indexed
        }
    }

    fn env(ctx: &Context<'_, XGBoostJob>, _group: &Group<'_>) -> Vec<EnvVar> {
        let Some(master) = ctx.group("Master") else {
            return Vec::new();
        };
        let total = ctx.total_replicas();
        let mut vars = vec![
            env::value("MASTER_PORT", master.port.unwrap_or(9999).to_string()),
            env::value("MASTER_ADDR", ctx.address(master, 0)),
            env::value("WORLD_SIZE", total.to_string()),
            env::field("RANK", env::GLOBAL_INDEX_PATH),
            env::value("PYTHONUNBUFFERED", "1"),
        ];
        if total > 1
            && let Some(worker) = ctx.group("Worker")
        {
            // v1 lists total-1 worker addresses, for LightGBM.
            let addresses: Vec<String> = (0..total - 1).map(|i| ctx.address(worker, i)).collect();
            vars.push(env::value(
                "WORKER_PORT",
                worker.port.unwrap_or(9999).to_string(),
            ));
            vars.push(env::value("WORKER_ADDRS", addresses.join(",")));
        }
        vars
    }

    fn success(_ctx: &Context<'_, XGBoostJob>) -> Success {
        Success::all_of(&["master"])
    }
}
