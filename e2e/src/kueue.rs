//! Kueue's queues for one test: a ClusterQueue for the test's namespace alone, with a quota of
//! one resource on the KWOK nodes' flavor (a higher priority preempts a lower one), and its
//! LocalQueue; the flavor and the priority classes are shared by every test.

use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::{TestNamespace, apply, dynamic_api, pods_with, wait_for};

pub const FLAVOR: &str = "trainset-e2e-kwok";
/// The LocalQueue of every test's namespace.
pub const QUEUE: &str = "training";
pub const LOW: &str = "trainset-e2e-low";
pub const HIGH: &str = "trainset-e2e-high";

/// The labels that queue a job in the test's LocalQueue at `priority`.
pub fn queued(priority: &str) -> Value {
    json!({"kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/priority-class": priority})
}

pub struct Queues {
    pub client: Client,
    pub ns: TestNamespace,
    cluster_queue: Value,
}

impl Queues {
    /// A namespace named after `prefix` and its queues, with `quota` of `resource` (`cpu`,
    /// `nvidia.com/gpu`).
    pub async fn new(client: &Client, prefix: &str, resource: &str, quota: &str) -> Self {
        let ns = TestNamespace::create(client, prefix).await;
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
            "resourceGroups": [{"coveredResources": [resource], "flavors": [
                {"name": FLAVOR, "resources": [{"name": resource, "nominalQuota": quota}]}]}]
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
            apply(client, object, namespace)
                .await
                .unwrap_or_else(|e| panic!("applying {}: {e}", object["kind"]));
        }
        Self {
            client: client.clone(),
            ns,
            cluster_queue,
        }
    }

    pub async fn set_quota(&mut self, quota: &str) {
        self.cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] =
            json!(quota);
        apply(&self.client, &self.cluster_queue, None)
            .await
            .expect("changing the quota");
    }

    pub fn workloads(&self) -> Api<DynamicObject> {
        let probe = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"});
        dynamic_api(&self.client, &probe, Some(&self.ns.name))
    }

    /// The Workload Kueue made for `name` (owned by the JobSet or the job of that name).
    pub async fn workload(&self, name: &str) -> DynamicObject {
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

    pub async fn pods_of(&self, job: &str) -> Vec<Pod> {
        let selector = format!("training.kubeflow.org/job-name={job}");
        pods_with(&self.client, &self.ns.name, &selector).await
    }

    pub async fn jobset(&self, name: &str) -> JobSet {
        let jobset = self.find_jobset(name).await;
        jobset.unwrap_or_else(|| panic!("JobSet {name} does not exist"))
    }

    /// The JobSet `name`, if it exists.
    pub async fn find_jobset(&self, name: &str) -> Option<JobSet> {
        let jobsets: Api<JobSet> = Api::namespaced(self.client.clone(), &self.ns.name);
        jobsets.get_opt(name).await.expect("reading the JobSet")
    }

    pub async fn delete(self) {
        // Best effort, like the namespace: a leftover queue never makes a test pass or fail.
        let _ = dynamic_api(&self.client, &self.cluster_queue, None)
            .delete(&self.ns.name, &DeleteParams::background())
            .await;
        self.ns.delete().await;
    }
}
