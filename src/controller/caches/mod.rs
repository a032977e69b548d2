//! The process's one watch of trainset's JobSets and one of their Jobs. Each is kept in a store
//! that reconciles read instead of asking the apiserver, packed to what trainset reads, and each
//! change of what it reads goes to the controller of the object's training kind only.

mod creation_failures;
mod foreign_pods;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::channel::mpsc::{Receiver, Sender, channel};
use futures::{SinkExt, StreamExt, TryStreamExt};
use jobset_types::JobSet;
use jobset_types::keys::{condition as jobset_condition, label as jobset_label};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use creation_failures::CreationFailures;
pub use foreign_pods::job_of as job_of_foreign_pod;

use super::Shutdown;
use super::packed::{Keep, Kept, Packed, Projection, Unpacked, pack_event};
use crate::api::limits::MAX_TOTAL_REPLICAS;
use crate::api::trainer::TrainJob;
use crate::compile::v1::mpi_kubectl_exec::OPERATOR as EXEC_OPERATOR;
use crate::compile::{MANAGED_BY, OPERATOR_NAME, REPLICA_TYPE, TRAINSET};
use crate::kinds::Served;
use crate::telemetry::{Readiness, WatchHealth};

/// Events a controller may fall behind by before its watch waits for it.
const BUFFER: usize = 1024;

pub type Trigger<T> = Receiver<Result<Packed<T>, watcher::Error>>;

/// The controllers a watch wakes, by the key its route gives an object.
type Senders<T> = HashMap<String, Sender<Result<Packed<T>, watcher::Error>>>;

/// A pod's metadata as the pods watch keeps it.
pub type PodMeta = PartialObjectMeta<Pod>;

/// What one controller reacts to: the JobSets and Jobs of its kind's jobs, and the pods whose
/// names a launcher's Role lists (MPIJob's controller only).
pub struct Triggers {
    pub jobsets: Trigger<JobSet>,
    pub jobs: Trigger<Job>,
    pub pods: Option<Receiver<Result<PodMeta, watcher::Error>>>,
    /// The pods a previous operator made for the kind's jobs.
    pub foreign_pods: Receiver<Result<Pod, watcher::Error>>,
}

/// Objects per page of a watch's initial list, when it is listed in pages: what is decoded at
/// once before it is packed.
const LIST_PAGE: u32 = 100;

/// The stores the reconciles read.
#[derive(Clone)]
pub struct Caches {
    jobsets: Store<Packed<JobSet>>,
    jobs: Store<Packed<Job>>,
    /// Every Service's name, namespace, uid, controller and deletion, to see whose one named
    /// like a JobSet's subdomain is before the JobSet would take it over, and which a previous
    /// operator made for a job.
    services: Store<PartialObjectMeta<Service>>,
    /// The pods of MPIJob `kubeflow.org/v1` jobs (`operator-name: mpijob-controller`): name,
    /// namespace, the JobSet labels that say whose, and deletion.
    pods: Store<PodMeta>,
    /// The pods a previous operator made for training jobs (see `foreign_pods`).
    foreign_pods: Store<Pod>,
    /// What Kubernetes refused to create for the JobSets in `jobsets`.
    creation_failures: CreationFailures,
}

impl Caches {
    /// Resolves once both watches have listed everything once. Await it from one task only:
    /// kube-runtime's readiness wakes only the last task that waited.
    pub async fn ready(&self) -> bool {
        self.jobsets.wait_until_ready().await.is_ok()
            && self.jobs.wait_until_ready().await.is_ok()
            && self.services.wait_until_ready().await.is_ok()
            && self.pods.wait_until_ready().await.is_ok()
            && self.foreign_pods.wait_until_ready().await.is_ok()
    }

    /// The pods labelled with the name of the job `namespace`/`job` that no JobSet made.
    pub fn foreign_pods(&self, namespace: &str, job: &str) -> Vec<Pod> {
        foreign_pods::of(&self.foreign_pods, namespace, job)
    }

