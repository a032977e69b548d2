//! scheduler-plugins' coscheduling: one `PodGroup` named after the job, pods labelled with it
//! and sent to the scheduler trainset was told of.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::core::DynamicObject;
use serde_json::json;

use super::{Gang, Member, Route, object, resources_json, schedule_with};
use crate::compile::CompileError;
use crate::compile::meta::Owner;

pub(super) const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// The pod label that names a pod's PodGroup.
pub(super) const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The name scheduler-plugins' own deployment gives its scheduler.
pub(super) const DEFAULT_SCHEDULER: &str = "scheduler-plugins-scheduler";

pub(super) struct SchedulerPlugins {
    /// The scheduler pods are sent to, unless they name one.
    pub scheduler_name: String,
}

impl Route for SchedulerPlugins {
    fn objects(&self, gang: &Gang, owner: &Owner) -> Result<Vec<DynamicObject>, CompileError> {
        let mut spec = json!({"minMember": gang.min_member});
        if let Some(resources) = gang.min_resources.as_ref().filter(|r| !r.is_empty()) {
            spec["minResources"] = resources_json(resources);
        }
        if let Some(timeout) = gang.schedule_timeout_seconds {
            spec["scheduleTimeoutSeconds"] = json!(timeout);
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

    fn join(&self, gang: &Gang, _member: &Member, pod: &mut PodTemplateSpec) {
        schedule_with(pod, &self.scheduler_name, gang.convention);
        pod.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(POD_GROUP_LABEL.to_owned(), gang.name.clone());
    }
}
