//! What Kubernetes refused to create for trainset's JobSets, learnt from the events that are the
//! only place it is said: the JobSet controller's `JobCreationFailed` (a Job it cannot create)
//! and the Job controller's `FailedCreate` (a pod it cannot create). Neither sets a condition, so
//! without this a job whose pods Kubernetes refuses (an init container without an image, a
//! `containerPort` of 70000) would sit with no pods for ever. One watch per reason, selected by
//! field on the apiserver; only events about a JobSet or Job in the caches are kept, so other
//! tenants' events cost nothing but their delivery.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use jobset_types::JobSet;
use jobset_types::keys::label as jobset_label;
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::{Caches, Listing, Packed, Routes};
use crate::controller::Shutdown;
use crate::controller::decode::{self, Decoded};

/// The events watched: (the kind of the object they are about, their reason).
const WATCHED: [(&str, &str); 2] = [("JobSet", "JobCreationFailed"), ("Job", "FailedCreate")];

/// At most this many objects' failures are kept: each is a live JobSet or Job of trainset's, and
/// an entry goes when its event expires (the apiserver's event TTL, an hour by default).
const MAX_KEPT: usize = 10_000;

/// The latest creation failure said of each of trainset's JobSets and Jobs, by the object's uid.
#[derive(Clone, Default)]
pub struct CreationFailures(Arc<Mutex<HashMap<String, Failure>>>);

#[derive(Clone, Debug)]
struct Failure {
    /// The event's reason, which says which watch saw it.
    reason: &'static str,
    /// The event's own uid: its deletion (expiry) forgets the failure.
    event: String,
    /// `Job x-worker-0: Job.batch "x-worker-0" is invalid: ...`.
    message: String,
}

impl CreationFailures {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failure>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What Kubernetes said it could not create for `jobset` (the JobSet itself, then its Jobs
    /// as the caches hold them), if anything.
    pub fn of(&self, jobset: &JobSet, caches: &Caches) -> Option<String> {
        let failures = self.lock();
        if failures.is_empty() {
            return None;
        }
        let find = |uid: Option<String>| uid.and_then(|uid| failures.get(&uid).cloned());
        find(jobset.uid())
            .or_else(|| {
                caches
                    .jobs_of(jobset)
                    .into_iter()
                    .find_map(|j| find(j.uid()))
            })
            .map(|failure| failure.message)
    }

    fn record(&self, object_uid: String, failure: Failure) {
        let mut failures = self.lock();
        if failures.len() < MAX_KEPT || failures.contains_key(&object_uid) {
            failures.insert(object_uid, failure);
        }
    }

    fn forget(&self, event_uid: &str) {
        self.lock().retain(|_, failure| failure.event != event_uid);
    }

    /// After a re-list of the `reason` watch: its failures whose event was not listed expired
    /// while it was not watching.
    fn keep_listed(&self, reason: &str, listed: &HashSet<String>) {
        self.lock()
            .retain(|_, failure| failure.reason != reason || listed.contains(&failure.event));
    }
}

/// Starts the watches; each runs until `shutdown`.
pub fn start(
    client: &Client,
    listing: Listing,
    caches: &Caches,
    routes: &Routes,
    shutdown: &Shutdown,
) {
    for (kind, reason) in WATCHED {
        let fields = format!("involvedObject.kind={kind},reason={reason}");
        tokio::spawn(watch(
            Api::all(client.clone()),
            listing.config().fields(&fields),
            reason,
            caches.clone(),
            routes.clone(),
            shutdown.clone(),
        ));
    }
}

async fn watch(
    api: Api<Decoded<Event>>,
    config: watcher::Config,
    reason: &'static str,
    caches: Caches,
    mut routes: Routes,
    shutdown: Shutdown,
) {
    let failures = &caches.creation_failures;
    // Decoded one by one: an event the types cannot read (anyone may write events) is left out
    // instead of failing the list.
    let events = watcher(api, config)
        .default_backoff()
        .filter_map(|event| std::future::ready(event.map(decode::readable).transpose()))
        .take_until(shutdown);
    let mut events = std::pin::pin!(events);
    // The events of trainset's objects a (re-)list delivers, while it does.
    let mut in_list = false;
    let mut listed = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(event) | watcher::Event::InitApply(event)) => {
                if let Some(jobset) = about(&event, &caches) {
                    if in_list {
                        listed.insert(event.uid().unwrap_or_default());
                    }
                    let uid = event.involved_object.uid.clone().unwrap_or_default();
                    let message = format!(
                        "{} {}: {}",
                        event.involved_object.kind.as_deref().unwrap_or_default(),
                        event.involved_object.name.as_deref().unwrap_or_default(),
                        event.message.as_deref().unwrap_or_default()
                    );
                    let failure = Failure {
                        reason,
                        event: event.uid().unwrap_or_default(),
                        message,
                    };
                    failures.record(uid, failure);
                    routes.send_jobset(jobset).await;
                }
            }
            Ok(watcher::Event::Delete(event)) => failures.forget(&event.uid().unwrap_or_default()),
            Ok(watcher::Event::Init) => in_list = true,
            Ok(watcher::Event::InitDone) => {
                failures.keep_listed(reason, &listed);
                listed.clear();
                in_list = false;
            }
            Err(error) => tracing::warn!(%error, reason, "event watch failed; retrying"),
        }
    }
}

/// The JobSet of trainset's that `event` is about (the JobSet itself, or a Job of it), if the
/// caches hold the object it names under the uid it names.
fn about(event: &Event, caches: &Caches) -> Option<Packed<JobSet>> {
    let object = &event.involved_object;
    let (name, namespace, uid) = (
        object.name.as_deref()?,
        object.namespace.as_deref()?,
        object.uid.as_deref()?,
    );
    let jobset_name = match object.kind.as_deref()? {
        "JobSet" => name.to_owned(),
        "Job" => {
            let job = caches.jobs.get(&ObjectRef::new(name).within(namespace))?;
            if job.uid().as_deref() != Some(uid) {
                return None;
            }
            job.label(jobset_label::JOBSET_NAME)?
        }
        _ => return None,
    };
    let jobset = caches
        .jobsets
        .get(&ObjectRef::new(&jobset_name).within(namespace))?;
    let own = object.kind.as_deref() == Some("Job") || jobset.uid().as_deref() == Some(uid);
    own.then(|| (*jobset).clone())
}
