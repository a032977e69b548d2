//! Deletes what a previous operator made for a job trainset took over (`plan::v1::takeover`):
//! before the job runs as trainset's own JobSet, or as it is suspended.

use std::fmt::Debug;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Context, Error, kube_error};
use crate::compile::{MANAGED_BY, TRAINSET};
use crate::plan::v1::takeover::{ForeignKind, ForeignObject};

/// Deletes each of `objects` in `namespace` that is still the one the plan saw; one named by
/// name alone only where `owner` (the job's uid) controls it and trainset did not make it.
pub async fn stop(
    objects: &[ForeignObject],
    owner: Option<&str>,
    namespace: &str,
    ctx: &Context,
) -> Result<(), Error> {
    for object in objects {
        let target = Target {
            client: &ctx.client,
            namespace,
            name: &object.name,
            uid: object.uid.as_deref(),
            owner,
        };
        match object.kind {
            ForeignKind::Pod => delete::<Pod>(&target).await?,
            ForeignKind::Service => delete::<Service>(&target).await?,
            ForeignKind::Job => delete::<Job>(&target).await?,
            ForeignKind::ConfigMap => delete::<ConfigMap>(&target).await?,
            ForeignKind::Secret => delete::<Secret>(&target).await?,
            ForeignKind::ServiceAccount => delete::<ServiceAccount>(&target).await?,
            ForeignKind::Role => delete::<Role>(&target).await?,
            ForeignKind::RoleBinding => delete::<RoleBinding>(&target).await?,
        }
    }
    Ok(())
}

/// One object to delete: `name` in `namespace`, while it has `uid`; without one, only where
/// `owner` controls it and trainset did not make it.
struct Target<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    name: &'a str,
    uid: Option<&'a str>,
    owner: Option<&'a str>,
}

/// Deletes the target, as it reads it first where no uid names it. Gone already (or another
/// object now) is fine. A Job goes in the foreground: it stays until its pods are gone, so a
/// launcher's pod is never left without the Job that says whose it is.
async fn delete<T>(target: &Target<'_>) -> Result<(), Error>
where
    T: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<T> = Api::namespaced(target.client.clone(), target.namespace);
    let (name, owner) = (target.name, target.owner);
    let kind = T::kind(&());
    let foreground = kind == Job::kind(&());
    let uid = match target.uid {
        Some(uid) => uid.to_owned(),
        None => {
            let Some(found) = api
                .get_opt(name)
                .await
                .map_err(kube_error("getting", name))?
            else {
                return Ok(());
            };
            let controlled = found
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == owner);
            let trainsets = found.labels().get(MANAGED_BY).map(String::as_str) == Some(TRAINSET);
            match found.uid() {
                Some(uid) if controlled && !trainsets => uid,
                _ => return Ok(()),
            }
        }
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..if foreground {
            DeleteParams::foreground()
        } else {
            DeleteParams::background()
        }
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(%kind, name, "deleted what the previous operator made");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(kube_error("deleting", name)(source)),
    }
}
