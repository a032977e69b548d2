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
        let (name, uid) = (object.name.as_str(), object.uid.as_deref());
        let client = ctx.client.clone();
        match object.kind {
            ForeignKind::Pod => {
                delete(
                    Api::<Pod>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?
            }
            ForeignKind::Service => {
                delete(
                    Api::<Service>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?;
            }
            ForeignKind::Job => {
                delete(
                    Api::<Job>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    true,
                )
                .await?
            }
            ForeignKind::ConfigMap => {
                delete(
                    Api::<ConfigMap>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?;
            }
            ForeignKind::Secret => {
                delete(
                    Api::<Secret>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?
            }
            ForeignKind::ServiceAccount => {
                let api = Api::<ServiceAccount>::namespaced(client, namespace);
                delete(api, name, uid, owner, false).await?;
            }
            ForeignKind::Role => {
                delete(
                    Api::<Role>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?
            }
            ForeignKind::RoleBinding => {
                delete(
                    Api::<RoleBinding>::namespaced(client, namespace),
                    name,
                    uid,
                    owner,
                    false,
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// Deletes `name` while it has `uid`; without one, reads it first and deletes it only if
/// `owner` controls it and it lacks trainset's label. Gone already (or another object now) is
/// fine. `foreground`: the object stays until what it owns is gone (a launcher Job's pods).
async fn delete<T>(
    api: Api<T>,
    name: &str,
    uid: Option<&str>,
    owner: Option<&str>,
    foreground: bool,
) -> Result<(), Error>
where
    T: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    let kind = T::kind(&());
    let uid = match uid {
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
