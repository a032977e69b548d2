//! Carries out a [`Plan`](super::plan::Plan): every write trainset makes to the cluster.

use std::fmt::Debug;

use jobset_types::JobSet;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, FIELD_MANAGER, kube_error, refused_content};
use crate::api::{CleanPodPolicy, JobStatus};
use crate::autoscaler::AutoscalerWrite;
use crate::compile::gang;
use crate::compile::{Compiled, JOB_NAME, OPERATOR_NAME};
use crate::kinds::Served;
use crate::plan::v1::takeover::{ForeignKind, ForeignObject};
use crate::plan::v1::{LauncherRole, Plan};
use crate::plan::{Holder, SuspendWrite, holder, resource_exists};
use crate::run_policy;

/// How applying a plan ended.
pub enum Applied {
    Done,
    /// The apiserver refused what the job compiled to (a pod-template field only Kubernetes
    /// checks, an object too large): no retry can change that, the job is invalid.
    Refused(String),
    /// The JobSet to create exists already: the cache had not seen it yet. Nothing after the
    /// creation was written.
    Exists,
    /// An object of a name the job needs belongs to someone else (said here): it is left
    /// untouched, and the job cannot run.
    Foreign(String),
    /// An object of a name the job needs (named here) is an earlier job's, being removed: look
    /// again once it is gone.
    Earlier(String),
}

pub async fn apply<K: Served>(
    job: &K,
    namespace: &str,
    plan: &Plan,
    ctx: &Context,
) -> Result<Applied, Error> {
    // Every field, so that one added to the plan and not written here does not compile.
    let Plan {
        create: to_create,
        suspend: suspend_write,
        resize,
        autoscaler,
        status,
        delete_jobset,
        clean_pods: clean,
        delete_job,
        launcher_role,
        stop_foreign,
        gang: gang_objects,
        happened: _,
        requeue: _,
    } = plan;
    let name = job.name_any();
    let jobsets: Api<JobSet> = Api::namespaced(ctx.client.clone(), namespace);
    // The previous operator's objects go before anything of trainset's is made.
    super::takeover::stop(stop_foreign, job.uid().as_deref(), namespace, ctx).await?;
    if let Some(compiled) = to_create {
        match create(namespace, compiled, ctx).await? {
            Applied::Done => gang_written(job, &compiled.gang, ctx),
            other => return Ok(other),
        }
    }
    if let Some(write) = suspend_write {
        match suspend(namespace, &name, write, ctx).await? {
            Applied::Done => {
                if let SuspendWrite::Resume { gang, .. } = write {
                    gang_written(job, gang, ctx);
                }
            }
            other => return Ok(other),
        }
    }
    if let Some(stop) = follow_the_spec(job, namespace, gang_objects, ctx).await? {
        return Ok(stop);
    }
    if let Some(patch) = resize {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..Default::default()
        };
        jobsets
            .patch(&name, &params, &Patch::Json::<()>(patch.clone()))
            .await
            .map_err(kube_error("resizing the Worker Job of JobSet", &name))?;
    }
    if let Some(write) = autoscaler {
        write_autoscaler(namespace, write, ctx).await?;
    }
    if let Some(status) = status {
        write_status::<K>(job.meta(), namespace, status, ctx).await?;
    }
    if let Some(role) = launcher_role {
        write_launcher_role(job, namespace, role, ctx).await?;
    }
    if *delete_jobset {
        jobsets
            .delete(&name, &DeleteParams::foreground())
            .await
            .map_err(kube_error("deleting JobSet", &name))?;
    }
    if let Some(policy) = clean {
        clean_pods(job, namespace, *policy, ctx).await?;
    }
    if *delete_job {
        // This job, not one created since under its name.
        Api::<K>::namespaced(ctx.client.clone(), namespace)
            .delete(&name, &delete_only(job.uid()))
            .await
            .map_err(kube_error("deleting", &name))?;
        tracing::info!(%name, namespace, "deleted after ttlSecondsAfterFinished");
    }
    Ok(Applied::Done)
}

/// A background delete of the object with `uid` only, not one created since under its name.
fn delete_only(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::background()
    }
}

