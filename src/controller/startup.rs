//! Before the controllers start: the JobSet CRD must be established, and the log says whether
//! pods get v1's per-pod labels.

use std::time::Duration;

use jobset_types::JobSet;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, Resource};

use super::Shutdown;
use crate::pod_labels::{self, BINDING, POLICY, POLICY_API, POLICY_NAME, Support};

pub const JOBSET_CRD: &str = "jobsets.jobset.x-k8s.io";

/// Waits, logging why, until the apiserver serves JobSets (their CRD is established). Returns
/// false on shutdown. Asks discovery, not for the CRD: the CRD is megabytes of schema that the
/// allocator would keep for the life of the process.
pub async fn wait_for_jobset_crd(client: &Client, shutdown: Shutdown) -> bool {
    let mut shutdown = std::pin::pin!(shutdown);
    let api_version = JobSet::api_version(&());
    loop {
        match client.list_api_group_resources(&api_version).await {
            Ok(list) if list.resources.iter().any(|r| r.name == JobSet::plural(&())) => {
                return true;
            }
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(error) => tracing::warn!(%error, "cannot ask the apiserver for JobSets yet"),
        }
        tracing::info!(
            crd = JOBSET_CRD,
            "waiting for the JobSet CRD to be established; is JobSet installed?"
        );
        tokio::select! {
            () = &mut shutdown => return false,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// Whether the pod-labels policy and its binding are installed (read once, at startup).
pub async fn pod_labels_support(client: &Client) -> pod_labels::Support {
    let served = match client.list_api_group_resources(POLICY_API).await {
        Ok(list) => list.resources.iter().any(|r| r.name == POLICY.1),
        Err(kube::Error::Api(error)) if error.code == 404 => false,
        Err(error) => return Support::Unknown(error.to_string()),
    };
    if !served {
        return Support::ApiMissing;
    }
    for (kind, plural) in [POLICY, BINDING] {
        let (group, version) = POLICY_API.split_once('/').unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.get_opt(POLICY_NAME).await {
            Ok(Some(_)) => {}
            Ok(None) => return Support::NotInstalled { missing: kind },
            Err(error) => return Support::Unknown(error.to_string()),
        }
    }
    Support::Installed
}
