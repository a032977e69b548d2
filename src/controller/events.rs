//! Events on the jobs, written as client-go's recorder writes them (Kubernetes' own controllers,
//! the Kubeflow operators): core/v1 Events carrying `firstTimestamp`, `lastTimestamp` and
//! `count`. Clients read those fields: the Kubeflow SDK's `get_job_events` skips an event without
//! `firstTimestamp`, which an events.k8s.io/v1 event may not set. An event repeated (same object,
//! type, reason and message) within ten minutes counts up on the first one instead of adding
//! another, so a retry loop leaves one event, not hundreds.
//!
//! Events are written by a task of their own, a few at a time, from a bounded queue: a reconcile
//! hands its event over and is done, so a burst of new jobs waits on their JobSets' creation,
//! not on their events.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;

/// How long a published event is counted on rather than repeated (client-go's aggregation window).
const REPEAT_WINDOW: Duration = Duration::from_secs(600);

/// Events waiting to be written; a reconcile with one more waits until there is room.
const QUEUED: usize = 1024;

/// Events written at once: their share of the requests in flight, the rest left to the writes
/// that move jobs along.
const WRITING: usize = 8;

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

/// Hands events to the task that writes them.
pub struct Recorder {
    component: String,
    published: Arc<Mutex<Published>>,
    queue: mpsc::Sender<Write>,
}

/// One request the writing task makes.
enum Write {
    Create(Box<Event>),
    /// Count a repeat on the event `name`; `Create` it again, remembered under `key`, if it
    /// expired.
    Repeat {
        key: u64,
        name: String,
        count: i32,
        at: Timestamp,
        event: Box<Event>,
    },
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
    /// The recorder, and the task that writes what it is handed: run it until
    /// [`Recorder::close`], then it writes what is queued and ends.
    pub fn new(client: Client, component: &str) -> (Self, impl Future<Output = ()> + use<>) {
        let (queue, queued) = mpsc::channel(QUEUED);
        let published = Arc::<Mutex<Published>>::default();
        let recorder = Self {
            component: component.to_owned(),
            published: published.clone(),
            queue,
        };
        let writing = queued.for_each_concurrent(WRITING, move |write| {
            write_event(client.clone(), published.clone(), write)
        });
        (recorder, writing)
    }

    /// No more events: the writing task ends once it wrote those queued.
    pub fn close(&self) {
        self.queue.clone().close_channel();
    }

    fn published(&self) -> MutexGuard<'_, Published> {
        lock(&self.published)
    }

    /// Publishes an event on `object` (in its namespace), or counts a repeat on the first one:
    /// queued, written by the recorder's task.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
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
        let now = Timestamp::now();
        let name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or(&self.component),
            now.as_nanosecond()
        );
        let event = Box::new(Event {
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
        });
        // Remembered before it is written, so that a repeat queued meanwhile counts on it.
        let write = {
            let mut published = self.published();
            match published.repeat(key) {
                Some((name, count)) => Write::Repeat {
                    key,
                    name,
                    count,
                    at: now,
                    event,
                },
                None => {
                    let sent = Sent {
                        name,
                        count: 1,
                        at: Instant::now(),
                    };
                    published.sent.insert(key, sent);
                    Write::Create(event)
                }
            }
        };
        // Closed only once the controllers stopped.
        if self.queue.clone().send(write).await.is_err() {
            tracing::debug!(reason, "event not written: shutting down");
        }
    }
}

fn lock(published: &Mutex<Published>) -> MutexGuard<'_, Published> {
    published.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes the request `write` stands for; a failure is only logged.
async fn write_event(client: Client, published: Arc<Mutex<Published>>, write: Write) {
    let (event, repeat) = match write {
        Write::Create(event) => (event, None),
        Write::Repeat {
            key,
            name,
            count,
            at,
            event,
        } => (event, Some((key, name, count, at))),
    };
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client, &namespace);
    if let Some((key, name, count, at)) = repeat {
        let patch = json!({"count": count, "lastTimestamp": Time(at)});
        match events
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            // Expired (the apiserver keeps events an hour by default): publish anew.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let sent = Sent {
                    name: event.metadata.name.clone().unwrap_or_default(),
                    count: 1,
                    at: Instant::now(),
                };
                lock(&published).sent.insert(key, sent);
            }
            Err(error) => {
                tracing::warn!(%error, reason = event.reason, "cannot publish event");
                return;
            }
        }
    }
    if let Err(error) = events.create(&PostParams::default(), &event).await {
        tracing::warn!(%error, reason = event.reason, "cannot publish event");
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A client whose every request fails at once: the queue's logic under test makes none
    /// that could succeed.
    fn unreachable_client() -> Client {
        let refuse = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no cluster"))
        });
        Client::new(refuse, "default")
    }

    fn job(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("PyTorchJob".to_owned()),
            namespace: Some("tenant".to_owned()),
            name: Some(name.to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[tokio::test]
    async fn a_full_queue_holds_the_publisher_back() {
        let (recorder, _writing) = Recorder::new(unreachable_client(), "trainset");
        for n in 0..QUEUED {
            let published = recorder
                .publish(
                    &job(&format!("j{n}")),
                    EventType::Normal,
                    "Created",
                    "made".into(),
                )
                .now_or_never();
            assert!(published.is_some(), "event {n} of {QUEUED} waited");
        }
        let one_more = recorder
            .publish(&job("extra"), EventType::Normal, "Created", "made".into())
            .now_or_never();
        assert!(one_more.is_none(), "a queue of {QUEUED} took one more");
    }

    #[tokio::test]
    async fn closing_drains_the_queue_and_ends_the_writer() {
        let (recorder, writing) = Recorder::new(unreachable_client(), "trainset");
        for n in 0..3 {
            recorder
                .publish(
                    &job(&format!("j{n}")),
                    EventType::Warning,
                    "Failed",
                    "x".into(),
                )
                .await;
        }
        recorder.close();
        tokio::time::timeout(Duration::from_secs(30), writing)
            .await
            .expect("the writer ends once closed and drained");
        let after = recorder
            .publish(&job("late"), EventType::Normal, "Created", "made".into())
            .now_or_never();
        assert!(after.is_some(), "a publish after close waited");
    }

    #[test]
    fn a_repeat_within_the_window_counts_on_the_first() {
        let mut published = Published::default();
        published.sent.insert(
            7,
            Sent {
                name: "job.1".into(),
                count: 1,
                at: Instant::now(),
            },
        );
        assert_eq!(published.repeat(7), Some(("job.1".to_owned(), 2)));
        assert_eq!(published.repeat(8), None);
    }
}
