//! What a job's run policy does, where both families do the same: a limit counted in seconds
//! from a moment (`activeDeadlineSeconds` from the job's start, `ttlSecondsAfterFinished` from
//! its end), when to look again for it, and which pods `cleanPodPolicy` removes. Which moment a
//! limit counts from is each family's own (its status says).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::CleanPodPolicy;

/// Time left at `now` of a limit of `seconds` counted from `since`: zero once it has run out,
/// never more than the limit (a `since` after `now`, a clock skew, counts as no time passed).
pub fn left(seconds: u64, since: &Time, now: &Time) -> Duration {
    let elapsed = u64::try_from(now.0.duration_since(since.0).as_secs()).unwrap_or(0);
    Duration::from_secs(seconds.saturating_sub(elapsed))
}

/// When to reconcile again for a limit with `left` to run: just after it runs out.
pub fn look_again(left: Duration) -> Duration {
    left + Duration::from_secs(1)
}

/// Whether `cleanPodPolicy` removes `pod`: `All` every pod, `Running` those still pending or
/// running; a pod already being deleted is left alone.
pub fn cleans(policy: CleanPodPolicy, pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match policy {
        CleanPodPolicy::None => false,
        CleanPodPolicy::All => true,
        CleanPodPolicy::Running => matches!(phase, Some("Running" | "Pending")),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + second).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    #[test]
    fn a_limit_runs_down_to_zero_and_never_above_itself() {
        assert_eq!(left(60, &at(0), &at(20)), Duration::from_secs(40));
        assert_eq!(left(60, &at(0), &at(60)), Duration::ZERO);
        assert_eq!(left(60, &at(0), &at(600)), Duration::ZERO);
        assert_eq!(left(60, &at(30), &at(0)), Duration::from_secs(60));
        assert_eq!(look_again(Duration::from_secs(40)), Duration::from_secs(41));
    }

    #[test]
    fn clean_pod_policy_removes_what_it_names() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            let mut pod: Pod =
                serde_json::from_value(serde_json::json!({"status": {"phase": phase}}))
                    .expect("Pod");
            if deleting {
                pod.metadata.deletion_timestamp = Some(at(0));
            }
            pod
        };
        let phases = ["Pending", "Running", "Succeeded", "Failed"];
        let removed = |policy| -> Vec<&str> {
            phases
                .iter()
                .copied()
                .filter(|phase| cleans(policy, &pod(phase, false)))
                .collect()
        };
        assert_eq!(removed(CleanPodPolicy::All), phases);
        assert_eq!(removed(CleanPodPolicy::Running), ["Pending", "Running"]);
        assert!(removed(CleanPodPolicy::None).is_empty());
        assert!(!cleans(CleanPodPolicy::All, &pod("Running", true)));
    }
}