/// Makes, replaces or deletes the job's HorizontalPodAutoscaler. A conflict (one made or changed
/// since it was read) is an error, so the retry reads it again; one already gone is fine.
async fn write_autoscaler(
    namespace: &str,
    write: &AutoscalerWrite,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), namespace);
    let written = match write {
        AutoscalerWrite::Create(hpa) => api.create(&post_params(), hpa).await.map(|_| ()),
        AutoscalerWrite::Replace(hpa) => api
            .replace(&hpa.name_any(), &post_params(), hpa)
            .await
            .map(|_| ()),
        AutoscalerWrite::Delete { name, uid } => {
            match api.delete(name, &delete_only(Some(uid.clone()))).await {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        }
    };
    let name = match write {
        AutoscalerWrite::Create(hpa) | AutoscalerWrite::Replace(hpa) => hpa.name_any(),
        AutoscalerWrite::Delete { name, .. } => name.clone(),
    };
    written.map_err(kube_error("writing HorizontalPodAutoscaler", &name))
}

/// Suspends or resumes the JobSet `name`. A resume first writes the gang's objects again, so
/// that a job resized while suspended gets a gang of its size; one that is not the job's own
/// stops it there, untouched, as at creation.
pub(super) async fn suspend(
    namespace: &str,
    name: &str,
    write: &SuspendWrite,
    ctx: &Context,
) -> Result<Applied, Error> {
    let jobsets: Api<JobSet> = Api::namespaced(ctx.client.clone(), namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    match write {
        SuspendWrite::Suspend => {
            let patch = json!({"spec": {"suspend": true}});
            jobsets
                .patch(name, &params, &Patch::Merge(&patch))
                .await
                .map_err(kube_error("suspending JobSet", name))?;
        }
        SuspendWrite::Resume { patch, gang } => {
            for object in gang {
                if let Some(stop) = rewrite_gang_object(namespace, object, ctx).await? {
                    return Ok(stop);
                }
            }
            jobsets
                .patch(name, &params, &Patch::Json::<()>(patch.clone()))
                .await
                .map_err(kube_error("resuming JobSet", name))?;
        }
    }
    Ok(Applied::Done)
}

/// How creating a JobSet ended, for [`Applied`].
fn created(result: Result<(), Error>) -> Result<Applied, Error> {
    match result {
        Ok(()) => Ok(Applied::Done),
        Err(Error::Kube { source, .. }) if conflict(&source) => Ok(Applied::Exists),
        Err(Error::Kube {
            action,
            object,
            source,
        }) if refused_content(&source) => Ok(Applied::Refused(format!(
            "{action} {object} was refused: {source}"
        ))),
        Err(error) => Err(error),
    }
}

fn conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Creates the auxiliary objects once (the gang scheduler's first, so that no pod exists
/// before its gang), then the JobSet. An object of one of their names that is not the job's own
/// stops it there, untouched.
pub(super) async fn create(
    namespace: &str,
    compiled: &Compiled,
    ctx: &Context,
) -> Result<Applied, Error> {
    for object in &compiled.gang {
        if let Some(stop) = create_gang_object(namespace, object, ctx).await? {
            return Ok(stop);
        }
    }
    if let Some(config_map) = &compiled.config_map {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
        if let Some(stop) = create_once(&api, config_map).await? {
            return Ok(stop);
        }
    }
    if let Some(secret) = &compiled.secret {
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
        if let Some(stop) = create_once(&api, secret).await? {
            return Ok(stop);
        }
    }
    if let Some(access) = &compiled.launcher_access {
        if let Some(account) = &access.service_account {
            let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
            if let Some(stop) = create_once(&api, account).await? {
                return Ok(stop);
            }
        }
        let api: Api<Role> = Api::namespaced(ctx.client.clone(), namespace);
        if let Some(stop) = create_once(&api, &access.role).await? {
            return Ok(stop);
        }
        let api: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), namespace);
        if let Some(stop) = create_once(&api, &access.role_binding).await? {
            return Ok(stop);
        }
    }
    if let Some(stop) = service_taken(namespace, &compiled.jobset, ctx) {
        return Ok(stop);
    }
    let name = compiled.jobset.name_any();
    let made = Api::<JobSet>::namespaced(ctx.client.clone(), namespace)
        .create(&post_params(), &compiled.jobset)
        .await
        .map(|_| ())
        .map_err(kube_error("creating JobSet", &name));
    created(made)
}

