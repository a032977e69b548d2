//! Events on the jobs, written as client-go's recorder writes them (Kubernetes' own controllers,
//! the Kubeflow operators): core/v1 Events carrying `firstTimestamp`, `lastTimestamp` and
//! `count`. Clients read those fields: the Kubeflow SDK's `get_job_events` skips an event without
//! `firstTimestamp`, which an events.k8s.io/v1 event may not set. An event repeated (same object,
//! type, reason and message) within ten minutes counts up on the first one instead of adding
//! another, so a retry loop leaves one event, not hundreds.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;

/// How long a published event is counted on rather than repeated (client-go's aggregation window).
const REPEAT_WINDOW: Duration = Duration::from_secs(600);

/// What makes an event a repeat of another. Kept as its hash: with two events per job over ten
/// minutes the strings would cost a few KiB per job.
#[derive(Hash)]
struct Key<'a> {
    object: String,
    type_: &'static str,
    reason: &'a str,
    message: &'a str,
}

impl Key<'_> {
    fn hashed(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

struct Sent {
    name: String,
    count: i32,
    at: Instant,
}

pub struct Recorder {
    client: Client,
    component: String,
    published: Mutex<Published>,
}

/// The events published in the last [`REPEAT_WINDOW`], by the hash of their [`Key`].
#[derive(Default)]
struct Published {
    sent: HashMap<u64, Sent>,
    /// When expired entries were last dropped: at most once a window, not at every event.
    pruned: Option<Instant>,
}

impl Published {
    /// The event under `key` still in its window, counted up.
    fn repeat(&mut self, key: u64) -> Option<(String, i32)> {
        if self.pruned.is_none_or(|at| at.elapsed() >= REPEAT_WINDOW) {
            self.sent.retain(|_, p| p.at.elapsed() < REPEAT_WINDOW);
            self.pruned = Some(Instant::now());
        }
        let event = self.sent.get_mut(&key)?;
        if event.at.elapsed() >= REPEAT_WINDOW {
            return None;
        }
        event.count += 1;
        event.at = Instant::now();
        Some((event.name.clone(), event.count))
    }
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

impl Recorder {
    pub fn new(client: Client, component: &str) -> Self {
        Self {
            client,
            component: component.to_owned(),
            published: Mutex::default(),
        }
    }

    fn published(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes an event on `object` (in its namespace), or counts a repeat on the first one.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) -> Result<(), kube::Error> {
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let key = Key {
            object: format!(
                "{}/{namespace}/{}/{}",
                object.kind.as_deref().unwrap_or_default(),
                object.name.as_deref().unwrap_or_default(),
                object.uid.as_deref().unwrap_or_default()
            ),
            type_: type_name(type_),
            reason,
            message: &message,
        };
        let (type_, key) = (key.type_, key.hashed());
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let repeat = self.published().repeat(key);
        if let Some((name, count)) = repeat {
            let patch = json!({"count": count, "lastTimestamp": Time(now)});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Expired (the apiserver keeps events an hour by default): publish anew.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or(&self.component),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            involved_object: object.clone(),
            type_: Some(type_.to_owned()),
            reason: Some(reason.to_owned()),
            message: Some(message),
            action: Some("Reconcile".to_owned()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.component.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            ..Event::default()
        };
        events.create(&PostParams::default(), &event).await?;
        let sent = Sent {
            name,
            count: 1,
            at: Instant::now(),
        };
        self.published().sent.insert(key, sent);
        Ok(())
    }
}
