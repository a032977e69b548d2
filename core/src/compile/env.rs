//! Environment variables: literal values, downward-API references, and v1's merge rule: injected
//! variables follow the user's own.

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector};

/// Variable holding the pod's replica index, defined first so later values can embed it as
/// `$(TRAINSET_REPLICA_INDEX)` (the Job controller's own JOB_COMPLETION_INDEX comes last).
pub const REPLICA_INDEX: &str = "TRAINSET_REPLICA_INDEX";

/// Downward-API path of the completion index the Job controller sets on Indexed Job pods.
pub const COMPLETION_INDEX_PATH: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";
/// Downward-API path of the Job's index within its replicated job.
pub const JOB_INDEX_PATH: &str = "metadata.labels['jobset.sigs.k8s.io/job-index']";
/// Downward-API path of the JobSet's global job index (0 for the first replicated job's Job).
pub const GLOBAL_INDEX_PATH: &str = "metadata.labels['jobset.sigs.k8s.io/job-global-index']";

pub fn value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

pub fn field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.to_owned(),
            }),
            ..Default::default()
        }),
    }
}

/// Appends `injected` after the container's own variables, as the v1 operators do (checked
/// against training-operator v1.9.4 by `e2e/differential`; MPIJob follows the same rule): the
/// injected value of a name wins, and a user's `$(VAR)` sees only what is defined before it. v1
/// leaves the user's entry of a repeated name in place and the kubelet takes the last; a JobSet
/// cannot carry the repeat (server-side apply keys env by name), so the user's entry is dropped
/// instead, which differs only for a user variable that refers to the user's own value of an
/// injected name.
pub fn inject(container: &mut Container, injected: &[EnvVar]) {
    if injected.is_empty() {
        return;
    }
    let env = container.env.get_or_insert_with(Vec::new);
    env.retain(|own| !injected.iter().any(|var| var.name == own.name));
    env.extend(injected.iter().cloned());
}