    /// The Services in `namespace` that the object with `uid` controls: (name, uid).
    pub fn services_controlled_by(&self, namespace: &str, uid: &str) -> Vec<(String, String)> {
        self.services
            .state()
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .filter(|s| {
                let owners = s.metadata.owner_references.as_deref().unwrap_or_default();
                owners
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
            })
            .filter_map(|s| Some((s.metadata.name.clone()?, s.metadata.uid.clone()?)))
            .collect()
    }

    /// The names of the pods of replicated job `replicated` of JobSet `namespace`/`jobset`
    /// that are not being deleted, sorted. Only MPIJob `kubeflow.org/v1` pods are kept.
    pub fn pods_of(&self, namespace: &str, jobset: &str, replicated: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods
            .state()
            .iter()
            .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| {
                let label = |key: &str| pod.metadata.labels.as_ref()?.get(key).cloned();
                label(jobset_label::JOBSET_NAME).as_deref() == Some(jobset)
                    && label(jobset_label::REPLICATED_JOB_NAME).as_deref() == Some(replicated)
            })
            .filter_map(|pod| pod.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The metadata of the Service `namespace`/`name`, if it exists.
    pub fn service(&self, namespace: &str, name: &str) -> Option<ObjectMeta> {
        let service = self.services.get(&ObjectRef::new(name).within(namespace))?;
        Some(service.metadata.clone())
    }

    /// The JobSet `namespace`/`name`, as far as trainset reads it.
    pub fn jobset(&self, namespace: &str, name: &str) -> Option<JobSet> {
        self.jobsets
            .get(&ObjectRef::new(name).within(namespace))?
            .read()
    }

    /// The Jobs of `jobset`, looked up by the names JobSet gives them
    /// (`<jobset>-<replicated job>-<index>`): a reconcile costs the JobSet's size, not the cache's.
    pub fn jobs_of(&self, jobset: &JobSet) -> Vec<Job> {
        let (name, namespace) = (jobset.name_any(), jobset.namespace().unwrap_or_default());
        let name = name.as_str();
        let names = jobset.spec.replicated_jobs.iter().flat_map(|replicated| {
            let count = replicated
                .replicas
                .unwrap_or(1)
                .clamp(0, MAX_TOTAL_REPLICAS);
            (0..count).map(move |index| format!("{name}-{}-{index}", replicated.name))
        });
        names
            .take(MAX_TOTAL_REPLICAS.unsigned_abs() as usize)
            .filter_map(|job| self.jobs.get(&ObjectRef::new(&job).within(&namespace)))
            .filter_map(|job| job.read())
            .collect()
    }

    /// What Kubernetes said it cannot create for `jobset` (a Job, a Job's pod), if anything.
    pub fn creation_failure(&self, jobset: &JobSet) -> Option<String> {
        self.creation_failures.of(jobset, self)
    }
}

/// Where a changed JobSet is sent: the controller of its controller owner's kind.
#[derive(Clone, Default)]
pub struct Routes(Senders<JobSet>);

impl Routes {
    fn key(jobset: &Packed<JobSet>) -> Option<String> {
        controller_kind(jobset.meta()).map(str::to_owned)
    }

