//! TFJob: `TF_CONFIG` in the `tensorflow` container of every pod of a distributed job.

use k8s_openapi::api::batch::v1::{SuccessPolicy as JobSuccessPolicy, SuccessPolicyRule};
use k8s_openapi::api::core::v1::EnvVar;
use serde_json::{Map, Value, json};

use super::{Context, Framework, Group, MasterRole, Success, env};
use crate::api::{RestartPolicy, TFJob, TFSuccessPolicy};

pub struct TensorFlow;

super::compiles_with!(TFJob, TensorFlow);

impl Framework for TensorFlow {
    type Job = TFJob;
    const FRAMEWORK: &'static str = "tensorflow";
    const OPERATOR_NAME: &'static str = "tfjob-controller";
    const PORT: Option<(&'static str, i32)> = Some(("tfjob-port", 2222));
    const ENV_IN_EVERY_CONTAINER: bool = false;

    fn master_role(ctx: &Context<'_, TFJob>, group: &Group<'_>) -> MasterRole {
        MasterRole::coordinator_or_first_worker(ctx, group, &["Chief", "Master"])
    }

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::Never
    }

    /// Only a distributed job (more than one pod in all) gets `TF_CONFIG`, as in v1.
    fn env(ctx: &Context<'_, TFJob>, group: &Group<'_>) -> Vec<EnvVar> {
        if ctx.total_replicas() == 1 {
            return Vec::new();
        }
        let config = if ctx.job.spec.enable_dynamic_worker == Some(true) {
            sparse_config(ctx, group)
        } else {
            full_config(ctx, group)
        };
        vec![group.index_env(), env::value("TF_CONFIG", config)]
    }

    fn success(ctx: &Context<'_, TFJob>) -> Success {
        if let Some(leader) = ctx
            .groups
            .iter()
            .find(|g| matches!(g.replica_type, "Chief" | "Master"))
        {
            return Success::all_of(&[leader.name.as_str()]);
        }
        if ctx.group("Worker").is_none() {
            let all: Vec<&str> = ctx.groups.iter().map(|g| g.name.as_str()).collect();
            return Success::all_of(&all);
        }
        let mut success = Success::all_of(&["worker"]);
        if ctx.job.spec.success_policy != Some(TFSuccessPolicy::AllWorkers) {
            // Worker 0 succeeding completes the worker Job, and with it the JobSet.
            let first = JobSuccessPolicy {
                rules: vec![SuccessPolicyRule {
                    succeeded_indexes: Some("0".to_owned()),
                    succeeded_count: None,
                }],
            };
            success.job_policies.insert("worker".to_owned(), first);
        }
        success
    }
}

/// `<host>.<name>.<namespace>.svc[.<cluster domain>]:<port>`.
fn endpoint(ctx: &Context<'_, TFJob>, group: &Group<'_>, index: impl std::fmt::Display) -> String {
    let domain = ctx
        .cluster_domain
        .as_deref()
        .map(|d| format!(".{d}"))
        .unwrap_or_default();
    format!(
        "{}{domain}:{}",
        ctx.service_address(group, index),
        group.port.unwrap_or(2222)
    )
}

/// The task part: this pod's type and index, the index left for the kubelet to expand.
fn task(group: &Group<'_>) -> String {
    format!(
        r#""task":{{"type":"{}","index":$({})}}"#,
        group.name,
        env::REPLICA_INDEX
    )
}

/// `{"cluster":{<type>:[endpoints]...},"task":{...},"environment":"cloud"}` with every type's
/// endpoints, keys sorted as Go's json.Marshal writes them.
fn full_config(ctx: &Context<'_, TFJob>, group: &Group<'_>) -> String {
    let mut cluster = Map::new();
    for each in &ctx.groups {
        let endpoints: Vec<Value> = (0..each.replicas)
            .map(|i| Value::String(endpoint(ctx, each, i)))
            .collect();
        cluster.insert(each.name.clone(), Value::Array(endpoints));
    }
    format!(
        r#"{{"cluster":{},{},"environment":"cloud"}}"#,
        Value::Object(cluster),
        task(group)
    )
}

/// `enableDynamicWorker`: a worker sees only itself and the PS, a PS only itself.
fn sparse_config(ctx: &Context<'_, TFJob>, group: &Group<'_>) -> String {
    let own = endpoint(ctx, group, format!("$({})", env::REPLICA_INDEX));
    let all_ps: Vec<String> = ctx
        .group("PS")
        .map(|ps| (0..ps.replicas).map(|i| endpoint(ctx, ps, i)).collect())
        .unwrap_or_default();
    let (worker, ps) = match group.replica_type {
        "Worker" => (
            format!(r#"{{"$({})":{}}}"#, env::REPLICA_INDEX, json!(own)),
            json!(all_ps),
        ),
        "PS" => ("{}".to_owned(), json!([own])),
        _ => ("{}".to_owned(), json!([])),
    };
    format!(
        r#"{{"cluster":{{"worker":{worker},"ps":{ps}}},{}}}"#,
        task(group)
    )
}