/// Creates `object` unless it exists: auxiliary objects are written once and never updated. One
/// that exists is used only if the job controls it (its metadata alone is read, never a
/// Secret's keys); otherwise what stops the job is returned.
pub(super) async fn create_once<T>(api: &Api<T>, object: &T) -> Result<Option<Applied>, Error>
where
    T: Resource<DynamicType = ()> + Clone + Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api.create(&post_params(), object).await {
        Ok(_) => Ok(None),
        Err(source) if conflict(&source) => {
            let described = format!("{} {name}", T::kind(&()));
            let existing = api
                .get_metadata_opt(&name)
                .await
                .map_err(kube_error("getting", &name))?;
            Ok(match existing {
                Some(existing) => claim(object.meta(), &existing.metadata, described),
                // Deleted since: it was on its way out.
                None => Some(Applied::Earlier(described)),
            })
        }
        Err(source) => Err(Error::Kube {
            action: "creating",
            object: name,
            source,
        }),
    }
}

/// Creates one of the gang scheduler's objects (a PodGroup, a Workload) unless the job has it.
/// A cluster that does not serve its API (the scheduler's CRD is not installed, the Workload
/// API is off) cannot run the job with the gang it was started to give it: the job is refused.
async fn create_gang_object(
    namespace: &str,
    object: &DynamicObject,
    ctx: &Context,
) -> Result<Option<Applied>, Error> {
    let name = object.name_any();
    let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
    let described = format!("{kind} {name}");
    let Some(resource) = gang::api_resource(object) else {
        return Ok(Some(Applied::Refused(format!(
            "{described} has no API version"
        ))));
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    match api.create(&post_params(), object).await {
        Ok(_) => Ok(None),
        Err(source) if conflict(&source) => {
            let existing = api
                .get_metadata_opt(&name)
                .await
                .map_err(kube_error("getting", &name))?;
            Ok(match existing {
                Some(existing) => claim(&object.metadata, &existing.metadata, described),
                None => Some(Applied::Earlier(described)),
            })
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Some(Applied::Refused(format!(
            "{described}: this cluster does not serve {}, which the job's gang needs (trainset's \
             --gang-scheduler, or a TrainJob runtime's podGroupPolicy): install the gang \
             scheduler and its CRDs, or run the job without a gang",
            resource.api_version
        )))),
        Err(source) => Err(Error::Kube {
            action: "creating",
            object: described,
            source,
        }),
    }
}

/// Writes a gang object's spec as the job compiles now unless it has it, or makes the object
/// again if it is gone. One that is not the job's own is left untouched and stops the job.
async fn rewrite_gang_object(
    namespace: &str,
    object: &DynamicObject,
    ctx: &Context,
) -> Result<Option<Applied>, Error> {
    let Some(resource) = gang::api_resource(object) else {
        return create_gang_object(namespace, object, ctx).await;
    };
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    let existing = api
        .get_opt(&name)
        .await
        .map_err(kube_error("getting", &name))?;
    let Some(existing) = existing else {
        return create_gang_object(namespace, object, ctx).await;
    };
    let described = format!("{} {name}", resource.kind);
    if let Some(stop) = claim(&object.metadata, &existing.metadata, described) {
        return Ok(Some(stop));
    }
    let wanted = &object.data["spec"];
    if existing.data["spec"] == *wanted {
        return Ok(None);
    }
    // The whole spec: a field the job no longer sets is removed. Only over the version read.
    let mut spec = wanted.clone();
    if let (Some(spec), Some(old)) = (spec.as_object_mut(), existing.data["spec"].as_object()) {
        for gone in old.keys().filter(|k| wanted.get(k.as_str()).is_none()) {
            spec.insert(gone.clone(), Value::Null);
        }
    }
    let patch = json!({
        "metadata": {"resourceVersion": existing.metadata.resource_version},
        "spec": spec,
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    api.patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_error("updating", &name))?;
    Ok(None)
}

/// Writes a running job's gang objects as its spec now compiles, where they differ, once per
/// generation of the job: after a change of `minAvailable` or of the replicas the PodGroup asks
/// for the new gang, as training-operator and mpi-operator keep it.
async fn follow_the_spec<K: Served>(
    job: &K,
    namespace: &str,
    objects: &[DynamicObject],
    ctx: &Context,
) -> Result<Option<Applied>, Error> {
    let Some(generation) = job.meta().generation else {
        return Ok(None);
    };
    let key = super::v1::job_key(job);
    if objects.is_empty() || ctx.gang_generations().get(&key) == Some(&generation) {
        return Ok(None);
    }
    for object in objects {
        if let Some(stop) = rewrite_gang_object(namespace, object, ctx).await? {
            return Ok(Some(stop));
        }
    }
    gang_written(job, objects, ctx);
    Ok(None)
}

/// Remembers that the job's gang objects are as its current spec has them, if any of them
/// follows the spec.
fn gang_written<K: Served>(job: &K, objects: &[DynamicObject], ctx: &Context) {
    let Some(generation) = job.meta().generation else {
        return;
    };
    if objects.iter().any(gang::rewritable) {
        ctx.gang_generations()
            .insert(super::v1::job_key(job), generation);
    }
}

/// Whether the `existing` object `described` may stand for the one `wanted` (which names the
/// job as its controller): `None` when it is the job's own.
fn claim(wanted: &ObjectMeta, existing: &ObjectMeta, described: String) -> Option<Applied> {
    let owner = wanted
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    match holder(existing, &owner.kind, &owner.name, Some(&owner.uid)) {
        Holder::This => None,
        Holder::Earlier => Some(Applied::Earlier(described)),
        Holder::Foreign(holder) => Some(Applied::Foreign(resource_exists(
            &described,
            &holder,
            &owner.kind,
            &owner.name,
        ))),
    }
}

/// The JobSet controller makes the headless Service `<subdomain>` for its pods' DNS names and
/// takes over one that exists: a Service of that name that no JobSet of this name controls
/// (a user's TensorBoard Service named like the job, say) would leave the pods without DNS.
fn service_taken(namespace: &str, jobset: &JobSet, ctx: &Context) -> Option<Applied> {
    let network = jobset.spec.network.as_ref();
    if network.and_then(|n| n.enable_dns_hostnames) == Some(false) {
        return None;
    }
    let name = jobset.name_any();
    let subdomain = jobset
        .spec
        .network
        .as_ref()
        .and_then(|network| network.subdomain.clone())
        .unwrap_or_else(|| name.clone());
    let existing = ctx.caches.service(namespace, &subdomain)?;
    let described = format!("Service {subdomain}");
    let controller = existing
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        // This job's JobSet's (a cache behind), or an earlier one's that its JobSet replaces.
        Some(owner) if owner.kind == JobSet::kind(&()) && owner.name == name => None,
        _ if existing.deletion_timestamp.is_some() => Some(Applied::Earlier(described)),
        other => {
            let holder = other.map_or("no controller".to_owned(), |o| {
                format!("{} {}", o.kind, o.name)
            });
            let job = jobset
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true));
            let (kind, job) = job.map_or(("job", name.as_str()), |o| {
                (o.kind.as_str(), o.name.as_str())
            });
            Some(Applied::Foreign(resource_exists(
                &described, &holder, kind, job,
            )))
        }
    }
}

