//! v1 restart policies on batch/v1 Jobs.

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};

use crate::api::{RestartPolicy, RunPolicy};

/// Jobs do not allow `Always`; `OnFailure` restarts containers in place just the same.
pub fn pod_restart_policy(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always | RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never | RestartPolicy::ExitCode => "Never",
    }
}

/// `Never` fails the Job on its first failed pod. Otherwise `runPolicy.backoffLimit`, and
/// without one no limit, as in v1.
pub fn backoff_limit(policy: RestartPolicy, run_policy: Option<&RunPolicy>) -> i32 {
    match policy {
        RestartPolicy::Never => 0,
        _ => run_policy.and_then(|p| p.backoff_limit).unwrap_or(i32::MAX),
    }
}

/// `ExitCode`: exit codes 1-127 of the default container fail the Job for good, codes from 128
/// on (signals, OOM kills) are retried, and disruptions (preemption, eviction) are not counted.
pub fn pod_failure_policy(
    policy: RestartPolicy,
    default_container: &str,
) -> Option<PodFailurePolicy> {
    if policy != RestartPolicy::ExitCode {
        return None;
    }
    Some(PodFailurePolicy {
        rules: vec![
            PodFailurePolicyRule {
                action: "Ignore".to_owned(),
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".to_owned(),
                    status: Some("True".to_owned()),
                }]),
                on_exit_codes: None,
            },
            PodFailurePolicyRule {
                action: "FailJob".to_owned(),
                on_pod_conditions: None,
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: (!default_container.is_empty())
                        .then(|| default_container.to_owned()),
                    operator: "In".to_owned(),
                    values: (1..=127).collect(),
                }),
            },
        ],
    })
}