    /// Wakes the controller of `jobset`'s job, if one runs.
    pub async fn send_jobset(&mut self, jobset: Packed<JobSet>) {
        if let Some(tx) = Self::key(&jobset).and_then(|key| self.0.get_mut(&key)) {
            // A closed channel is a controller that stopped: nothing to tell.
            let _ = tx.send(Ok(jobset)).await;
        }
    }
}

/// The kind of the object's controller owner.
fn controller_kind(meta: &ObjectMeta) -> Option<&str> {
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    let owner = owners.iter().find(|o| o.controller == Some(true));
    owner.map(|o| o.kind.as_str())
}

/// The two watches before they start: controllers take their triggers first.
pub struct Watches {
    caches: Caches,
    jobset_writer: Writer<Packed<JobSet>>,
    job_writer: Writer<Packed<Job>>,
    service_writer: Writer<PartialObjectMeta<Service>>,
    pod_writer: Writer<PodMeta>,
    foreign_pod_writer: Writer<Pod>,
    /// By a foreign pod's `training.kubeflow.org/operator-name`.
    foreign_pod_routes: foreign_pods::Routes,
    /// The controller that keeps launchers' Roles (MPIJob's), once it takes its triggers.
    pod_route: Option<Sender<Result<PodMeta, watcher::Error>>>,
    /// By the kind of a JobSet's controller owner.
    jobset_routes: Routes,
    /// By a Job's `training.kubeflow.org/operator-name`.
    job_routes: Senders<Job>,
}

impl Watches {
    pub fn new() -> Self {
        let (jobsets, jobset_writer) = reflector::store();
        let (jobs, job_writer) = reflector::store();
        let (services, service_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let (foreign_pods, foreign_pod_writer) = reflector::store();
        Self {
            caches: Caches {
                jobsets,
                jobs,
                services,
                pods,
                foreign_pods,
                creation_failures: CreationFailures::default(),
            },
            jobset_writer,
            job_writer,
            service_writer,
            pod_writer,
            foreign_pod_writer,
            foreign_pod_routes: HashMap::new(),
            pod_route: None,
            jobset_routes: Routes::default(),
            job_routes: HashMap::new(),
        }
    }

    pub fn caches(&self) -> Caches {
        self.caches.clone()
    }

    /// The triggers of kind `K`'s controller.
    pub fn triggers<K: Served>(&mut self) -> Triggers {
        let (job_tx, jobs) = channel(BUFFER);
        let (foreign_tx, foreign_pods) = channel(BUFFER);
        for operator in K::OPERATOR_NAMES {
            self.job_routes
                .insert((*operator).to_owned(), job_tx.clone());
            self.foreign_pod_routes
                .insert((*operator).to_owned(), foreign_tx.clone());
        }
        let pods = K::OPERATOR_NAMES.contains(&EXEC_OPERATOR).then(|| {
            let (pod_tx, pods) = channel(BUFFER);
            self.pod_route = Some(pod_tx);
            pods
        });
        Triggers {
            jobsets: self.jobset_trigger(&K::kind(&())),
            jobs,
            pods,
            foreign_pods,
        }
    }

    /// The JobSets controlled by objects of `kind`. Take it only for a controller that runs: a
    /// trigger nobody reads stalls the watch once its buffer is full.
    pub fn jobset_trigger(&mut self, kind: &str) -> Trigger<JobSet> {
        let (jobset_tx, jobsets) = channel(BUFFER);
        self.jobset_routes.0.insert(kind.to_owned(), jobset_tx);
        jobsets
    }

    /// Starts the watches, and those of the events saying what Kubernetes could not create for
    /// trainset's objects; they run until `shutdown`.
    pub fn start(
        self,
        client: &Client,
        listing: Listing,
        readiness: &Arc<Readiness>,
        shutdown: Shutdown,
    ) {
        creation_failures::start(
            client,
            listing,
            &self.caches,
            &self.jobset_routes,
            &shutdown,
        );
        let mut health = readiness.watch();
        let services = watcher(
            Api::<PartialObjectMeta<Service>>::all(client.clone()),
            listing.config(),
        )
        .default_backoff()
        .inspect(move |event| health.record(event))
        .modify(|service| {
            // Every item's `apiVersion` and `kind` (two strings) say what the watch already does.
            service.types = None;
            service.metadata = trimmed(std::mem::take(&mut service.metadata), &[]);
        })
        .reflect(self.service_writer)
        .take_until(shutdown.clone())
        .for_each(|_| std::future::ready(()));
        tokio::spawn(services);
        tokio::spawn(foreign_pods::watch(
            client.clone(),
            listing,
            readiness.watch(),
            self.foreign_pod_writer,
            self.foreign_pod_routes,
            shutdown.clone(),
        ));
        tokio::spawn(watch_pods(
            client.clone(),
            listing,
            readiness.watch(),
            (self.pod_writer, self.pod_route),
            shutdown.clone(),
        ));
        let jobsets = Keeping {
            project: project_jobset,
            route: Routes::key,
            inert: |_| false,
        };
        tokio::spawn(watch(
            Api::all(client.clone()),
            listing,
            readiness.watch(),
            self.jobset_writer,
            (self.jobset_routes.0, jobsets),
            shutdown.clone(),
        ));
        let jobs = Keeping {
            project: project_job,
            route: |job| job.label(OPERATOR_NAME),
            inert: job_counts_nothing,
        };
        tokio::spawn(watch(
            Api::all(client.clone()),
            listing,
            readiness.watch(),
            self.job_writer,
            (self.job_routes, jobs),
            shutdown,
        ));
    }
}

/// The metadata of the pods whose names launchers' Roles list, selected by their
/// operator-name: a pod's creation or deletion wakes its job's reconcile, nothing else of it does.
async fn watch_pods(
    client: Client,
    listing: Listing,
    mut health: WatchHealth,
    (mut writer, mut route): (
        Writer<PodMeta>,
        Option<Sender<Result<PodMeta, watcher::Error>>>,
    ),
    shutdown: Shutdown,
) {
    const LABELS: [&str; 2] = [jobset_label::JOBSET_NAME, jobset_label::REPLICATED_JOB_NAME];
    let store = writer.as_reader();
    let selected = listing
        .config()
        .labels(&format!("{OPERATOR_NAME}={EXEC_OPERATOR}"));
    let events = watcher(Api::<PodMeta>::all(client), selected)
        .default_backoff()
        .inspect(move |event| health.record(event))
        .modify(|pod| {
            pod.types = None;
            pod.metadata = trimmed(std::mem::take(&mut pod.metadata), &LABELS);
        })
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "pods watch failed; retrying");
                continue;
            }
        };
        let woken = match &event {
            watcher::Event::Apply(pod) => match store.get(&ObjectRef::from_obj(pod)) {
                Some(kept) => {
                    kept.metadata.labels != pod.metadata.labels
                        || kept.metadata.deletion_timestamp.is_some()
                            != pod.metadata.deletion_timestamp.is_some()
                }
                None => true,
            },
            watcher::Event::Delete(_) => true,
            _ => false,
        }
        .then(|| match &event {
            watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => Some(pod.clone()),
            _ => None,
        })
        .flatten();
        writer.apply_watcher_event(&event);
        if let (Some(pod), Some(tx)) = (woken, route.as_mut()) {
            // A closed channel is a controller that stopped: nothing to tell.
            let _ = tx.send(Ok(pod)).await;
        }
    }
}

