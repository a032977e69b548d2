//! TrainingRuntime (namespaced) and ClusterTrainingRuntime (cluster-scoped): the blueprint a
//! TrainJob names, a JobSet template plus the ML and pod-group policies that shape it.

use jobset_types::JobSetSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::EmbeddedMetadata;

/// What a runtime holds; the same for both scopes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainingRuntimeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MLPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<PodGroupPolicy>,
    /// Optional in the schema, as upstream's; a runtime without one cannot run anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobSetTemplateSpec>,
}

/// A namespaced runtime, usable by TrainJobs of its namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainingRuntime",
    plural = "trainingruntimes",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedRuntimeSpec {
    #[serde(flatten)]
    pub runtime: TrainingRuntimeSpec,
}

/// A cluster-wide runtime, usable by TrainJobs of every namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "ClusterTrainingRuntime",
    plural = "clustertrainingruntimes"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRuntimeSpec {
    #[serde(flatten)]
    pub runtime: TrainingRuntimeSpec,
}

/// The JobSet a runtime stamps out: its labels and annotations, and its spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct JobSetTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSetSpec>,
}

/// The node count and at most one framework policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1",
    "message": "Only one of the policy can be configured"
}]))]
pub struct MLPolicy {
    /// Nodes when the TrainJob does not say; absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchMLPolicySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MPIMLPolicySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jax: Option<JAXMLPolicySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xgboost: Option<XGBoostMLPolicySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxMLPolicySource>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchMLPolicySource {
    /// Containers besides `node` that get the `PET_*` variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_injection: Option<TorchEnvInjection>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchEnvInjection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["jobName"])
    )]
    pub targets: Vec<TorchEnvInjectionTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchEnvInjectionTarget {
    /// A replicated job of the runtime.
    #[schemars(length(min = 1, max = 253))]
    pub job_name: String,
    #[schemars(
        length(min = 1, max = 8),
        inner(length(max = 63)),
        extend(
            "x-kubernetes-list-type" = "set",
            "x-kubernetes-validations" = [{
                "rule": "!self.exists(c, c == 'node')",
                "message": "containerNames must not include the main node container because PET_* envs are always injected into it"
            }]
        )
    )]
    pub container_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MPIMLPolicySource {
    /// Slots per node in the hostfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub num_proc_per_node: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "OpenMPI", "enum" = ["OpenMPI", ""]))]
    pub mpi_implementation: Option<String>,
    /// Where the SSH key is mounted in containers named `node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096), extend("default" = "/root/.ssh"))]
    pub ssh_auth_mount_path: Option<String>,
    /// Whether the launcher is also a node of the hostfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub run_launcher_as_node: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JAXMLPolicySource {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XGBoostMLPolicySource {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxMLPolicySource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "default" = 1,
        "x-kubernetes-validations" = [{"rule": "self >= 1", "message": "NumProcPerNode in fluxPolicy must be >= 1"}]
    ))]
    pub num_proc_per_node: Option<i32>,
}

/// Gang scheduling: one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coscheduling: Option<CoschedulingPodGroupPolicySource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volcano: Option<VolcanoPodGroupPolicySource>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupPolicySource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 60))]
    pub schedule_timeout_seconds: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupPolicySource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
}

/// Volcano's network-topology constraint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "hard", "enum" = ["hard", "soft"]))]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "jobset_types::go_int", extend("default" = 1))]
    pub highest_tier_allowed: Option<i32>,
}

/// A runtime of either scope, as a TrainJob names it.
#[derive(Clone, Debug)]
pub enum AnyRuntime {
    Cluster(ClusterTrainingRuntime),
    Namespaced(TrainingRuntime),
}

impl AnyRuntime {
    pub fn spec(&self) -> &TrainingRuntimeSpec {
        match self {
            Self::Cluster(runtime) => &runtime.spec.runtime,
            Self::Namespaced(runtime) => &runtime.spec.runtime,
        }
    }

    pub fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Self::Cluster(runtime) => &runtime.metadata,
            Self::Namespaced(runtime) => &runtime.metadata,
        }
    }

    /// The runtime's `trainer.kubeflow.org/framework` label (the SDK lists runtimes by it).
    pub fn framework(&self) -> Option<&str> {
        let labels = self.metadata().labels.as_ref()?;
        labels.get(FRAMEWORK_LABEL).map(String::as_str)
    }
}

/// The label that names a runtime's framework (`torch`, `deepspeed`, ...).
pub const FRAMEWORK_LABEL: &str = "trainer.kubeflow.org/framework";
