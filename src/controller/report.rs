//! Tells users and dashboards what happened: an event on the job per transition and the
//! metrics v1 exports.

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::Context;
use crate::kinds::Served;
use crate::plan::Happened;
use crate::telemetry::{JobLabels, KindLabels};

pub async fn report<K: Served>(job: &K, happened: &[Happened], ctx: &Context) {
    report_as(job, K::FRAMEWORK, happened, ctx).await;
}

/// [`report`] for any job, whose metrics carry `framework`.
pub async fn report_as<K>(job: &K, framework: &str, happened: &[Happened], ctx: &Context)
where
    K: Resource<DynamicType = ()>,
{
    let labels = JobLabels {
        job_namespace: job.namespace().unwrap_or_default(),
        framework: framework.to_owned(),
    };
    let metrics = &ctx.metrics;
    let name = job.name_any();
    for what in happened {
        let (type_, reason, note) = match what {
            Happened::Created => {
                metrics.created.get_or_create(&labels).inc();
                if let Some(created) = job.meta().creation_timestamp.as_ref() {
                    let latency = Timestamp::now().duration_since(created.0).as_secs_f64();
                    metrics
                        .jobset_creation_seconds
                        .get_or_create(&KindLabels {
                            framework: framework.to_owned(),
                        })
                        .observe(latency.max(0.0));
                }
                let note = format!("Created JobSet {name}");
                (EventType::Normal, "JobSetCreated".to_owned(), note)
            }
            Happened::Recreated => {
                let note = format!(
                    "JobSet {name} was deleted while the job was not finished; created it again"
                );
                (EventType::Warning, "JobSetRecreated".to_owned(), note)
            }
            Happened::Refused { reason, message } => {
                (EventType::Warning, reason.clone(), message.clone())
            }
            Happened::Succeeded { reason, message } => {
                metrics.successful.get_or_create(&labels).inc();
                (EventType::Normal, reason.clone(), message.clone())
            }
            Happened::Failed { reason, message } => {
                metrics.failed.get_or_create(&labels).inc();
                (EventType::Warning, reason.clone(), message.clone())
            }
            Happened::Restarted { count } => {
                metrics.restarted.get_or_create(&labels).inc();
                let note = format!("The JobSet restarted every pod (restart {count})");
                (
                    EventType::Warning,
                    format!("{}Restarting", K::kind(&())),
                    note,
                )
            }
            Happened::Suspended { reason, message } | Happened::Resumed { reason, message } => {
                (EventType::Normal, reason.clone(), message.clone())
            }
            Happened::Following { message } => (
                EventType::Normal,
                "FollowingPreviousOperator".to_owned(),
                message.clone(),
            ),
            Happened::RestartingAsJobSet { message } => (
                EventType::Warning,
                "RestartingAsJobSet".to_owned(),
                message.clone(),
            ),
            Happened::NotTakenOver { message } => (
                EventType::Warning,
                "NotTakenOver".to_owned(),
                message.clone(),
            ),
            Happened::Waiting { message } => (
                EventType::Normal,
                "WaitingForEarlierJob".to_owned(),
                message.clone(),
            ),
            Happened::NotAutoscaled { message } => (
                EventType::Warning,
                "HorizontalPodAutoscalerNotOwned".to_owned(),
                message.clone(),
            ),
            Happened::DeletedAfterTtl => {
                metrics.deleted.get_or_create(&labels).inc();
                continue;
            }
        };
        event(job, type_, &reason, note, ctx).await;
    }
}

/// Publishes an event on the job (visible with `kubectl describe`); a failure is only logged.
pub async fn event<K: Resource<DynamicType = ()>>(
    job: &K,
    type_: EventType,
    reason: &str,
    note: String,
    ctx: &Context,
) {
    ctx.recorder
        .publish(&job.object_ref(&()), type_, reason, event_note(note))
        .await;
}

/// events.k8s.io refuses a note longer than this many bytes; core events are cut the same, so a
/// reconcile error quoting the apiserver stays readable in one line of `kubectl describe`.
const MAX_EVENT_NOTE: usize = 1024;

/// `note` cut to what an event may carry (a reconcile error quoting the apiserver runs longer),
/// at a character boundary, marked with an ellipsis.
fn event_note(mut note: String) -> String {
    if note.len() > MAX_EVENT_NOTE {
        let mut end = MAX_EVENT_NOTE - '…'.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_notes_are_cut_to_what_the_apiserver_takes() {
        assert_eq!(event_note("short".to_owned()), "short");
        let long = event_note("é".repeat(2000));
        assert!(long.len() <= MAX_EVENT_NOTE, "{}", long.len());
        assert!(long.ends_with('…'));
    }
}