/// Of an object's metadata, what the metadata-only caches keep: its name, namespace, uid and
/// version, the `labels` asked for, its controller owner and whether it is being deleted.
fn trimmed(meta: ObjectMeta, labels: &[&str]) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta
            .labels
            .map(|mut kept| {
                kept.retain(|key, _| labels.contains(&key.as_str()));
                kept
            })
            .filter(|kept| !kept.is_empty()),
        owner_references: meta.owner_references.map(|mut owners| {
            owners.retain(|o| o.controller == Some(true));
            owners
        }),
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    }
}

/// How a watch keeps and routes the objects of one type.
struct Keeping<T> {
    /// What of each object is kept.
    project: Projection,
    /// The controller an object wakes: its key in the routes.
    route: fn(&Packed<T>) -> Option<String>,
    /// Whether the object's arrival or departure changes nothing a plan reads.
    inert: fn(&Packed<T>) -> bool,
}

/// A Job with no pod counted, started or finished: the JobSet controller creating the Jobs of
/// 10,000 suspended JobSets would otherwise wake a reconcile for each.
fn job_counts_nothing(job: &Packed<Job>) -> bool {
    job.rest() == "{}"
}

/// How a watch lists what exists before it watches: the same for every watch of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// A streaming list (Kubernetes' WatchList, on by default since 1.34): the objects come on
    /// the watch itself, one at a time, each packed as it comes. One request, however many
    /// objects, and never a page of them decoded at once.
    Streaming,
    /// LIST requests of [`LIST_PAGE`] objects each, then the watch: for an apiserver that does
    /// not stream lists.
    Pages,
}

impl Listing {
    pub fn config(self) -> watcher::Config {
        match self {
            Self::Streaming => watcher::Config::default().streaming_lists(),
            Self::Pages => watcher::Config::default().page_size(LIST_PAGE),
        }
    }
}

