//! trainset with the real Kueue manager, in both ways Kueue can queue a training job:
//! - a PyTorchJob: Kueue's JobSet integration queues the JobSet (Kueue's shipped configuration
//!   leaves the v1 Kubeflow kinds out);
//! - an MPIJob: Kueue's `kubeflow.org/mpijob` integration (on by default) queues the MPIJob
//!   itself, and trainset carries Kueue's decisions to the JobSet.
//!
//! For each: a job waits behind a ClusterQueue without quota, runs on the flavor's nodes once
//! quota is granted and succeeds; and a higher-priority job preempts a running one, which shows
//! as suspended and runs again afterwards.

use std::time::{Duration, Instant};

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::{
    TestNamespace, apply, client, condition, create, dynamic_api, install_crds, operator,
    pods_with, status, wait_for, wait_state,
};

const FLAVOR: &str = "trainset-e2e-kwok";
const QUEUE: &str = "training";
const LOW: &str = "trainset-e2e-low";
const HIGH: &str = "trainset-e2e-high";

/// A queued kind: API version, replica-specs field, default container, replica types.
struct Kind {
    api_version: &'static str,
    kind: &'static str,
    field: &'static str,
    container: &'static str,
    replicas: [(&'static str, i64); 2],
    /// The kind of object Kueue queues (owner of the Workload).
    queued_object: &'static str,
}

const PYTORCH: Kind = Kind {
    api_version: "kubeflow.org/v1",
    kind: "PyTorchJob",
    field: "pytorchReplicaSpecs",
    container: "pytorch",
    replicas: [("Master", 1), ("Worker", 2)],
    queued_object: "JobSet",
};

const MPI: Kind = Kind {
    api_version: "kubeflow.org/v2beta1",
    kind: "MPIJob",
    field: "mpiReplicaSpecs",
    container: "mpi",
    replicas: [("Launcher", 1), ("Worker", 2)],
    queued_object: "MPIJob",
};

/// A queued job named `name` at `priority`; its three pods ask for one CPU each and run `seconds`.
fn queued_job(kind: &Kind, name: &str, priority: &str, seconds: u32) -> Value {
    let delay = format!("{seconds}s");
    let mut specs = serde_json::Map::new();
    for (replica_type, count) in kind.replicas {
        let template = json!({
            "metadata": {"annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": delay,
                "pod-complete.stage.kwok.x-k8s.io/jitter-delay": delay}},
            "spec": {"containers": [{"name": kind.container, "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}});
        specs.insert(
            replica_type.to_owned(),
            json!({"replicas": count, "template": template}),
        );
    }
    let labels =
        json!({"kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/priority-class": priority});
    json!({"apiVersion": kind.api_version, "kind": kind.kind,
           "metadata": {"name": name, "labels": labels}, "spec": {kind.field: specs}})
}

/// The test's namespace with a ClusterQueue for it alone (`cpu` of quota, a higher priority
/// preempts a lower one) and its LocalQueue; the flavor and the priority classes are shared.
struct Queues {
    client: Client,
    ns: TestNamespace,
    cluster_queue: Value,
}

impl Queues {
    async fn new(kind: &Kind, cpu: &str) -> Self {
        let client = client().await;
        install_crds(&client).await;
        operator::ensure(&client).await;
        let ns = TestNamespace::create(&client, &kind.kind.to_ascii_lowercase()).await;
        let flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR}, "spec": {"nodeLabels": {"type": "kwok"}}});
        let low = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": LOW}, "value": 10});
        let high = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": HIGH}, "value": 1000});
        let cluster_queue = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": ns.name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]
        }});
        let local_queue = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE}, "spec": {"clusterQueue": ns.name}});
        for (object, namespace) in [
            (&flavor, None),
            (&low, None),
            (&high, None),
            (&cluster_queue, None),
            (&local_queue, Some(ns.name.as_str())),
        ] {
            apply(&client, object, namespace)
                .await
                .unwrap_or_else(|e| panic!("applying {}: {e}", object["kind"]));
        }
        Self {
            client,
            ns,
            cluster_queue,
        }
    }

    async fn set_quota(&mut self, cpu: &str) {
        self.cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] =
            json!(cpu);
        apply(&self.client, &self.cluster_queue, None)
            .await
            .expect("changing the quota");
    }

    fn workloads(&self) -> Api<DynamicObject> {
        let probe = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"});
        dynamic_api(&self.client, &probe, Some(&self.ns.name))
    }

    /// The Workload Kueue made for `name` (owned by the JobSet or the job of that name).
    async fn workload(&self, name: &str) -> DynamicObject {
        let workloads = self.workloads();
        wait_for(
            Duration::from_secs(30),
            &format!("Kueue's Workload for {name}"),
            || async {
                let list = workloads.list(&ListParams::default()).await.ok()?;
                list.items
                    .into_iter()
                    .find(|w| w.owner_references().iter().any(|o| o.name == name))
            },
        )
        .await
    }

    async fn pods_of(&self, job: &str) -> Vec<Pod> {
        let selector = format!("training.kubeflow.org/job-name={job}");
        pods_with(&self.client, &self.ns.name, &selector).await
    }

    async fn jobset(&self, name: &str) -> JobSet {
        let jobsets: Api<JobSet> = Api::namespaced(self.client.clone(), &self.ns.name);
        jobsets.get(name).await.expect("JobSet")
    }

    async fn delete(self) {
        // Best effort, like the namespace: a leftover queue never makes a test pass or fail.
        let _ = dynamic_api(&self.client, &self.cluster_queue, None)
            .delete(&self.ns.name, &DeleteParams::background())
            .await;
        self.ns.delete().await;
    }
}

