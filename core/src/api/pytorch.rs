//! PyTorchJob (`kubeflow.org/v1`).

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::limits::MAX_PROCS_PER_NODE;
use super::{
    Autoscaling, JobStatus, ReplicaSpecs, Rule, RunPolicy, TrainingJob, training_job_accessors,
    training_kind,
};

training_kind! {
    /// A distributed PyTorch training job: one Master and any number of Workers, or Workers only,
    /// optionally elastic (torchrun rendezvous).
    kind = "PyTorchJob", version = "v1", plural = "pytorchjobs", shortname = "pytorchjob";
    #[kube(scale(
        spec_replicas_path = ".spec.pytorchReplicaSpecs.Worker.replicas",
        status_replicas_path = ".status.replicaStatuses.Worker.active",
        label_selector_path = ".status.replicaStatuses.Worker.selector"
    ))]
    pub struct PyTorchJobSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub run_policy: Option<RunPolicy>,
        /// Elastic training: torchrun rendezvous between minReplicas and maxReplicas workers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub elastic_policy: Option<ElasticPolicy>,
        /// Replica specs keyed by Master and Worker (any case).
        pub pytorch_replica_specs: ReplicaSpecs,
        /// Processes per node: auto (default), cpu, gpu or a number. A number multiplies WORLD_SIZE.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = super::limits::MAX_PROCS_PER_NODE_CHARS))]
        pub nproc_per_node: Option<String>,
    }
}

/// torchrun rendezvous settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Lower bound of workers; defaults to maxReplicas, else the Worker replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::limits::MAX_REPLICAS))]
    pub min_replicas: Option<i32>,
    /// Upper bound of workers; defaults to minReplicas, else the Worker replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::limits::MAX_REPLICAS))]
    pub max_replicas: Option<i32>,
    /// c10d (default), etcd or etcd-v2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_backend: Option<RdzvBackend>,
    /// Defaults to the Worker's pytorchjob-port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_port: Option<i32>,
    /// Defaults to worker 0's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_id: Option<String>,
    /// Extra rendezvous settings, passed as PET_RDZV_CONF=k=v,k=v.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdzv_conf: Vec<RdzvConf>,
    /// Sets PET_STANDALONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standalone: Option<bool>,
    /// Deprecated: use spec.nprocPerNode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::limits::MAX_PROCS_PER_NODE))]
    pub n_proc_per_node: Option<i32>,
    /// Sets PET_MAX_RESTARTS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// HPA metrics for scaling the workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
}

impl ElasticPolicy {
    /// `minReplicas` and `maxReplicas` as v1 defaults them: each to the other, both to the
    /// Worker count `workers`.
    pub fn bounds(&self, workers: i32) -> (i32, i32) {
        let min = self.min_replicas.or(self.max_replicas).unwrap_or(workers);
        let max = self.max_replicas.or(self.min_replicas).unwrap_or(workers);
        (min, max)
    }
}

/// torchrun rendezvous backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RdzvBackend {
    #[serde(rename = "c10d")]
    C10d,
    #[serde(rename = "etcd")]
    Etcd,
    #[serde(rename = "etcd-v2")]
    EtcdV2,
}

impl RdzvBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::C10d => "c10d",
            Self::Etcd => "etcd",
            Self::EtcdV2 => "etcd-v2",
        }
    }
}

/// One rendezvous setting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RdzvConf {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl TrainingJob for PyTorchJob {
    const REPLICA_SPECS_FIELD: &'static str = "pytorchReplicaSpecs";
    const REPLICA_TYPES: &'static [&'static str] = &["Master", "Worker"];
    const DEFAULT_CONTAINER: Option<&'static str> = Some("pytorch");
    const ELASTIC: bool = true;

    fn is_elastic(&self) -> bool {
        self.spec.elastic_policy.is_some()
    }

    fn autoscaling(&self) -> Option<Autoscaling<'_>> {
        let elastic = self.spec.elastic_policy.as_ref()?;
        if elastic.metrics.is_empty() {
            return None;
        }
        let workers = self
            .spec
            .pytorch_replica_specs
            .get("Worker")
            .and_then(|worker| worker.replicas)
            .unwrap_or(1);
        let (min_replicas, max_replicas) = elastic.bounds(workers);
        Some(Autoscaling {
            min_replicas,
            max_replicas,
            metrics: &elastic.metrics,
        })
    }

    training_job_accessors!(pytorch_replica_specs);

    fn extra_rules() -> Vec<Rule> {
        vec![
            Rule::on_replica_specs(
                "self.all(k, k.lowerAscii() != 'master' || !has(self[k].replicas) || self[k].replicas == 1)",
                "Master replicas must be exactly 1",
            ),
            Rule::on_replica_specs(
                "self.all(k, k.lowerAscii() != 'worker' || !has(self[k].replicas) || self[k].replicas >= 1)",
                "Worker replicas must be at least 1",
            ),
            Rule::on_spec(
                "!has(self.elasticPolicy) || self.pytorchReplicaSpecs.exists(k, k.lowerAscii() == 'worker')",
                "elasticPolicy requires a Worker replica spec",
                "elasticPolicy",
            ),
            Rule::on_spec(
                "!has(self.elasticPolicy) || !has(self.elasticPolicy.nProcPerNode) || !has(self.nprocPerNode)",
                "elasticPolicy.nProcPerNode (deprecated) and nprocPerNode are mutually exclusive",
                "nprocPerNode",
            ),
            Rule::on_field(
                "nprocPerNode",
                &format!(
                    "self in ['auto', 'cpu', 'gpu'] || (self.matches('^[1-9][0-9]*$') && int(self) <= {MAX_PROCS_PER_NODE})"
                ),
                &format!(
                    "nprocPerNode must be auto, cpu, gpu or a number from 1 to {MAX_PROCS_PER_NODE}"
                ),
            ),
        ]
    }
}