/// Of a JobSet, what trainset reads: all but its pod templates' specs, of which only what a resume
/// may change (`suspend::resume_patch` compares them: node selector, tolerations, scheduling
/// gates); the per-replicated-job counts only of a TrainJob's (v1 status never reads them); and
/// the conditions statuses read. The JobSet controller's `Suspended` and startup-policy conditions
/// would otherwise wake a reconcile per JobSet, 10,000 of them for 10,000 suspended jobs.
impl Kept for JobSet {
    const KEPT: Keep = {
        const RESUMABLE: Keep = Keep::only(&[
            ("nodeSelector", Keep::All),
            ("tolerations", Keep::All),
            ("schedulingGates", Keep::All),
        ]);
        const POD_TEMPLATE: Keep = Keep::within(&[("spec", RESUMABLE)]);
        const JOB_TEMPLATE: Keep =
            Keep::within(&[("spec", Keep::within(&[("template", POD_TEMPLATE)]))]);
        const REPLICATED_JOB: Keep = Keep::within(&[("template", JOB_TEMPLATE)]);
        Keep::within(&[
            ("metadata", Keep::METADATA),
            (
                "spec",
                Keep::within(&[("replicatedJobs", Keep::Items(&REPLICATED_JOB))]),
            ),
        ])
    };
}

/// What only a JobSet's values say it keeps: its status, as above.
fn project_jobset(meta: &mut ObjectMeta, jobset: &mut Map<String, Value>) {
    const READ: [&str; 3] = [
        jobset_condition::COMPLETED,
        jobset_condition::FAILED,
        jobset_condition::RESTARTING,
    ];
    let Some(status) = jobset.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    if controller_kind(meta) != Some(&TrainJob::kind(&())) {
        status.remove("replicatedJobsStatus");
    }
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        conditions.retain(|c| c["type"].as_str().is_some_and(|t| READ.contains(&t)));
    }
    without_zero_status(jobset);
}

/// `object`'s status without its zero values, and no status if nothing else is left: Go writes
/// `restarts: 0` or an empty list where it has nothing to say, which reads as no field at all.
/// The JobSet controller's first status on a suspended JobSet is then no change.
fn without_zero_status(object: &mut Map<String, Value>) {
    let zero = |value: &Value| match value {
        Value::Null => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) => false,
    };
    if let Some(fields) = object.get_mut("status").and_then(Value::as_object_mut) {
        fields.retain(|_, value| !zero(value));
    }
    if object.get("status").is_some_and(zero) {
        object.remove("status");
    }
}

/// Of a Job, what reconciles and routing read: its name, the labels that say whose pods and which
/// restart attempt, its pod counts and whether it finished. The rest (pod template, annotations,
/// other conditions) is most of a Job's size, and changes of it wake nothing.
impl Kept for Job {
    const KEPT: Keep = Keep::only(&[("metadata", Keep::METADATA), ("status", Keep::All)]);
}

/// What only a Job's values say it keeps: its labels and status, as above.
fn project_job(meta: &mut ObjectMeta, job: &mut Map<String, Value>) {
    const LABELS: [&str; 4] = [
        REPLICA_TYPE,
        OPERATOR_NAME,
        jobset_label::JOBSET_NAME,
        jobset_label::RESTART_ATTEMPT,
    ];
    // `ready`: whether the job runs (pods counted `active` may not be placed yet).
    const COUNTS: [&str; 5] = ["active", "ready", "succeeded", "failed", "startTime"];
    const FINISHED: [&str; 2] = ["Complete", "Failed"];
    let labels = meta.labels.take().map(|mut labels| {
        labels.retain(|key, _| LABELS.contains(&key.as_str()));
        labels
    });
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        labels,
        ..ObjectMeta::default()
    };
    let Some(status) = job.get_mut("status").and_then(Value::as_object_mut) else {
        job.remove("status");
        return;
    };
    let finished = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str())
        .find(|type_| FINISHED.contains(type_))
        .map(|type_| serde_json::json!([{"type": type_, "status": "True"}]));
    status.retain(|field, _| COUNTS.contains(&field.as_str()));
    if let Some(finished) = finished {
        status.insert("conditions".to_owned(), finished);
    }
    // A Job created without a status and one whose status counts nothing read the same.
    without_zero_status(job);
}

