//! One tenant's objects never stop, hijack or fail another's job (docs/operating.md, Reliability): objects
//! of the names a job needs that it does not control are left untouched and named on the job
//! (mpi-operator's `TestConfigMapNotControlledByUs` and `TestSecretNotControlledByUs`); an earlier
//! job's JobSet of the same name is waited out, never adopted nor a reason to fail (JobSet's
//! "same owner name, other UID"); a job being deleted gets no JobSet again; a Job or pod that
//! Kubernetes refuses, said only in the JobSet and Job controllers' events, fails the job naming
//! the field; a denial that may pass later is said on the job while trainset retries.

use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::{
    apply, condition, create, delay, dry_run_create, dynamic_api, events_for, setup, status,
    wait_for, wait_state,
};

fn mpijob(name: &str) -> Value {
    let pod = |container: &str| json!({"metadata": delay(2), "spec": {"containers": [{"name": container, "image": "busybox"}]}});
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {"mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": pod("launcher")},
            "Worker": {"replicas": 1, "template": pod("worker")}}}
    })
}

fn jaxjob(name: &str, seconds: u32) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": name},
        "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": 1, "template": {
            "metadata": delay(seconds),
            "spec": {"containers": [{"name": "jax", "image": "busybox"}]}}}}}
    })
}

/// The job fails `MPIJobResourceExists` naming `object`, which is left as it was.
async fn fails_naming(client: &Client, ns: &str, job: &str, object: &str) {
    let api = create(client, ns, &mpijob(job)).await;
    let status = wait_state(&api, job, "Failed", Duration::from_secs(60)).await;
    let failed = condition(&status, "Failed");
    assert_eq!(failed["reason"], "MPIJobResourceExists", "{status}");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.contains(object), "{message}");
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), ns);
    assert!(
        jobsets.get_opt(job).await.expect("get").is_none(),
        "no JobSet for a job that cannot run"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_configmap_the_job_does_not_control_is_left_untouched_and_named() {
    let (client, ns) = setup("foreign-cm").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "train-config"}, "data": {"lr": "0.1"}
    }))
    .expect("ConfigMap");
    let made = config_maps
        .create(&PostParams::default(), &theirs)
        .await
        .expect("the team's ConfigMap");
    fails_naming(&client, &ns.name, "train", "ConfigMap train-config").await;
    let after = config_maps.get("train-config").await.expect("still there");
    assert_eq!(
        after.resource_version(),
        made.resource_version(),
        "untouched"
    );
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_secret_the_job_does_not_control_is_left_untouched_and_named() {
    let (client, ns) = setup("foreign-secret").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let planted: Secret = serde_json::from_value(json!({
        "metadata": {"name": "train-ssh"}, "type": "kubernetes.io/ssh-auth",
        "stringData": {"ssh-privatekey": "planted", "ssh-publickey": "planted"}
    }))
    .expect("Secret");
    let made = secrets
        .create(&PostParams::default(), &planted)
        .await
        .expect("the planted Secret");
    fails_naming(&client, &ns.name, "train", "Secret train-ssh").await;
    let after = secrets.get("train-ssh").await.expect("still there");
    assert_eq!(
        after.resource_version(),
        made.resource_version(),
        "untouched"
    );
    ns.delete().await;
}

