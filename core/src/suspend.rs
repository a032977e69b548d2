//! Who may suspend and resume a job's JobSet, and what a resume carries. Pure: the controller
//! reads the cluster and applies the answer.
//!
//! Kueue drives `spec.suspend` of whatever it queues, and unsuspends again anything it has
//! admitted, so trainset must never fight it:
//! - a job without a queue name: trainset mirrors `runPolicy.suspend` onto the JobSet;
//! - a queued job that Kueue itself queues (its Workload belongs to the training job, as Kueue's
//!   `kubeflow.org/mpijob` integration does by default): Kueue toggles `runPolicy.suspend` and
//!   edits the job's pod templates, so trainset mirrors both onto the JobSet;
//! - a queued job whose JobSet Kueue queues (the JobSet's own Workload): Kueue toggles the
//!   JobSet directly, and trainset leaves `spec.suspend` alone after creation.

use jobset_types::JobSet;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use serde_json::Value;

/// The pod-template fields of a replicated job that may change while its JobSet is suspended
/// (JobSet's update validation; Kueue's PodSet updates touch exactly these), by template part.
const MUTABLE_WHILE_SUSPENDED: [(&str, &[&str]); 2] = [
    ("metadata", &["labels", "annotations"]),
    ("spec", &["nodeSelector", "tolerations", "schedulingGates"]),
];

/// Who controls the JobSet's `spec.suspend` once it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// trainset, following the training job's `runPolicy.suspend`.
    Trainset,
    /// Kueue, through the JobSet's own Workload.
    Kueue,
}

impl Control {
    /// `queued`: the job carries a Kueue queue name. `kueue_queues_the_job`: a Kueue Workload
    /// belongs to the training job itself (then the JobSet is only its child).
    pub fn of(queued: bool, kueue_queues_the_job: bool) -> Self {
        if queued && !kueue_queues_the_job {
            Self::Kueue
        } else {
            Self::Trainset
        }
    }
}

/// The `spec.suspend` trainset should set, if any: `Some(wanted)` when it differs from the
/// JobSet's and trainset controls it.
pub fn change(wanted: bool, current: bool, control: Control) -> Option<bool> {
    (wanted != current && control == Control::Trainset).then_some(wanted)
}

/// The JSON patch (RFC 6902) that resumes `live` and, in the same write, sets each replicated
/// job's mutable pod-template fields to the `compiled` ones, so scheduling decisions made on the
/// training job while it was suspended (Kueue's node selectors and tolerations, a user's edit)
/// reach the pods. Replicated jobs are matched by name; fields already equal are not sent.
pub fn resume_patch(live: &JobSet, compiled: &JobSet) -> Patch {
    let mut ops = Vec::new();
    for (index, replicated) in live.spec.replicated_jobs.iter().enumerate() {
        let Some(wanted) = compiled
            .spec
            .replicated_jobs
            .iter()
            .find(|c| c.name == replicated.name)
        else {
            continue;
        };
        let live_pod = pod_template(&replicated.template);
        let wanted_pod = pod_template(&wanted.template);
        let index = index.to_string();
        let pointer = |tail: &[&str]| {
            let head = [
                "spec",
                "replicatedJobs",
                &index,
                "template",
                "spec",
                "template",
            ];
            PointerBuf::from_tokens(head.iter().chain(tail).copied())
        };
        for (part, fields) in MUTABLE_WHILE_SUSPENDED {
            if live_pod[part].is_null() {
                // No such part yet: add it whole, with the wanted fields.
                let value: serde_json::Map<String, Value> = fields
                    .iter()
                    .filter(|f| !wanted_pod[part][**f].is_null())
                    .map(|f| ((*f).to_owned(), wanted_pod[part][*f].clone()))
                    .collect();
                if !value.is_empty() {
                    ops.push(add(pointer(&[part]), Value::Object(value)));
                }
                continue;
            }
            for field in fields.iter() {
                let target = &wanted_pod[part][*field];
                if live_pod[part][*field] == *target {
                    continue;
                }
                let path = pointer(&[part, field]);
                ops.push(if target.is_null() {
                    PatchOperation::Remove(RemoveOperation { path })
                } else {
                    add(path, target.clone())
                });
            }
        }
    }
    ops.push(add(
        PointerBuf::from_tokens(["spec", "suspend"]),
        Value::Bool(false),
    ));
    Patch(ops)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// A replicated job's pod template as JSON (`Null` when absent).
fn pod_template(template: &JobTemplateSpec) -> Value {
    template
        .spec
        .as_ref()
        .and_then(|spec| serde_json::to_value(&spec.template).ok())
        .unwrap_or(Value::Null)
}
