//! The process's one watch of trainset's JobSets and one of their Jobs. Each is kept in a store
//! that reconciles read instead of asking the apiserver, trimmed to what trainset reads, and each
//! event goes to the controller of the object's training kind only.

mod creation_failures;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::channel::mpsc::{Receiver, Sender, channel};
use futures::{SinkExt, StreamExt};
use jobset_types::JobSet;
use jobset_types::keys::label as jobset_label;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use creation_failures::CreationFailures;

use super::Shutdown;
use super::decode::{self, Decoded};
use crate::api::limits::MAX_TOTAL_REPLICAS;
use crate::compile::{MANAGED_BY, OPERATOR_NAME, REPLICA_TYPE, TRAINSET};
use crate::kinds::Served;
use crate::telemetry::{Readiness, WatchHealth};

/// Events a controller may fall behind by before its watch waits for it.
const BUFFER: usize = 1024;

pub type Trigger<T> = Receiver<Result<T, watcher::Error>>;

/// What one controller reacts to: the JobSets and Jobs of its kind's jobs.
pub struct Triggers {
    pub jobsets: Trigger<JobSet>,
    pub jobs: Trigger<Job>,
}

/// The stores the reconciles read.
#[derive(Clone)]
pub struct Caches {
    pub jobsets: Store<JobSet>,
    pub jobs: Store<Job>,
    /// What Kubernetes refused to create for the JobSets in `jobsets`.
    pub creation_failures: CreationFailures,
}

impl Caches {
    /// Resolves once both watches have listed everything once. Await it from one task only:
    /// kube-runtime's readiness wakes only the last task that waited.
    pub async fn ready(&self) -> bool {
        self.jobsets.wait_until_ready().await.is_ok() && self.jobs.wait_until_ready().await.is_ok()
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
            .map(|job| (*job).clone())
            .collect()
    }

    /// What Kubernetes said it cannot create for `jobset` (a Job, a Job's pod), if anything.
    pub fn creation_failure(&self, jobset: &JobSet) -> Option<String> {
        self.creation_failures.of(jobset, self)
    }
}

/// Where a changed JobSet is sent: the controller of its controller owner's kind.
#[derive(Clone, Default)]
pub struct Routes(HashMap<String, Sender<Result<JobSet, watcher::Error>>>);

impl Routes {
    fn key(jobset: &JobSet) -> Option<String> {
        let owner = jobset
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true));
        owner.map(|o| o.kind.clone())
    }

    /// Wakes the controller of `jobset`'s job, if one runs.
    pub async fn send_jobset(&mut self, jobset: JobSet) {
        if let Some(tx) = Self::key(&jobset).and_then(|key| self.0.get_mut(&key)) {
            // A closed channel is a controller that stopped: nothing to tell.
            let _ = tx.send(Ok(jobset)).await;
        }
    }
}

/// The two watches before they start: controllers take their triggers first.
pub struct Watches {
    caches: Caches,
    jobset_writer: Writer<JobSet>,
    job_writer: Writer<Job>,
    /// By the kind of a JobSet's controller owner.
    jobset_routes: Routes,
    /// By a Job's `training.kubeflow.org/operator-name`.
    job_routes: HashMap<String, Sender<Result<Job, watcher::Error>>>,
}

impl Watches {
    pub fn new() -> Self {
        let (jobsets, jobset_writer) = reflector::store();
        let (jobs, job_writer) = reflector::store();
        Self {
            caches: Caches {
                jobsets,
                jobs,
                creation_failures: CreationFailures::default(),
            },
            jobset_writer,
            job_writer,
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
        self.job_routes.insert(K::OPERATOR_NAME.to_owned(), job_tx);
        Triggers {
            jobsets: self.jobset_trigger(&K::kind(&())),
            jobs,
        }
    }

    /// The JobSets controlled by objects of `kind`. Take it only for a controller that runs: a
    /// trigger nobody reads stalls the watch once its buffer is full.
    pub fn jobset_trigger(&mut self, kind: &str) -> Trigger<JobSet> {
        let (jobset_tx, jobsets) = channel(BUFFER);
        self.jobset_routes.0.insert(kind.to_owned(), jobset_tx);
        jobsets
    }

    /// Starts both watches, and those of the events saying what Kubernetes could not create
    /// for them; they run until `shutdown`.
    pub fn start(self, client: &Client, readiness: &Arc<Readiness>, shutdown: Shutdown) {
        creation_failures::start(client, &self.caches, &self.jobset_routes, &shutdown);
        tokio::spawn(watch(
            Api::all(client.clone()),
            readiness.watch(),
            self.jobset_writer,
            self.jobset_routes.0,
            Routes::key,
            shutdown.clone(),
        ));
        tokio::spawn(watch(
            Api::all(client.clone()),
            readiness.watch(),
            self.job_writer,
            self.job_routes,
            |job: &Job| job.labels().get(OPERATOR_NAME).cloned(),
            shutdown,
        ));
    }
}

/// What a store keeps of an object: no managed fields, and no pod template in a Job (trainset
/// reads a Job's status only; the template is most of its size).
trait Trim {
    fn trim(&mut self);
}

impl Trim for JobSet {
    /// Of each pod template only what a resume may change (`suspend::resume_patch` compares
    /// them): its metadata, node selector, tolerations and scheduling gates.
    fn trim(&mut self) {
        self.managed_fields_mut().clear();
        for replicated in &mut self.spec.replicated_jobs {
            let pod = replicated
                .template
                .spec
                .as_mut()
                .and_then(|job| job.template.spec.as_mut());
            if let Some(pod) = pod {
                *pod = PodSpec {
                    node_selector: pod.node_selector.take(),
                    tolerations: pod.tolerations.take(),
                    scheduling_gates: pod.scheduling_gates.take(),
                    ..PodSpec::default()
                };
            }
        }
    }
}

impl Trim for Job {
    /// What reconciles and routing read: the name, the labels that say whose pods and which
    /// restart attempt, and the pod counts. The rest (pod template, annotations, conditions) is
    /// most of a Job's size.
    fn trim(&mut self) {
        let metadata = std::mem::take(&mut self.metadata);
        let kept = [
            REPLICA_TYPE,
            OPERATOR_NAME,
            jobset_label::JOBSET_NAME,
            jobset_label::RESTART_ATTEMPT,
        ];
        let labels = metadata.labels.map(|mut labels| {
            labels.retain(|key, _| kept.contains(&key.as_str()));
            labels
        });
        self.metadata = ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            labels,
            ..ObjectMeta::default()
        };
        self.spec = None;
        self.status = self.status.take().map(|status| JobStatus {
            active: status.active,
            succeeded: status.succeeded,
            failed: status.failed,
            start_time: status.start_time,
            ..JobStatus::default()
        });
    }
}

