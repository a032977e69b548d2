//! Smoke tests of the local control plane: the JobSet and Job controllers, the scheduler and
//! KWOK work together like a real cluster.

use std::time::Duration;

use jobset_types::JobSet;
use jobset_types::keys::{condition, reason};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use trainset_e2e::{TestNamespace, client, wait_for};

fn jobset(
    name: &str,
    pod_metadata: serde_json::Value,
    job_extra: serde_json::Value,
    failure_policy: serde_json::Value,
) -> JobSet {
    let template = |completions: i32| {
        let mut spec = serde_json::json!({
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "template": {
                "metadata": pod_metadata,
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
            }
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), job_extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::json!({"spec": spec})
    };
    let mut value = serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true},
            "successPolicy": {"operator": "All"},
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": template(1)},
                {"name": "workers", "replicas": 2, "template": template(2)}
            ]
        }
    });
    if !failure_policy.is_null() {
        value["spec"]["failurePolicy"] = failure_policy;
    }
    serde_json::from_value(value).expect("a valid JobSet")
}

fn condition_reason(jobset: &JobSet, type_: &str) -> Option<String> {
    jobset
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.reason.clone())
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn jobset_with_two_replicated_jobs_completes_behind_a_headless_service() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "smoke").await;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    jobsets
        .create(
            &PostParams::default(),
            &jobset(
                "smoke",
                serde_json::json!({}),
                serde_json::json!({}),
                serde_json::Value::Null,
            ),
        )
        .await
        .expect("JobSet created");

    let completed = wait_for(
        Duration::from_secs(90),
        "JobSet smoke to complete",
        || async {
            let js = jobsets.get("smoke").await.ok()?;
            condition_reason(&js, condition::COMPLETED).map(|reason| (js, reason))
        },
    )
    .await;
    assert_eq!(completed.1, reason::ALL_JOBS_COMPLETED);
    let status = completed.0.status.expect("status");
    assert_eq!(status.terminal_state.as_deref(), Some("Completed"));
    // The controller writes replicatedJobsStatus in map order; compare it sorted.
    let mut succeeded: Vec<(String, i32)> = status
        .replicated_jobs_status
        .iter()
        .map(|r| (r.name.clone(), r.succeeded))
        .collect();
    succeeded.sort();
    assert_eq!(
        succeeded,
        [("leader".to_owned(), 1), ("workers".to_owned(), 2)]
    );

    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let service = services
        .get("smoke")
        .await
        .expect("headless Service named after the JobSet");
    let spec = service.spec.expect("service spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    assert_eq!(
        spec.selector
            .and_then(|s| s.get(jobset_types::keys::label::JOBSET_NAME).cloned()),
        Some("smoke".to_owned())
    );
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn jobset_whose_pod_exits_3_fails_through_its_failure_policy() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "fail").await;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    // KWOK's chaos stage fails pods with this label, using the exit code in the annotation.
    let failing_pod = serde_json::json!({
        "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
        "annotations": {
            "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "3",
            "pod-container-running-failed.stage.kwok.x-k8s.io/delay": "500ms"
        }
    });
    let exit_code_fails_job = serde_json::json!({
        "backoffLimit": 6,
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]}}
        ]}
    });
    let policy = serde_json::json!({
        "maxRestarts": 3,
        "rules": [{"name": "failOnExitCode", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
    });
    jobsets
        .create(
            &PostParams::default(),
            &jobset("exit3", failing_pod, exit_code_fails_job, policy),
        )
        .await
        .expect("JobSet created");

    let (js, failed_reason) = wait_for(Duration::from_secs(90), "JobSet exit3 to fail", || async {
        let js = jobsets.get("exit3").await.ok()?;
        condition_reason(&js, condition::FAILED).map(|reason| (js, reason))
    })
    .await;
    assert_eq!(failed_reason, reason::FAIL_JOBSET_ACTION);
    let status = js.status.expect("status");
    assert_eq!(status.terminal_state.as_deref(), Some("Failed"));
    assert_eq!(
        status.restarts, 0,
        "FailJobSet fails at once, without restarting"
    );
    ns.delete().await;
}
