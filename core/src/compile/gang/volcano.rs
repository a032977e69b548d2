//! Volcano: one `PodGroup` named after the job, pods annotated with it (and, as
//! training-operator does, with their replica type as Volcano's task) and sent to the `volcano`
//! scheduler.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::core::DynamicObject;
use serde_json::json;

use super::{Convention, Gang, Member, Route, object, resources_json, schedule_with};
use crate::compile::CompileError;
use crate::compile::meta::Owner;

pub(super) const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";
/// The pod annotation that names a pod's PodGroup.
pub(super) const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// The pod annotation that names a pod's task within its job.
pub(super) const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";
/// The job annotation mpi-operator (and Trainer) take a Volcano queue's name from.
pub const QUEUE_NAME_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
pub(super) const SCHEDULER: &str = "volcano";

pub(super) struct Volcano;

impl Route for Volcano {
    fn objects(&self, gang: &Gang, owner: &Owner) -> Result<Vec<DynamicObject>, CompileError> {
        let mut spec = json!({"minMember": gang.min_member});
        if let Some(queue) = gang.queue.as_ref().filter(|q| !q.is_empty()) {
            spec["queue"] = json!(queue);
        }
        if let Some(class) = gang.priority_class.as_ref().filter(|c| !c.is_empty()) {
            spec["priorityClassName"] = json!(class);
        }
        if let Some(resources) = &gang.min_resources {
            spec["minResources"] = resources_json(resources);
        }
        if let Some(topology) = &gang.network_topology {
            spec["networkTopology"] = json!({
                "mode": topology.mode,
                "highestTierAllowed": topology.highest_tier_allowed,
            });
        }
        let kind = (API_VERSION, "PodGroup");
        Ok(vec![object(
            kind,
            owner,
            &gang.name,
            &gang.annotations,
            spec,
        )])
    }

    fn join(&self, gang: &Gang, member: &Member, pod: &mut PodTemplateSpec) {
        let annotations = pod
            .metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(GROUP_NAME_ANNOTATION.to_owned(), gang.name.clone());
        if gang.convention == Convention::TrainingOperator {
            annotations.insert(TASK_SPEC_ANNOTATION.to_owned(), member.task.clone());
        }
        schedule_with(pod, SCHEDULER, gang.convention);
    }
}
