//! The kubelet of the pods labelled [`LABEL`]`=`[`PROBED`]: KWOK gives them a node, an IP and
//! the Running phase but leaves their Ready condition alone (`e2e/cluster`), so the Deployment
//! controller sees them ready only when this says so. This runs each new pod's container from
//! its image ([`RunningPod`]), sets its Ready condition from its readiness probe once a second,
//! as the kubelet's prober does, and stops the container (SIGTERM) once the pod is being deleted.
//! A container that exits is not started again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::http_get;
use crate::pod::{RunningPod, Runtime};

/// The label that hands a pod to this kubelet instead of KWOK's readiness.
pub const LABEL: &str = "trainset.io/e2e-kubelet";
pub const PROBED: &str = "probed";
/// How often pods are looked at and probed.
const PERIOD: Duration = Duration::from_secs(1);

pub struct Kubelet {
    pods: Arc<Mutex<BTreeMap<String, RunningPod>>>,
    task: JoinHandle<()>,
}

impl Kubelet {
    /// Serves the labelled pods of `namespace`, each on one of `ports` (offsets, see
    /// [`crate::loopback`]): at most that many at once.
    pub fn start(client: Client, namespace: &str, ports: Vec<&'static str>) -> Self {
        let pods = Arc::new(Mutex::new(BTreeMap::new()));
        let task = tokio::spawn(run(
            Api::namespaced(client.clone(), namespace),
            client,
            ports,
            pods.clone(),
        ));
        Self { pods, task }
    }

    /// The names and metrics addresses of the pods whose containers run.
    pub async fn running(&self) -> Vec<(String, String)> {
        assert!(!self.task.is_finished(), "the kubelet stopped");
        let mut pods = self.pods.lock().await;
        pods.values_mut()
            .filter_map(|pod| {
                pod.running()
                    .then(|| (pod.name.clone(), pod.address.clone()))
            })
            .collect()
    }

    /// SIGKILLs the container of the pod `name`, as a crash or an OOM kill would end it.
    pub async fn kill(&self, name: &str) {
        let mut pods = self.pods.lock().await;
        let pod = pods
            .get_mut(name)
            .unwrap_or_else(|| panic!("pod {name} does not run here"));
        pod.kill();
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        // The pods' containers are removed as their RunningPods drop with the task's map.
        if let Ok(mut pods) = self.pods.try_lock() {
            pods.clear();
        }
    }
}

async fn run(
    api: Api<Pod>,
    client: Client,
    ports: Vec<&'static str>,
    running: Arc<Mutex<BTreeMap<String, RunningPod>>>,
) {
    let selector = ListParams::default().labels(&format!("{LABEL}={PROBED}"));
    loop {
        if let Ok(list) = api.list(&selector).await {
            let mut running = running.lock().await;
            // Being deleted or gone: stop its container, as the kubelet does before the pod goes.
            let live: BTreeMap<String, &Pod> = list
                .items
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                .map(|pod| (pod.name_any(), pod))
                .collect();
            let stopping: Vec<String> = running
                .keys()
                .filter(|name| !live.contains_key(*name))
                .cloned()
                .collect();
            for name in stopping {
                // One whose container has exited already (killed) is only cleaned up.
                if let Some(mut pod) = running.remove(&name)
                    && pod.running()
                {
                    pod.terminate().await;
                }
            }
            for (name, pod) in &live {
                let placed = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_ref())
                    .is_some();
                if running.contains_key(name) || !placed {
                    continue;
                }
                let used: Vec<&str> = running.values().map(|p| p.address.as_str()).collect();
                let free = ports
                    .iter()
                    .find(|port| !used.contains(&crate::loopback(port).as_str()));
                if let Some(port) = free {
                    let started = RunningPod::start(&client, pod, Runtime::Image, port).await;
                    running.insert(name.clone(), started);
                }
            }
            for (name, started) in running.iter_mut() {
                let ready = started.running()
                    && http_get(&started.address, &started.readiness)
                        .await
                        .is_some_and(|(code, _)| code == 200);
                if live.get(name).is_some_and(|pod| is_ready(pod) != ready) {
                    set_ready(&api, name, ready).await;
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pod's Ready and ContainersReady conditions, as the kubelet's status manager writes them.
async fn set_ready(api: &Api<Pod>, name: &str, ready: bool) {
    let now = Time(Timestamp::now());
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": status, "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
    ]}});
    let _ = api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await;
}
