//! Before the controllers start: the JobSet CRD must be established, the log says whether
//! trainset's admission policies are installed (v1's per-pod labels, the MPIJob API version),
//! and whether the watches can stream their lists.

use std::time::Duration;

use futures::TryStreamExt;
use jobset_types::JobSet;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource};

use super::Shutdown;
use super::caches::Listing;
use crate::shipped_policy::{BINDING, POLICY, POLICY_API, Shipped, Support};

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

/// How long the probe of streaming lists waits for the apiserver's answer.
const STREAMING_PROBE: Duration = Duration::from_secs(10);

/// Streaming lists if the apiserver serves them, else lists in pages. Asked once, with a
/// streaming list of the JobSets carrying a label no object has: the apiserver refuses it (the
/// WatchList gate off; an etcd without progress notifications answers 500) or ends it at once
/// with the bookmark that says the list is complete.
pub async fn listing(client: &Client) -> Listing {
    let api: Api<PartialObjectMeta<JobSet>> = Api::all(client.clone());
    let config = Listing::Streaming
        .config()
        .labels(&format!("{PROBE_LABEL}=none"));
    let listed = watcher::watcher(api, config)
        .try_filter(|event| std::future::ready(matches!(event, watcher::Event::InitDone)));
    let mut listed = std::pin::pin!(listed);
    match tokio::time::timeout(STREAMING_PROBE, listed.try_next()).await {
        Ok(Ok(Some(_))) => Listing::Streaming,
        Ok(Err(error)) => {
            tracing::info!(%error, "the apiserver does not stream lists; listing in pages");
            Listing::Pages
        }
        Ok(Ok(None)) | Err(_) => {
            tracing::info!("no streaming list within {STREAMING_PROBE:?}; listing in pages");
            Listing::Pages
        }
    }
}

/// A label no object carries: what the probe of streaming lists selects.
const PROBE_LABEL: &str = "trainset.io/streaming-list-probe";

/// Whether `policy` and its binding are installed (read once, at startup).
pub async fn policy_support(client: &Client, policy: &Shipped) -> Support {
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
        match api.get_opt(policy.name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Support::NotInstalled { missing: kind },
            Err(error) => return Support::Unknown(error.to_string()),
        }
    }
    Support::Installed
}
