//! Environment variables: literal values, downward-API references, and the merge rule that a
//! user's variable of the same name wins.

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

/// Puts `injected` before the container's own variables, leaving out every injected name the
/// user already defines, so the user's value (and its position) wins.
pub fn inject(container: &mut Container, injected: &[EnvVar]) {
    let user = container.env.take().unwrap_or_default();
    let mut merged: Vec<EnvVar> = injected
        .iter()
        .filter(|var| !user.iter().any(|own| own.name == var.name))
        .cloned()
        .collect();
    merged.extend(user);
    if !merged.is_empty() {
        container.env = Some(merged);
    }
}
