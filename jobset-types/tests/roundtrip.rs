//! JobSet objects survive a trip through the Rust types unchanged, and serialize like Go does.

use jobset_types::{
    DependsOnStatus, FailurePolicyAction, JobSet, JobSetStatus, Operator, ReplicatedJobStatus,
    RestartStrategy,
};
use kube::Resource;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/jobset-full.json")).expect("fixture is JSON")
}

#[test]
fn full_jobset_round_trips_unchanged() {
    let input = fixture();
    let jobset: JobSet = serde_json::from_value(input.clone()).expect("deserializes");
    let output = serde_json::to_value(&jobset).expect("serializes");
    assert_eq!(output, input);
}

#[test]
fn every_spec_and_status_field_is_read_into_its_typed_field() {
    let jobset: JobSet = serde_json::from_value(fixture()).expect("deserializes");
    let spec = &jobset.spec;
    assert_eq!(spec.replicated_jobs.len(), 2);
    assert_eq!(
        spec.replicated_jobs[1].group_name.as_deref(),
        Some("workers")
    );
    assert_eq!(spec.replicated_jobs[1].replicas, Some(0));
    assert_eq!(
        spec.replicated_jobs[1].depends_on[0].status,
        DependsOnStatus::Ready
    );
    let network = spec.network.as_ref().expect("network");
    assert_eq!(network.enable_dns_hostnames, Some(true));
    assert_eq!(network.subdomain.as_deref(), Some("mnist"));
    assert_eq!(network.publish_not_ready_addresses, Some(true));
    let success = spec.success_policy.as_ref().expect("successPolicy");
    assert_eq!(success.operator, Operator::All);
    assert_eq!(success.target_replicated_jobs, ["master"]);
    let failure = spec.failure_policy.as_ref().expect("failurePolicy");
    assert_eq!(failure.max_restarts, Some(3));
    assert_eq!(
        failure.restart_strategy,
        Some(RestartStrategy::BlockingRecreate)
    );
    assert_eq!(failure.rules[0].action, FailurePolicyAction::FailJobSet);
    assert_eq!(
        failure.rules[0].on_job_failure_message_patterns,
        ["exit code [0-9]+"]
    );
    assert_eq!(
        failure.rules[0].target_replicated_jobs,
        ["master", "worker"]
    );
    assert_eq!(
        failure.rules[1].action,
        FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts
    );
    assert_eq!(spec.suspend, Some(true));
    assert_eq!(
        spec.coordinator.as_ref().map(|c| c.replicated_job.as_str()),
        Some("master")
    );
    assert_eq!(
        spec.managed_by.as_deref(),
        Some(jobset_types::keys::JOBSET_CONTROLLER)
    );
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    assert_eq!(spec.volume_claim_policies[0].templates.len(), 1);

    let status = jobset.status.as_ref().expect("status");
    assert_eq!(status.restarts, 2);
    assert_eq!(status.restarts_count_towards_max, Some(1));
    assert_eq!(status.terminal_state.as_deref(), Some("Completed"));
    assert_eq!(
        status.conditions[1].type_,
        jobset_types::keys::condition::COMPLETED
    );
    assert_eq!(status.replicated_jobs_status[1].failed, 1);
    assert_eq!(status.replicated_jobs_status[1].job_restarts, [0, 1]);
    assert_eq!(status.current_in_place_restart_attempt, Some(1));
}

#[test]
fn status_counters_default_to_zero_and_are_always_written() {
    let status: JobSetStatus =
        serde_json::from_value(json!({"replicatedJobsStatus": [{"name": "worker"}]}))
            .expect("status");
    assert_eq!(status.restarts, 0);
    assert_eq!(
        status.replicated_jobs_status,
        [ReplicatedJobStatus {
            name: "worker".into(),
            ..Default::default()
        }]
    );
    assert_eq!(
        serde_json::to_value(&status).expect("serializes"),
        json!({
            "restarts": 0,
            "replicatedJobsStatus": [
                {"name": "worker", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            ]
        })
    );
}

#[test]
fn empty_optional_fields_are_omitted() {
    let jobset = JobSet::new("empty", Default::default());
    assert_eq!(
        serde_json::to_value(&jobset).expect("serializes"),
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "empty"}, "spec": {}})
    );
}

#[test]
fn unknown_enum_values_are_kept() {
    let policy: jobset_types::FailurePolicy = serde_json::from_value(json!({
        "restartStrategy": "SomeFutureStrategy",
        "rules": [{"name": "r", "action": "RestartReplicatedJob"}]
    }))
    .expect("unknown values deserialize");
    assert_eq!(
        policy.restart_strategy,
        Some(RestartStrategy::Other("SomeFutureStrategy".into()))
    );
    assert_eq!(
        policy.rules[0].action,
        FailurePolicyAction::Other("RestartReplicatedJob".into())
    );
    assert_eq!(
        serde_json::to_value(&policy).expect("serializes"),
        json!({"restartStrategy": "SomeFutureStrategy", "rules": [{"name": "r", "action": "RestartReplicatedJob"}]})
    );
}

#[test]
fn gvk_and_url_path_are_pinned() {
    assert_eq!(JobSet::api_version(&()), "jobset.x-k8s.io/v1alpha2");
    assert_eq!(JobSet::kind(&()), "JobSet");
    assert_eq!(
        JobSet::url_path(&(), Some("ns")),
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets"
    );
}