/// Each replicated job's name and pod template.
fn pod_templates(jobset: &JobSet) -> impl Iterator<Item = (&str, &PodTemplateSpec)> {
    jobset
        .spec
        .replicated_jobs
        .iter()
        .filter_map(|r| Some((r.name.as_str(), &r.template.spec.as_ref()?.template)))
}

/// Every replicated job's pod template selects the flavor's nodes.
fn assert_on_flavor_nodes(jobset: &JobSet) {
    for (name, pod) in pod_templates(jobset) {
        let node_selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
        assert_eq!(
            node_selector
                .and_then(|s| s.get("type"))
                .map(String::as_str),
            Some("kwok"),
            "{name}: Kueue's flavor reached the pod template"
        );
    }
}

/// Holds a job without quota, grants quota, and checks the run; returns the finished JobSet.
async fn waits_for_quota_then_runs(kind: &Kind) -> JobSet {
    let mut queues = Queues::new(kind, "0").await;
    let name = "held";
    let api = create(
        &queues.client,
        &queues.ns.name,
        &queued_job(kind, name, LOW, 3),
    )
    .await;

    // Queued: the Workload belongs to the object Kueue queues, and nothing runs.
    let queued = queues.workload(name).await;
    let owners: Vec<String> = queued
        .owner_references()
        .iter()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .collect();
    assert_eq!(owners, [format!("{}/{name}", kind.queued_object)]);
    wait_state(&api, name, "Suspended", Duration::from_secs(30)).await;
    let held_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < held_until {
        assert!(
            queues.pods_of(name).await.is_empty(),
            "pods ran without quota"
        );
        assert_eq!(
            queues.jobset(name).await.spec.suspend,
            Some(true),
            "the JobSet waits for Kueue"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Quota: Kueue admits, the pods run on the flavor's nodes, the job succeeds.
    queues.set_quota("8").await;
    let succeeded = wait_state(&api, name, "Succeeded", Duration::from_secs(120)).await;
    assert!(succeeded["startTime"].is_string(), "{succeeded}");
    let jobset = queues.jobset(name).await;
    assert_on_flavor_nodes(&jobset);
    // Kueue saw the end too: it finishes the Workload.
    let workloads = queues.workloads();
    let workload_name = queued.name_any();
    wait_for(
        Duration::from_secs(30),
        "the Workload to finish",
        || async {
            let workload = workloads.get(&workload_name).await.ok()?;
            let finished = condition(&status(&workload), "Finished")["status"] == "True";
            finished.then_some(())
        },
    )
    .await;
    queues.delete().await;
    jobset
}

/// A long low-priority job runs on all the quota; a high-priority one preempts it, runs and
/// succeeds; the low one is then admitted again and runs, with no JobSet restart counted.
async fn preemption_suspends_and_resumes(kind: &Kind) {
    let queues = Queues::new(kind, "3").await;
    let (client, ns) = (&queues.client, queues.ns.name.as_str());
    let low = create(client, ns, &queued_job(kind, "low", LOW, 600)).await;
    wait_state(&low, "low", "Running", Duration::from_secs(60)).await;
    let high = create(client, ns, &queued_job(kind, "high", HIGH, 3)).await;

    let preempted = wait_state(&low, "low", "Suspended", Duration::from_secs(60)).await;
    assert_eq!(preempted["restarts"], 0, "{preempted}");
    wait_for(Duration::from_secs(60), "low's pods to go", || async {
        queues.pods_of("low").await.is_empty().then_some(())
    })
    .await;
    wait_state(&high, "high", "Succeeded", Duration::from_secs(120)).await;
    let resumed = wait_state(&low, "low", "Running", Duration::from_secs(120)).await;
    assert_eq!(resumed["restarts"], 0, "{resumed}");
    assert_eq!(
        condition(&resumed, "Suspended")["status"],
        "False",
        "{resumed}"
    );
    assert_on_flavor_nodes(&queues.jobset("low").await);
    let low_status = status(&low.get("low").await.expect("low"));
    assert_eq!(low_status["state"], "Running");
    queues.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_a_pytorchjob_through_its_jobset() {
    waits_for_quota_then_runs(&PYTORCH).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_queues_an_mpijob_itself_and_trainset_carries_its_admission() {
    let jobset = waits_for_quota_then_runs(&MPI).await;
    // The pod-set labels Kueue wrote into the MPIJob's templates are on the JobSet's.
    for (name, pod) in pod_templates(&jobset) {
        let labels = pod.metadata.as_ref().and_then(|m| m.labels.as_ref());
        assert_eq!(
            labels
                .and_then(|l| l.get("kueue.x-k8s.io/podset"))
                .map(String::as_str),
            Some(name),
            "{name}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_preempts_a_pytorchjob_and_admits_it_again() {
    preemption_suspends_and_resumes(&PYTORCH).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn kueue_preempts_an_mpijob_and_admits_it_again() {
    preemption_suspends_and_resumes(&MPI).await;
}
