//! The pods that carry a training job's name but that no JobSet made: a previous operator's
//! (training-operator's, mpi-operator's), in which a job trainset takes over may still run
//! (`plan::v1::takeover`). Once the switch is done there are none, so the watch holds nothing;
//! each pod is kept as far as following its job reads it, and each change of one wakes the
//! controller of its kind.

use std::collections::HashMap;

use futures::channel::mpsc::Sender;
use futures::{SinkExt, StreamExt};
use jobset_types::keys::label as jobset_label;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::Listing;
use crate::compile::{JOB_NAME, JOB_ROLE, OPERATOR_NAME, REPLICA_INDEX, REPLICA_TYPE};
use crate::controller::Shutdown;
use crate::telemetry::WatchHealth;

/// The controllers the pods wake, by their `training.kubeflow.org/operator-name`.
pub type Routes = HashMap<String, Sender<Result<Pod, watcher::Error>>>;

/// The pods labelled `training.kubeflow.org/job-name` `namespace`/`job`, not being counted twice
/// by name.
pub fn of(store: &Store<Pod>, namespace: &str, job: &str) -> Vec<Pod> {
    store
        .state()
        .iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
        .filter(|pod| pod.labels().get(JOB_NAME).map(String::as_str) == Some(job))
        .map(|pod| (**pod).clone())
        .collect()
}

/// What following a job reads of its pod: who controls it and whose it is, its phase, and each
/// container's restarts and exit code.
fn project(pod: &mut Pod) {
    const LABELS: [&str; 5] = [
        JOB_NAME,
        REPLICA_TYPE,
        REPLICA_INDEX,
        JOB_ROLE,
        OPERATOR_NAME,
    ];
    pod.metadata = super::trimmed(std::mem::take(&mut pod.metadata), &LABELS);
    pod.spec = None;
    let container = |status: ContainerStatus| ContainerStatus {
        name: status.name,
        restart_count: status.restart_count,
        state: status
            .state
            .and_then(|s| s.terminated)
            .map(|t| ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: t.exit_code,
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
        ..ContainerStatus::default()
    };
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        reason: status.reason,
        container_statuses: status
            .container_statuses
            .map(|all| all.into_iter().map(container).collect()),
        init_container_statuses: status
            .init_container_statuses
            .map(|all| all.into_iter().map(container).collect()),
        ..PodStatus::default()
    });
}

/// Watches the pods into `writer`'s store until `shutdown`, waking the controller each names.
pub async fn watch(
    client: Client,
    listing: Listing,
    mut health: WatchHealth,
    mut writer: Writer<Pod>,
    mut routes: Routes,
    shutdown: Shutdown,
) {
    let selected = listing
        .config()
        .labels(&format!("{JOB_NAME},!{}", jobset_label::JOBSET_NAME));
    let events = watcher(Api::<Pod>::all(client), selected)
        .default_backoff()
        .inspect(move |event| health.record(event))
        .modify(project)
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "foreign pods watch failed; retrying");
                continue;
            }
        };
        writer.apply_watcher_event(&event);
        let (watcher::Event::Apply(pod) | watcher::Event::Delete(pod)) = event else {
            continue;
        };
        let route = pod
            .labels()
            .get(OPERATOR_NAME)
            .and_then(|o| routes.get_mut(o));
        if let Some(tx) = route {
            // A closed channel is a controller that stopped: nothing to tell.
            let _ = tx.send(Ok(pod)).await;
        }
    }
}

/// The job a pod is labelled with, as the controller of its kind finds it.
pub fn job_of<K: kube::Resource<DynamicType = ()>>(pod: &Pod) -> Option<ObjectRef<K>> {
    let name = pod.labels().get(JOB_NAME)?;
    let namespace = pod.namespace()?;
    Some(ObjectRef::new(name).within(&namespace))
}
