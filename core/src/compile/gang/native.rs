//! Kubernetes' own gang scheduling (the Workload API, alpha in 1.36 behind the `GenericWorkload`
//! and `GangScheduling` gates): a `Workload` naming the job as its controller, with one pod-group
//! template, and a `PodGroup` made from it that every pod names in `spec.schedulingGroup`. The
//! default scheduler places the group once `minCount` of its pods can all be placed. When
//! `dependsOn` orders the replicated jobs, each gets a template and a PodGroup of its own, as
//! JobSet's gang design (KEP-969) does. Every name of the alpha API is in this file, so that
//! the next version is a change here.

use k8s_openapi::api::core::v1::{PodSchedulingGroup, PodTemplateSpec};
use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::{Gang, Member, Route, object};
use crate::compile::CompileError;
use crate::compile::meta::Owner;

pub(super) const API_VERSION: &str = "scheduling.k8s.io/v1alpha2";
/// Pod-group templates a Workload may hold.
pub(super) const POD_GROUP_TEMPLATES_MAX: usize = 8;
/// The template of a gang over the whole job.
const WHOLE_JOB: &str = "job";

pub(super) struct Native;

/// One PodGroup: its name, its template's, and its `minCount`.
struct Group {
    name: String,
    template: String,
    min_count: i32,
}

fn groups(gang: &Gang) -> Vec<Group> {
    if gang.ordered {
        gang.members
            .iter()
            .map(|member| Group {
                name: group_name(gang, member),
                template: member.replicated_job.clone(),
                min_count: member.pods,
            })
            .collect()
    } else {
        vec![Group {
            name: gang.name.clone(),
            template: WHOLE_JOB.to_owned(),
            min_count: gang.min_member,
        }]
    }
}

fn group_name(gang: &Gang, member: &Member) -> String {
    if gang.ordered {
        format!("{}-{}", gang.name, member.replicated_job)
    } else {
        gang.name.clone()
    }
}

impl Route for Native {
    fn objects(&self, gang: &Gang, owner: &Owner) -> Result<Vec<DynamicObject>, CompileError> {
        let groups = groups(gang);
        if groups.len() > POD_GROUP_TEMPLATES_MAX {
            return Err(CompileError::invalid(
                "spec",
                format!(
                    "{} replicated jobs start in order, and each needs a pod group of its own; \
                     a Workload holds at most {POD_GROUP_TEMPLATES_MAX}",
                    groups.len()
                ),
            ));
        }
        let policy = |min_count: i32| json!({"gang": {"minCount": min_count}});
        let no_annotations = Default::default();
        let api_group = owner.api_version.split('/').next().unwrap_or_default();
        let templates: Vec<Value> = groups
            .iter()
            .map(|g| json!({"name": g.template, "schedulingPolicy": policy(g.min_count)}))
            .collect();
        let workload = json!({
            "controllerRef": {"apiGroup": api_group, "kind": owner.kind, "name": owner.name},
            "podGroupTemplates": templates,
        });
        let mut objects = vec![object(
            (API_VERSION, "Workload"),
            owner,
            &gang.name,
            &no_annotations,
            workload,
        )];
        for group in &groups {
            let mut spec = json!({
                "podGroupTemplateRef": {
                    "workload": {"workloadName": gang.name, "podGroupTemplateName": group.template},
                },
                "schedulingPolicy": policy(group.min_count),
            });
            if let Some(class) = gang.priority_class.as_ref().filter(|c| !c.is_empty()) {
                spec["priorityClassName"] = json!(class);
            }
            objects.push(object(
                (API_VERSION, "PodGroup"),
                owner,
                &group.name,
                &no_annotations,
                spec,
            ));
        }
        Ok(objects)
    }

    fn join(&self, gang: &Gang, member: &Member, pod: &mut PodTemplateSpec) {
        pod.spec
            .get_or_insert_with(Default::default)
            .scheduling_group = Some(PodSchedulingGroup {
            pod_group_name: Some(group_name(gang, member)),
        });
    }

    fn spans_ordered_jobs(&self) -> bool {
        false
    }

    fn follows_the_spec(&self) -> bool {
        false
    }
}