async fn watch<T>(
    api: Api<Decoded<T>>,
    mut health: WatchHealth,
    writer: Writer<T>,
    mut routes: HashMap<String, Sender<Result<T, watcher::Error>>>,
    route: fn(&T) -> Option<String>,
    shutdown: Shutdown,
) where
    T: Resource<DynamicType = ()> + Trim + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    T: Send + Sync + 'static,
{
    let store = writer.as_reader();
    let managed = watcher::Config::default().labels(&format!("{MANAGED_BY}={TRAINSET}"));
    let events = watcher(api, managed)
        .default_backoff()
        .inspect(move |event| health.record(event))
        .filter_map(|event| std::future::ready(event.map(decode::readable).transpose()))
        .modify(T::trim)
        .reflect(writer)
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    // The first list is not routed: every controller reconciles all its jobs when it starts, and
    // routing it could fill a channel before the controllers read. A later list (after a watch
    // outage) is, once the store holds it: what it lists, and what vanished meanwhile.
    let mut listed = false;
    let mut before_relist: Option<Vec<Arc<T>>> = None;
    while let Some(event) = events.next().await {
        let changed: Vec<T> = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => vec![object],
            Ok(watcher::Event::Init) => {
                before_relist = listed.then(|| store.state());
                continue;
            }
            Ok(watcher::Event::InitApply(_)) => continue,
            Ok(watcher::Event::InitDone) => {
                listed = true;
                match before_relist.take() {
                    Some(before) => relisted(&store, before),
                    None => continue,
                }
            }
            Err(error) => {
                tracing::warn!(%error, "watch failed; retrying");
                continue;
            }
        };
        for object in changed {
            if let Some(tx) = route(&object).and_then(|key| routes.get_mut(&key)) {
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

    fn jobset(name: &str, suspend: bool) -> JobSet {
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"suspend": suspend, "replicatedJobs": []}
        }))
        .unwrap_or_else(|e| panic!("JobSet: {e}"))
    }

    fn list(writer: &mut Writer<JobSet>, objects: &[JobSet]) {
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    #[test]
    fn a_relist_routes_what_it_lists_as_stored_and_what_vanished() {
        let (store, mut writer) = reflector::store::<JobSet>();
        list(&mut writer, &[jobset("a", true), jobset("b", false)]);
        let before = store.state();
        list(&mut writer, &[jobset("a", false)]);
        let mut routed: Vec<(String, Option<bool>)> = relisted(&store, before)
            .iter()
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
    fn a_trimmed_jobset_resumes_with_the_same_patch_as_the_full_one() {
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
        let options = Options {
            default_namespace: None,
            ssh_key: None,
            cluster_domain: None,
        };
        let compile = |pool: &str| {
            compile_manifest(job(pool), &options)
                .map(|c| c.jobset)
                .unwrap_or_else(|e| panic!("compile: {e}"))
        };
        let live = compile("old");
        let mut trimmed = live.clone();
        trimmed.trim();
        let wanted = compile("new");
        let full = crate::suspend::resume_patch(&live, &wanted);
        assert_eq!(crate::suspend::resume_patch(&trimmed, &wanted), full);
        assert!(!full.0.is_empty(), "the node selector changed: {full:?}");
    }

    #[test]
    fn the_jobs_of_a_jobset_are_found_by_their_names() {
        let (store, mut writer) = reflector::store::<Job>();
        let job = |name: &str, namespace: &str| -> Job {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}}))
                .unwrap_or_else(|e| panic!("Job: {e}"))
        };
        let (jobsets, _) = reflector::store::<JobSet>();
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

    #[test]
    fn a_job_keeps_its_counts_and_the_labels_read_and_nothing_else() {
        let mut job: Job = serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns", "managedFields": [{"manager": "m"}],
                         "annotations": {"a": "b"},
                         "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "jobset.sigs.k8s.io/restart-attempt": "0",
                                    "jobset.sigs.k8s.io/jobset-name": "demo",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                    "other": "x"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"active": 2, "succeeded": 1, "failed": 0, "startTime": "2027-01-15T08:00:00Z",
                       "conditions": [{"type": "Complete", "status": "False"}]}
        }))
        .unwrap_or_else(|e| panic!("Job: {e}"));
        job.trim();
        let expected: Job = serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns",
                         "labels": {"training.kubeflow.org/replica-type": "worker",
                                    "jobset.sigs.k8s.io/restart-attempt": "0",
                                    "jobset.sigs.k8s.io/jobset-name": "demo",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller"}},
            "status": {"active": 2, "succeeded": 1, "failed": 0, "startTime": "2027-01-15T08:00:00Z"}
        }))
        .unwrap_or_else(|e| panic!("Job: {e}"));
        assert_eq!(job, expected);
    }
}