/// A watch of trainset's objects of type `T`, kept in `writer`'s store as `keeping` says; each
/// change of what is kept goes to the controller of `routes` it names.
async fn watch<T>(
    api: Api<Unpacked<T>>,
    listing: Listing,
    mut health: WatchHealth,
    mut writer: Writer<Packed<T>>,
    (mut routes, keeping): (Senders<T>, Keeping<T>),
    shutdown: Shutdown,
) where
    T: Resource<DynamicType = ()> + Kept + DeserializeOwned + Send + Sync + 'static,
{
    let store = writer.as_reader();
    let managed = listing.config().labels(&format!("{MANAGED_BY}={TRAINSET}"));
    let events = watcher(api, managed)
        .default_backoff()
        .inspect(move |event| health.record(event))
        .map_ok(move |event| pack_event(event, keeping.project))
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    // The first list is not routed: every controller reconciles all its jobs when it starts, and
    // routing it could fill a channel before the controllers read. A later list (after a watch
    // outage) is, once the store holds it: what it lists, and what vanished meanwhile.
    let mut listed = false;
    let mut before_relist: Option<Vec<Arc<Packed<T>>>> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "watch failed; retrying");
                continue;
            }
        };
        // A change of nothing kept (the JobSet controller's status churn, a resourceVersion),
        // and an object whose coming or going nothing reads, wake no reconcile.
        let unchanged = match &event {
            watcher::Event::Apply(object) => match store.get(&ObjectRef::from_obj(object)) {
                Some(kept) => kept.same_as(object),
                None => (keeping.inert)(object),
            },
            watcher::Event::Delete(object) => (keeping.inert)(object),
            _ => false,
        };
        if let watcher::Event::Init = event {
            before_relist = listed.then(|| store.state());
        }
        writer.apply_watcher_event(&event);
        let changed: Vec<Packed<T>> = match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) if !unchanged => {
                vec![object]
            }
            watcher::Event::InitDone => {
                listed = true;
                before_relist
                    .take()
                    .map(|before| relisted(&store, before))
                    .unwrap_or_default()
            }
            _ => continue,
        };
        for object in changed {
            if let Some(tx) = (keeping.route)(&object).and_then(|key| routes.get_mut(&key)) {
                // A closed channel is a controller that stopped: nothing to tell.
                let _ = tx.send(Ok(object)).await;
            }
        }
    }
}