/// Server-side apply of the status: a field this manager stops sending (a count back at 0) is
/// removed. The body carries the job's uid, so a write planned for a job deleted and created
/// again under its name is refused instead of landing on the new one. The answer is read
/// untyped: the job may be one the types cannot read.
pub(super) async fn write_status<K: Served>(
    job: &ObjectMeta,
    namespace: &str,
    status: &JobStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let mut status = serde_json::to_value(status).map_err(|source| Error::Encode {
        object: job.name.clone().unwrap_or_default(),
        source,
    })?;
    applicable(&mut status);
    apply_status(&ApiResource::erase::<K>(&()), job, namespace, status, ctx).await
}

/// Server-side apply of `status` on the object `job` of `resource`, guarded by its uid.
pub(super) async fn apply_status(
    resource: &ApiResource,
    job: &ObjectMeta,
    namespace: &str,
    status: Value,
    ctx: &Context,
) -> Result<(), Error> {
    let name = job.name.clone().unwrap_or_default();
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "uid": job.uid},
        "status": status,
    });
    Api::<DynamicObject>::namespaced_with(ctx.client.clone(), namespace, resource)
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(kube_error("patching status of", &name))?;
    Ok(())
}

/// Brings the launcher's Role to `role`'s rules where they differ from what this process last
/// wrote. Only the job's own Role is written: one that is not (the creation step refused the job
/// then) or that is gone is left alone.
async fn write_launcher_role<K: Served>(
    job: &K,
    namespace: &str,
    role: &LauncherRole,
    ctx: &Context,
) -> Result<(), Error> {
    let key = super::v1::job_key(job);
    if ctx.launcher_roles().get(&key) == Some(&role.rules) {
        return Ok(());
    }
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(mut live) = roles
        .get_opt(&role.name)
        .await
        .map_err(kube_error("getting Role", &role.name))?
    else {
        return Ok(());
    };
    let owned = live
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == job.uid().as_ref());
    if !owned {
        return Ok(());
    }
    if live.rules.as_ref() != Some(&role.rules) {
        live.rules = Some(role.rules.clone());
        // Replaced at the version read: a change since then is read again on the next reconcile.
        roles
            .replace(&role.name, &post_params(), &live)
            .await
            .map_err(kube_error("updating Role", &role.name))?;
    }
    ctx.launcher_roles().insert(key, role.rules.clone());
    Ok(())
}