/// Deleted and created again while the old JobSet is held by a finalizer: the new job waits
/// (an event says why), runs once the old JobSet is gone, and succeeds.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_job_created_again_waits_for_the_old_jobset_then_succeeds() {
    let (client, ns) = setup("recreate").await;
    let api = create(&client, &ns.name, &jaxjob("again", 30)).await;
    wait_state(&api, "again", "Running", Duration::from_secs(60)).await;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    let old = jobsets.get("again").await.expect("JobSet");
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    jobsets
        .patch("again", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("hold the JobSet");
    api.delete("again", &DeleteParams::background())
        .await
        .expect("delete the job");
    wait_for(
        Duration::from_secs(30),
        "the old job to be gone",
        || async { api.get_opt("again").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let again = create(&client, &ns.name, &jaxjob("again", 2)).await;
    wait_for(Duration::from_secs(30), "the wait to be told", || async {
        let events = events_for(&client, &ns.name, "again").await;
        events
            .iter()
            .any(|(_, reason)| reason == "WaitingForEarlierJob")
            .then_some(())
    })
    .await;
    let status = again.get("again").await.expect("job");
    assert!(
        status.data["status"]["conditions"]
            .as_array()
            .is_none_or(|c| c.iter().all(|c| c["type"] != "Failed")),
        "the new job is not failed: {:?}",
        status.data["status"]
    );
    let release = json!({"metadata": {"finalizers": null}});
    jobsets
        .patch("again", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release the JobSet");
    wait_state(&again, "again", "Succeeded", Duration::from_secs(90)).await;
    let new = jobsets.get("again").await.expect("the new JobSet");
    assert_ne!(new.uid(), old.uid(), "a JobSet of its own");
    ns.delete().await;
}

/// A job deleted in the foreground while it runs: the garbage collector deletes its JobSet
/// first, and trainset does not make it again.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_job_deleted_in_the_foreground_gets_no_new_jobset() {
    let (client, ns) = setup("foreground").await;
    let api = create(&client, &ns.name, &jaxjob("going", 60)).await;
    wait_state(&api, "going", "Running", Duration::from_secs(60)).await;
    api.delete("going", &DeleteParams::foreground())
        .await
        .expect("delete in the foreground");
    wait_for(Duration::from_secs(60), "the job to be gone", || async {
        api.get_opt("going").await.ok()?.is_none().then_some(())
    })
    .await;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    assert!(jobsets.get_opt("going").await.expect("get").is_none());
    let events = events_for(&client, &ns.name, "going").await;
    assert!(
        !events.iter().any(|(_, reason)| reason == "JobSetRecreated"),
        "{events:?}"
    );
    ns.delete().await;
}

/// The job fails `JAXJobInvalidSpec` with `expected` (the field Kubernetes named) in its message,
/// and its JobSet goes: Kubernetes refused what the JobSet makes, which no retry can change.
async fn refused_by_kubernetes(client: &Client, ns: &str, job: &Value, expected: &str) {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let api = create(client, ns, job).await;
    let status = wait_state(&api, name, "Failed", Duration::from_secs(60)).await;
    let failed = condition(&status, "Failed");
    assert_eq!(failed["reason"], "JAXJobInvalidSpec", "{status}");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.contains(expected), "{expected:?} not in {message}");
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), ns);
    wait_for(Duration::from_secs(60), "the JobSet to go", || async {
        jobsets.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A pod only Kubernetes checks (an init container without an image): the Job controller says
/// so only in a `FailedCreate` event on the Job, and the job would sit with no pods.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_pod_kubernetes_refuses_fails_the_job_naming_the_field() {
    let (client, ns) = setup("pod-refused").await;
    let mut job = jaxjob("no-image", 2);
    job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"] =
        json!([{"name": "init"}]);
    let field = "spec.initContainers[0].image: Required value";
    refused_by_kubernetes(&client, &ns.name, &job, field).await;
    ns.delete().await;
}

/// A Job Kubernetes refuses (a `containerPort` of 70000, which an int32 schema lets through):
/// the JobSet controller says so only in a `JobCreationFailed` event on the JobSet (JobSet's
/// own test of an invalid Job template).
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_job_kubernetes_refuses_fails_the_job_naming_the_field() {
    let (client, ns) = setup("job-refused").await;
    let mut job = jaxjob("bad-port", 2);
    job["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "jaxjob-port", "containerPort": 70000}]);
    let field = "containerPort: Invalid value: 70000";
    refused_by_kubernetes(&client, &ns.name, &job, field).await;
    ns.delete().await;
}

/// A denial that may pass later (here an admission policy holding every JobSet of the test's
/// namespace, 403 Forbidden naming no field; a 422 would say the content is invalid): the job
/// says why it waits in `Created` False while trainset retries with backoff, and runs once the
/// policy goes.
#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_jobset_denied_for_now_is_said_on_the_job_and_made_once_allowed() {
    let (client, ns) = setup("held").await;
    let policy = format!("trainset-e2e-hold-{}", ns.name);
    let held = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["jobset.x-k8s.io"],
                "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["jobsets"]}]},
            "validations": [{"expression": "false", "reason": "Forbidden",
                "message": "held by the test for now"}]}
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels":
                {"kubernetes.io/metadata.name": ns.name}}}}
    });
    apply(&client, &held, None).await.expect("the policy");
    apply(&client, &binding, None).await.expect("its binding");
    // In force once a JobSet is refused (the apiserver loads policies a moment later).
    let probe = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "probe"}, "spec": {"replicatedJobs": []}});
    wait_for(
        Duration::from_secs(30),
        "the policy to hold JobSets",
        || async {
            dry_run_create(&client, &probe, &ns.name)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;

    let api = create(&client, &ns.name, &jaxjob("held", 2)).await;
    let waiting = wait_for(Duration::from_secs(60), "Created False", || async {
        let job = api.get("held").await.ok()?;
        let created = condition(&status(&job), "Created").clone();
        (created["status"] == "False").then_some(created)
    })
    .await;
    assert_eq!(waiting["reason"], "JAXJobCreationRetrying", "{waiting}");
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.contains("held by the test for now"), "{message}");

    let bindings = dynamic_api(&client, &binding, None);
    bindings
        .delete(&policy, &DeleteParams::default())
        .await
        .expect("release");
    let done = wait_state(&api, "held", "Succeeded", Duration::from_secs(120)).await;
    assert_eq!(condition(&done, "Created")["status"], "True", "{done}");
    let _ = dynamic_api(&client, &held, None)
        .delete(&policy, &DeleteParams::default())
        .await;
    ns.delete().await;
}
