//! The process's one watch of trainset's JobSets and one of their Jobs. Each is kept in a store
//! that reconciles read instead of asking the apiserver, trimmed to what trainset reads, and each
//! event goes to the controller of the object's training kind only.

use std::collections::HashMap;

use futures::channel::mpsc::{Receiver, Sender, channel};
use futures::{SinkExt, StreamExt};
use jobset_types::JobSet;
use jobset_types::keys::label as jobset_label;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use super::Shutdown;
use crate::compile::{MANAGED_BY, OPERATOR_NAME, TRAINSET};
use crate::kinds::Served;

/// Events a controller may fall behind by before its watch waits for it.
const BUFFER: usize = 1024;

type Trigger<T> = Receiver<Result<T, watcher::Error>>;

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
}

impl Caches {
    /// Resolves once both watches have listed everything once. Await it from one task only:
    /// kube-runtime's readiness wakes only the last task that waited.
    pub async fn ready(&self) -> bool {
        self.jobsets.wait_until_ready().await.is_ok() && self.jobs.wait_until_ready().await.is_ok()
    }

    /// The Jobs of the JobSet `name` in `namespace`.
    pub fn jobs_of(&self, namespace: &str, name: &str) -> Vec<Job> {
        self.jobs
            .state()
            .iter()
            .filter(|job| {
                job.namespace().as_deref() == Some(namespace)
                    && job
                        .labels()
                        .get(jobset_label::JOBSET_NAME)
                        .map(String::as_str)
                        == Some(name)
            })
            .map(|job| (**job).clone())
            .collect()
    }
}

/// The two watches before they start: controllers take their triggers first.
pub struct Watches {
    caches: Caches,
    jobset_writer: Writer<JobSet>,
    job_writer: Writer<Job>,
    /// By the kind of a JobSet's controller owner.
    jobset_routes: HashMap<String, Sender<Result<JobSet, watcher::Error>>>,
    /// By a Job's `training.kubeflow.org/operator-name`.
    job_routes: HashMap<String, Sender<Result<Job, watcher::Error>>>,
}

impl Watches {
    pub fn new() -> Self {
        let (jobsets, jobset_writer) = reflector::store();
        let (jobs, job_writer) = reflector::store();
        Self {
            caches: Caches { jobsets, jobs },
            jobset_writer,
            job_writer,
            jobset_routes: HashMap::new(),
            job_routes: HashMap::new(),
        }
    }

    pub fn caches(&self) -> Caches {
        self.caches.clone()
    }

    /// The triggers of kind `K`'s controller.
    pub fn triggers<K: Served>(&mut self) -> Triggers {
        let (jobset_tx, jobsets) = channel(BUFFER);
        let (job_tx, jobs) = channel(BUFFER);
        self.jobset_routes
            .insert(K::kind(&()).into_owned(), jobset_tx);
        self.job_routes.insert(K::OPERATOR_NAME.to_owned(), job_tx);
        Triggers { jobsets, jobs }
    }

    /// Starts both watches; they run until `shutdown`.
    pub fn start(self, client: &Client, shutdown: Shutdown) {
        tokio::spawn(watch(
            Api::all(client.clone()),
            self.jobset_writer,
            self.jobset_routes,
            |jobset: &JobSet| {
                let owner = jobset
                    .owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true));
                owner.map(|o| o.kind.clone())
            },
            shutdown.clone(),
        ));
        tokio::spawn(watch(
            Api::all(client.clone()),
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
    fn trim(&mut self) {
        self.managed_fields_mut().clear();
    }
}

impl Trim for Job {
    fn trim(&mut self) {
        self.managed_fields_mut().clear();
        if let Some(spec) = self.spec.as_mut() {
            spec.template = Default::default();
        }
    }
}

async fn watch<T>(
    api: Api<T>,
    writer: Writer<T>,
    mut routes: HashMap<String, Sender<Result<T, watcher::Error>>>,
    route: fn(&T) -> Option<String>,
    shutdown: Shutdown,
) where
    T: Resource<DynamicType = ()> + Trim + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    T: Send + Sync + 'static,
{
    let managed = watcher::Config::default().labels(&format!("{MANAGED_BY}={TRAINSET}"));
    let events = watcher(api, managed)
        .default_backoff()
        .modify(T::trim)
        .reflect(writer)
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    // The first list is not routed: every controller reconciles all its jobs when it starts, and
    // routing it could fill a channel before the controllers read. A later list (after a watch
    // outage) is, since objects may have changed meanwhile.
    let mut listed = false;
    while let Some(event) = events.next().await {
        let object = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => object,
            Ok(watcher::Event::InitApply(object)) if listed => object,
            Ok(watcher::Event::InitDone) => {
                listed = true;
                continue;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Err(error) => {
                tracing::warn!(%error, "watch failed; retrying");
                continue;
            }
        };
        if let Some(tx) = route(&object).and_then(|key| routes.get_mut(&key)) {
            // A closed channel is a controller that stopped: nothing to tell.
            let _ = tx.send(Ok(object)).await;
        }
    }
}
