//! PyTorchJob: torchrun/DDP env in every container; workers after a master use the rank-offset
//! layout so `RANK` is the JobSet's global job index (master 0, workers 1..N).

use jobset_types::{DependsOn, DependsOnStatus};
use k8s_openapi::api::batch::v1::{SuccessPolicy as JobSuccessPolicy, SuccessPolicyRule};
use k8s_openapi::api::core::v1::EnvVar;

use super::{Context, Framework, Group, Layout, MasterRole, Success, env};
use crate::api::{PyTorchJob, RestartPolicy};

pub struct PyTorch;

super::compiles_with!(PyTorchJob, PyTorch);

impl Framework for PyTorch {
    type Job = PyTorchJob;
    const FRAMEWORK: &'static str = "pytorch";
    const REPLICA_SELECTOR: bool = true;
    const OPERATOR_NAME: &'static str = "pytorchjob-controller";
    const PORT: Option<(&'static str, i32)> = Some(("pytorchjob-port", 23456));

    fn master_role(ctx: &Context<'_, PyTorchJob>, group: &Group<'_>) -> MasterRole {
        MasterRole::coordinator_or_first_worker(ctx, group, &["Master"])
    }

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::OnFailure
    }

    fn layout(job: &PyTorchJob, replica_type: &str) -> Layout {
        if replica_type == "Worker" && job.spec.pytorch_replica_specs.get("Master").is_some() {
            Layout::RankOffset
        } else {
            Layout::Indexed
        }
    }

    fn env(ctx: &Context<'_, PyTorchJob>, _group: &Group<'_>) -> Vec<EnvVar> {
        let spec = &ctx.job.spec;
        let total = ctx.total_replicas();
        let mut vars = vec![env::value("PYTHONUNBUFFERED", "1")];
        if let Some(master) = ctx.group("Master") {
            let port = master.port.unwrap_or(23456).to_string();
            let address = ctx.address(master, 0);
            // WORLD_SIZE counts processes only when nprocPerNode is a number, as v1 did.
            let per_node = spec
                .nproc_per_node
                .as_deref()
                .and_then(|n| n.parse::<i64>().ok())
                .unwrap_or(1);
            vars.extend([
                env::value("MASTER_PORT", port.clone()),
                env::value("PET_MASTER_PORT", port),
                env::value("MASTER_ADDR", address.clone()),
                env::value("PET_MASTER_ADDR", address),
                env::value("WORLD_SIZE", total.saturating_mul(per_node).to_string()),
                env::field("RANK", env::GLOBAL_INDEX_PATH),
                env::field("PET_NODE_RANK", env::GLOBAL_INDEX_PATH),
            ]);
        }
        let elastic = spec.elastic_policy.as_ref();
        let nproc = match elastic.and_then(|e| e.n_proc_per_node) {
            Some(deprecated) => deprecated.to_string(),
            None => spec
                .nproc_per_node
                .clone()
                .unwrap_or_else(|| "auto".to_owned()),
        };
        vars.push(env::value("PET_NPROC_PER_NODE", nproc));
        let Some(elastic) = elastic else {
            vars.push(env::value("PET_NNODES", total.to_string()));
            return vars;
        };
        let worker = ctx.group("Worker");
        let workers = worker.map_or(1, |w| w.replicas);
        let (min, max) = elastic.bounds(workers);
        let host = match (&elastic.rdzv_host, worker) {
            (Some(host), _) => host.clone(),
            (None, Some(worker)) => ctx.address(worker, 0),
            (None, None) => String::new(),
        };
        let port = elastic
            .rdzv_port
            .or(worker.and_then(|w| w.port))
            .unwrap_or(23456);
        vars.extend([
            env::value("PET_RDZV_ENDPOINT", format!("{host}:{port}")),
            env::value(
                "PET_RDZV_BACKEND",
                elastic.rdzv_backend.map_or("c10d", |b| b.as_str()),
            ),
            env::value("PET_NNODES", format!("{min}:{max}")),
        ]);
        if let Some(restarts) = elastic.max_restarts {
            vars.push(env::value("PET_MAX_RESTARTS", restarts.to_string()));
        }
        if let Some(id) = &elastic.rdzv_id {
            vars.push(env::value("PET_RDZV_ID", id.clone()));
        }
        if !elastic.rdzv_conf.is_empty() {
            let conf: Vec<String> = elastic
                .rdzv_conf
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.key.as_deref().unwrap_or_default(),
                        c.value.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            vars.push(env::value("PET_RDZV_CONF", conf.join(",")));
        }
        if elastic.standalone.is_some() {
            vars.push(env::value("PET_STANDALONE", ""));
        }
        vars
    }

    fn success(ctx: &Context<'_, PyTorchJob>) -> Success {
        if ctx.group("Master").is_some() {
            return Success::all_of(&["master"]);
        }
        let mut success = Success::all_of(&["worker"]);
        if ctx.job.spec.elastic_policy.is_some() {
            // Elastic: any worker succeeding means the rendezvous finished.
            let any = JobSuccessPolicy {
                rules: vec![SuccessPolicyRule {
                    succeeded_count: Some(1),
                    succeeded_indexes: None,
                }],
            };
            success.job_policies.insert("worker".to_owned(), any);
        }
        success
    }

    /// Workers start once the master is Ready, where v1 ran a DNS-polling init container.
    fn depends_on(ctx: &Context<'_, PyTorchJob>, group: &Group<'_>) -> Vec<DependsOn> {
        if group.replica_type == "Worker" && ctx.group("Master").is_some() {
            vec![DependsOn {
                name: "master".to_owned(),
                status: DependsOnStatus::Ready,
            }]
        } else {
            Vec::new()
        }
    }
}