/// After a re-list: everything the store now holds, and what it held before and lost.
fn relisted<T>(store: &Store<T>, before: Vec<Arc<T>>) -> Vec<T>
where
    T: Resource<DynamicType = ()> + Clone,
{
    let now = store.state();
    let kept: HashSet<ObjectRef<T>> = now.iter().map(|o| ObjectRef::from_obj(&**o)).collect();
    let vanished = before
        .into_iter()
        .filter(|o| !kept.contains(&ObjectRef::from_obj(&**o)));
    now.into_iter()
        .chain(vanished)
        .map(|o| (*o).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn packed<T: Kept>(object: Value, project: Projection) -> Packed<T> {
        serde_json::from_value::<Unpacked<T>>(object)
            .unwrap_or_else(|e| panic!("unpacking: {e}"))
            .pack(project)
    }

    fn jobset(name: &str, suspend: bool) -> Packed<JobSet> {
        packed(
            json!({
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"suspend": suspend, "replicatedJobs": []}
            }),
            project_jobset,
        )
    }

    fn list(writer: &mut Writer<Packed<JobSet>>, objects: &[Packed<JobSet>]) {
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    #[test]
    fn a_relist_routes_what_it_lists_as_stored_and_what_vanished() {
        let (store, mut writer) = reflector::store::<Packed<JobSet>>();
        list(&mut writer, &[jobset("a", true), jobset("b", false)]);
        let before = store.state();
        list(&mut writer, &[jobset("a", false)]);
        let mut routed: Vec<(String, Option<bool>)> = relisted(&store, before)
            .iter()
            .filter_map(Packed::read)
            .map(|o| (o.name_any(), o.spec.suspend))
            .collect();
        routed.sort();
        // `a` as the new list has it (resumed), `b` because it is gone.
        assert_eq!(
            routed,
            [("a".to_owned(), Some(false)), ("b".to_owned(), Some(false))]
        );
    }

    #[test]
    fn a_packed_jobset_resumes_with_the_same_patch_as_the_full_one() {
        use crate::compile::Options;
        use crate::kinds::compile_manifest;
        let pod = json!({"metadata": {"labels": {"team": "a"}},
                         "spec": {"containers": [{"name": "pytorch", "image": "x"}],
                                  "nodeSelector": {"pool": "old"}}});
        let job = |pool: &str| {
            let mut pod = pod.clone();
            pod["spec"]["nodeSelector"]["pool"] = json!(pool);
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                   "metadata": {"name": "demo", "namespace": "ns"},
                   "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod}}}})
        };
        let options = Options::default();
        let compile = |pool: &str| {
            compile_manifest(job(pool), &options)
                .map(|c| c.jobset)
                .unwrap_or_else(|e| panic!("compile: {e}"))
        };
        let live = compile("old");
        let as_json = serde_json::to_value(&live).unwrap_or_default();
        let kept = packed::<JobSet>(as_json.clone(), project_jobset).read();
        let kept = kept.unwrap_or_else(|| panic!("the packed JobSet does not read"));
        let wanted = compile("new");
        let full = crate::suspend::resume_patch(&live, &wanted);
        assert_eq!(crate::suspend::resume_patch(&kept, &wanted), full);
        assert!(!full.0.is_empty(), "the node selector changed: {full:?}");
        let pod = |jobset: &JobSet| {
            let template = jobset.spec.replicated_jobs[0].template.spec.clone();
            template
                .and_then(|job| job.template.spec)
                .unwrap_or_default()
        };
        assert!(pod(&kept).containers.is_empty());
        assert_eq!(pod(&kept).node_selector, pod(&live).node_selector);
    }

    #[test]
    fn a_jobset_status_no_plan_reads_is_no_change() {
        let suspended_jobset = |status: Option<Value>| {
            let mut jobset = json!({
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "demo", "namespace": "ns"},
                "spec": {"suspend": true, "replicatedJobs": []}
            });
            if let Some(status) = status {
                jobset["status"] = status;
            }
            packed::<JobSet>(jobset, project_jobset)
        };
        let with = |conditions: Value| {
            suspended_jobset(Some(json!({"restarts": 0, "conditions": conditions})))
        };
        let condition = |type_: &str| {
            json!({"type": type_, "status": "True", "reason": "r",
            "message": "m", "lastTransitionTime": "2027-01-15T08:00:00Z"})
        };
        let created = suspended_jobset(None);
        let suspended = with(json!([condition("Suspended")]));
        assert!(
            created.same_as(&suspended),
            "the JobSet controller's first status: Suspended, restarts 0"
        );
        let done = with(json!([condition("Suspended"), condition("Completed")]));
        assert!(!suspended.same_as(&done), "Completed");
        let kept = done.read().and_then(|j| j.status).map(|s| s.conditions);
        let types: Vec<String> = kept.into_iter().flatten().map(|c| c.type_).collect();
        assert_eq!(types, ["Completed"]);
    }

    #[test]
    fn the_jobs_of_a_jobset_are_found_by_their_names() {
        let (store, mut writer) = reflector::store::<Packed<Job>>();
        let job = |name: &str, namespace: &str| -> Packed<Job> {
            packed(
                json!({"metadata": {"name": name, "namespace": namespace}}),
                project_job,
            )
        };
        let (jobsets, _) = reflector::store::<Packed<JobSet>>();
        for (name, namespace) in [
            ("demo-master-0", "ns"),
            ("demo-worker-0", "ns"),
            ("demo-worker-1", "ns"),
            ("demo-worker-0", "elsewhere"),
            ("demo2-worker-0", "ns"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(job(name, namespace)));
        }
        let caches = Caches {
            jobsets,
            jobs: store,
            services: reflector::store().0,
            pods: reflector::store().0,
            foreign_pods: reflector::store().0,
            creation_failures: CreationFailures::default(),
        };
        let demo: JobSet = serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {"replicatedJobs": [
                {"name": "master", "template": {}},
                {"name": "worker", "replicas": 2, "template": {}}
            ]}
        }))
        .unwrap_or_else(|e| panic!("JobSet: {e}"));
        let mut found: Vec<String> = caches.jobs_of(&demo).iter().map(|j| j.name_any()).collect();
        found.sort();
        assert_eq!(found, ["demo-master-0", "demo-worker-0", "demo-worker-1"]);
    }

    fn full_job(active: i32, other_label: &str) -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7",
                         "managedFields": [{"manager": "m"}], "annotations": {"a": "b"},
                         "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "jobset.sigs.k8s.io/restart-attempt": "0",
                                    "jobset.sigs.k8s.io/jobset-name": "demo",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                    "other": other_label}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"active": active, "succeeded": 1, "failed": 0, "ready": active,
                       "startTime": "2027-01-15T08:00:00Z",
                       "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                      {"type": "Complete", "status": "True",
                                       "lastTransitionTime": "2027-01-15T08:01:00Z"}]}
        })
    }

    #[test]
    fn a_job_keeps_its_counts_the_labels_read_and_whether_it_finished() {
        let job = packed::<Job>(full_job(2, "x"), project_job).read();
        let expected: Job = serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "jobset.sigs.k8s.io/restart-attempt": "0",
                                    "jobset.sigs.k8s.io/jobset-name": "demo",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller"}},
            "status": {"active": 2, "ready": 2, "succeeded": 1, "startTime": "2027-01-15T08:00:00Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}
        }))
        .unwrap_or_else(|e| panic!("Job: {e}"));
        assert_eq!(job, Some(expected));
    }

    #[test]
    fn only_a_change_of_what_is_kept_is_a_change() {
        let job = |active: i32, other_label: &str, version: &str| {
            let mut job = full_job(active, other_label);
            job["metadata"]["resourceVersion"] = json!(version);
            packed::<Job>(job, project_job)
        };
        let before = job(2, "x", "7");
        assert!(before.same_as(&job(2, "y", "8")), "a label nobody reads");
        assert!(!before.same_as(&job(1, "x", "8")), "a pod count");
    }

    #[test]
    fn a_job_that_counts_nothing_comes_and_goes_unread() {
        let created = |status: Value| {
            let mut job = full_job(0, "x");
            job["status"] = status;
            packed::<Job>(job, project_job)
        };
        assert!(job_counts_nothing(&created(Value::Null)));
        assert!(job_counts_nothing(&created(json!({}))));
        let suspended = json!({"conditions": [{"type": "Suspended", "status": "True"}]});
        assert!(job_counts_nothing(&created(suspended)));
        assert!(!job_counts_nothing(&created(json!({"active": 1}))));
        assert!(!job_counts_nothing(&packed::<Job>(
            full_job(0, "x"),
            project_job
        )));
    }

    #[test]
    fn a_launcher_execs_into_its_own_jobs_live_workers_only() {
        let (pods, mut writer) = reflector::store::<PodMeta>();
        let pod = |name: &str, namespace: &str, jobset: &str, replicated: &str, deleting: bool| {
            let mut meta: PodMeta = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {
                    jobset_label::JOBSET_NAME: jobset,
                    jobset_label::REPLICATED_JOB_NAME: replicated,
                }}
            }))
            .unwrap_or_else(|e| panic!("pod: {e}"));
            if deleting {
                meta.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            meta
        };
        for object in [
            pod("pi-worker-0-1-bbbbb", "ns", "pi", "worker", false),
            pod("pi-worker-0-0-aaaaa", "ns", "pi", "worker", false),
            pod("pi-worker-0-0-old00", "ns", "pi", "worker", true),
            pod("pi-launcher-0-0-ccccc", "ns", "pi", "launcher", false),
            pod("pi-worker-0-0-ddddd", "other", "pi", "worker", false),
            pod("pi2-worker-0-0-eeeee", "ns", "pi2", "worker", false),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(object));
        }
        let caches = Caches {
            jobsets: reflector::store().0,
            jobs: reflector::store().0,
            services: reflector::store().0,
            pods,
            foreign_pods: reflector::store().0,
            creation_failures: CreationFailures::default(),
        };
        assert_eq!(
            caches.pods_of("ns", "pi", "worker"),
            ["pi-worker-0-0-aaaaa", "pi-worker-0-1-bbbbb"]
        );
    }
}