/// Deletes the pods `cleanPodPolicy` removes (pods are not cached: this runs once per job).
async fn clean_pods<K: Served>(
    job: &K,
    namespace: &str,
    policy: CleanPodPolicy,
    ctx: &Context,
) -> Result<(), Error> {
    let name = job.name_any();
    let selector = format!(
        "{JOB_NAME}={},{OPERATOR_NAME}={}",
        name.replace('/', "-"),
        job.operator_name()
    );
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube_error("listing pods of", &name))?;
    let cleaned: Vec<String> = list
        .items
        .iter()
        .filter(|pod| run_policy::cleans(policy, pod))
        .map(ResourceExt::name_any)
        .collect();
    for pod_name in &cleaned {
        pods.delete(pod_name, &DeleteParams::background())
            .await
            .map_err(kube_error("deleting pod", pod_name))?;
    }
    // training-operator made a Service of each pod's name, which goes with it (as v1 deletes
    // it); trainset's JobSets have none.
    let uid = job.uid().unwrap_or_default();
    let services: Vec<ForeignObject> = ctx
        .caches
        .services_controlled_by(namespace, &uid)
        .into_iter()
        .filter(|(service, _)| cleaned.contains(service))
        .map(|(name, uid)| ForeignObject {
            kind: ForeignKind::Service,
            name,
            uid: Some(uid),
        })
        .collect();
    super::takeover::stop(&services, Some(&uid), namespace, ctx).await
}

/// Server-side apply stores an empty object as null, which the CRD refuses: an empty
/// `replicaStatuses` is left out (the field is then removed), and a replica status with nothing
/// to say (v1 omits zero counts) says `active: 0`.
fn applicable(status: &mut Value) {
    let Some(fields) = status.as_object_mut() else {
        return;
    };
    // A job taken over: the previous operator owns the counts it wrote, which one left out
    // would keep, so each is sent, zeros too.
    let counts_owned_elsewhere = fields.contains_key("takeover");
    if fields
        .get("replicaStatuses")
        .and_then(Value::as_object)
        .is_some_and(serde_json::Map::is_empty)
    {
        fields.remove("replicaStatuses");
    }
    if let Some(replicas) = fields
        .get_mut("replicaStatuses")
        .and_then(Value::as_object_mut)
    {
        for replica in replicas.values_mut() {
            if replica.as_object().is_some_and(serde_json::Map::is_empty) {
                replica["active"] = json!(0);
            }
            if counts_owned_elsewhere && let Some(counts) = replica.as_object_mut() {
                for count in ["active", "succeeded", "failed"] {
                    counts.entry(count).or_insert(json!(0));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_applied_without_empty_objects() {
        let mut created_suspended = json!({"replicaStatuses": {}, "state": "Suspended"});
        applicable(&mut created_suspended);
        assert_eq!(created_suspended, json!({"state": "Suspended"}));
        let mut ended = json!({"replicaStatuses": {"Worker": {}, "Launcher": {"succeeded": 1}}});
        applicable(&mut ended);
        assert_eq!(
            ended,
            json!({"replicaStatuses": {"Worker": {"active": 0}, "Launcher": {"succeeded": 1}}})
        );
    }
}
