//! Rust types for `jobset.x-k8s.io/v1alpha2`, as served by JobSet v0.12.0.
//!
//! Serialization follows Go's wire format: optional and `omitempty` fields are left out when empty,
//! and the counters Go always writes (`status.restarts`, every `replicatedJobsStatus` count) are
//! plain integers that default to 0. Enums keep values they do not know in an `Other` variant, so a
//! newer controller's status never breaks deserialization.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod keys;

/// Defines a string-backed enum whose unknown values are kept verbatim.
macro_rules! open_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($variant,)+
            /// A value this version of the types does not know.
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Other(other) => other,
                }
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                match value.as_str() {
                    $($text => Self::$variant,)+
                    _ => Self::Other(value),
                }
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                match value {
                    $name::Other(other) => other,
                    known => known.as_str().to_owned(),
                }
            }
        }

        /// The known values; the apiserver accepts no other.
        impl JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "enum": [$($text),+]})
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// The desired state of a JobSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    plural = "jobsets",
    namespaced,
    status = "JobSetStatus"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))",
    "message": "StartupPolicy and DependsOn APIs are mutually exclusive"
}]))]
pub struct JobSetSpec {
    /// The replicated jobs, in the order that defines each Job's global index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub success_policy: Option<SuccessPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub failure_policy: Option<FailurePolicy>,
    /// Deprecated upstream in favour of `dependsOn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub startup_policy: Option<StartupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<Coordinator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub volume_claim_policies: Vec<VolumeClaimPolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub group_name: Option<String>,
    pub template: JobTemplateSpec,
    /// Serialized whenever set, so an explicit 0 survives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub depends_on: Vec<DependsOn>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DependsOn {
    pub name: String,
    pub status: DependsOnStatus,
}

open_enum!(
    /// The state a dependency must reach before a replicated job starts.
    DependsOnStatus { Ready = "Ready", Complete = "Complete" }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    #[serde(
        rename = "enableDNSHostnames",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_dns_hostnames: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    pub operator: Operator,
    /// Empty means every replicated job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
}

open_enum!(
    /// How the success policy combines its target replicated jobs.
    Operator { All = "All", Any = "Any" }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// Absent behaves as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Recreate"))]
    pub restart_strategy: Option<RestartStrategy>,
    /// Evaluated in order; the first match wins; no match restarts the JobSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<FailurePolicyRule>,
}

open_enum!(
    /// How the Jobs of a restarting JobSet are recreated.
    RestartStrategy {
        Recreate = "Recreate",
        BlockingRecreate = "BlockingRecreate",
        InPlaceRestart = "InPlaceRestart",
    }
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyRule {
    pub name: String,
    pub action: FailurePolicyAction,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_reasons: Vec<String>,
    /// RE2 patterns matched against the failed Job's condition message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_message_patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
}

open_enum!(
    /// What the JobSet controller does when a failure rule matches.
    FailurePolicyAction {
        FailJobSet = "FailJobSet",
        RestartJobSet = "RestartJobSet",
        RestartJobSetAndIgnoreMaxRestarts = "RestartJobSetAndIgnoreMaxRestarts",
        RestartJob = "RestartJob",
        RestartJobAndIgnoreMaxRestarts = "RestartJobAndIgnoreMaxRestarts",
    }
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    pub startup_policy_order: StartupPolicyOrder,
}

open_enum!(
    /// Whether replicated jobs start together or one after another.
    StartupPolicyOrder { AnyOrder = "AnyOrder", InOrder = "InOrder" }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Coordinator {
    pub replicated_job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "go_int")]
    pub job_index: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "go_int")]
    pub pod_index: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
    "message": "namespace cannot be set for VolumeClaimPolicies templates"
}]))]
pub struct VolumeClaimPolicy {
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "claims_without_type_meta"
    )]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    pub templates: Vec<PersistentVolumeClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<RetentionPolicy>,
}

/// Go embeds these templates as plain structs, so they carry no `apiVersion` or `kind`;
/// k8s-openapi always writes both for a top-level resource.
fn claims_without_type_meta<S: serde::Serializer>(
    claims: &[PersistentVolumeClaim],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::{Error, SerializeSeq};
    let mut seq = serializer.serialize_seq(Some(claims.len()))?;
    for claim in claims {
        let mut value = serde_json::to_value(claim).map_err(S::Error::custom)?;
        if let Some(object) = value.as_object_mut() {
            object.remove("apiVersion");
            object.remove("kind");
        }
        seq.serialize_element(&value)?;
    }
    seq.end()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Delete"))]
    pub when_deleted: Option<WhenDeleted>,
}

open_enum!(
    /// What happens to generated PVCs when the JobSet is deleted.
    WhenDeleted { Delete = "Delete", Retain = "Retain" }
);

/// The observed state of a JobSet, as the JobSet controller writes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = without_defaults)]
pub struct JobSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Whole-JobSet recreations; Go always writes it.
    #[serde(default)]
    pub restarts: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts_count_towards_max: Option<i32>,
    /// `Completed` or `Failed` once terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs_status: Vec<ReplicatedJobStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub previous_in_place_restart_attempt: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_in_place_restart_attempt: Option<i32>,
}

/// Counts of Jobs (not pods) of one replicated job in the current restart attempt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// Go requires every count in the schema; these types also read a status that lacks one.
#[schemars(
    transform = without_defaults,
    extend("required" = ["active", "failed", "name", "ready", "succeeded", "suspended"])
)]
pub struct ReplicatedJobStatus {
    pub name: String,
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub suspended: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "atomic"))]
    pub job_restarts: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "atomic"))]
    pub job_restarts_count_towards_max: Vec<i32>,
}

/// Go's status counters are plain integers the JobSet controller always writes: their serde
/// defaults (for reading a status without them) are not schema defaults.
fn without_defaults(schema: &mut schemars::Schema) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
    }
}

/// Go's `int` as controller-gen writes it in a CRD: an integer with no format (also for the
/// types of other Go APIs, such as Trainer's, that embed these).
pub fn go_int(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer"})
}
