//! A TrainJob's gang, from its runtime's `podGroupPolicy`, as Trainer v2.3.0's coscheduling and
//! volcano plugins make it: one PodGroup named after the TrainJob over every pod (`minMember`),
//! what they ask for in sum (`minResources`: each pod's requests as the scheduler counts them,
//! times its count), coscheduling's `scheduleTimeoutSeconds` (60 unless set), and Volcano's
//! queue (the JobSet template's `scheduling.volcano.sh/queue-name` annotation), priority class
//! (the last replicated job's that names one) and network topology. Pods join by label or
//! annotation only: the runtime's pod templates name their scheduler, as with Trainer.
//!
//! One deviation: when `dependsOn` orders the replicated jobs (initializers before the trainer,
//! an MPI launcher once its nodes are ready), a gang over all of them is never complete, since
//! the later pods are created only after the earlier ones ran; Trainer makes it anyway and the
//! job never starts. trainset's gang is then the trainer's nodes alone.

use std::collections::BTreeMap;

use jobset_types::JobSetSpec;

use super::{Runtime, TRAINER_STEP, step};
use crate::compile::CompileError;
use crate::compile::gang::requests::pod_requests;
use crate::compile::gang::{
    Convention, Gang, GangScheduler, Member, NetworkTopology, QUEUE_NAME_ANNOTATION,
};
use crate::quantity::{ResourceSums, add_to};

/// What coscheduling's `scheduleTimeoutSeconds` defaults to (Trainer's CRD default).
const DEFAULT_SCHEDULE_TIMEOUT_SECONDS: i32 = 60;
/// Volcano's `networkTopology` defaults (Trainer's CRD defaults).
const DEFAULT_TOPOLOGY_MODE: &str = "hard";
const DEFAULT_HIGHEST_TIER_ALLOWED: i32 = 1;

/// The gang scheduler and the gang the runtime asks for, if it asks for one. `spec` is the
/// JobSet's, complete; `annotations` the JobSet's (the runtime template's and its patches').
pub(super) fn gang(
    job: &str,
    runtime: &Runtime<'_>,
    spec: &JobSetSpec,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<(GangScheduler, Gang)>, CompileError> {
    let Some(policy) = runtime.spec.pod_group_policy.as_ref() else {
        return Ok(None);
    };
    let refuse = |reason: String| {
        CompileError::invalid(
            "spec.runtimeRef",
            format!("{} {}: {reason}", runtime.kind, runtime.name),
        )
    };
    let mut gang = Gang {
        name: job.to_owned(),
        convention: Convention::Trainer,
        ..Gang::default()
    };
    let scheduler = match (&policy.coscheduling, &policy.volcano) {
        (Some(_), Some(_)) => {
            return Err(refuse(
                "spec.podGroupPolicy sets both coscheduling and volcano: a job has one gang".into(),
            ));
        }
        (None, None) => return Ok(None),
        (Some(coscheduling), None) => {
            gang.schedule_timeout_seconds = Some(
                coscheduling
                    .schedule_timeout_seconds
                    .unwrap_or(DEFAULT_SCHEDULE_TIMEOUT_SECONDS),
            );
            GangScheduler::scheduler_plugins()
        }
        (None, Some(volcano)) => {
            if let Some(queue) = annotations.get(QUEUE_NAME_ANNOTATION) {
                if queue.is_empty() {
                    return Err(refuse(format!(
                        "the annotation {QUEUE_NAME_ANNOTATION} is empty: Volcano queue name \
                         must not be empty"
                    )));
                }
                gang.queue = Some(queue.clone());
            }
            gang.priority_class = spec
                .replicated_jobs
                .iter()
                .filter_map(|r| r.template.spec.as_ref()?.template.spec.as_ref())
                .filter_map(|pod| pod.priority_class_name.clone())
                .next_back();
            gang.network_topology = volcano.network_topology.as_ref().map(|t| NetworkTopology {
                mode: t
                    .mode
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TOPOLOGY_MODE.to_owned()),
                highest_tier_allowed: t
                    .highest_tier_allowed
                    .unwrap_or(DEFAULT_HIGHEST_TIER_ALLOWED),
            });
            GangScheduler::Volcano
        }
    };

    let ordered = spec
        .replicated_jobs
        .iter()
        .any(|r| !r.depends_on.is_empty());
    let mut resources = ResourceSums::new();
    for (i, replicated) in spec.replicated_jobs.iter().enumerate() {
        if ordered && step(replicated) != Some(TRAINER_STEP) {
            continue;
        }
        let job_spec = replicated.template.spec.as_ref();
        let parallelism = job_spec.and_then(|s| s.parallelism).unwrap_or(1);
        let pods = replicated.replicas.unwrap_or(1).saturating_mul(parallelism);
        if let Some(pod) = job_spec.and_then(|s| s.template.spec.as_ref()) {
            let field =
                format!("spec.template.spec.replicatedJobs[{i}].template.spec.template.spec");
            for (name, quantity) in pod_requests(pod, &field)? {
                add_to(&mut resources, &name, quantity.times(i64::from(pods)));
            }
        }
        gang.members.push(Member {
            replicated_job: replicated.name.clone(),
            task: replicated.name.clone(),
            pods,
        });
    }
    if gang.members.is_empty() {
        return Err(refuse(
            "spec.podGroupPolicy: dependsOn orders the replicated jobs and none is the trainer's \
             (label trainer.kubeflow.org/trainjob-ancestor-step: trainer), so no gang of them \
             could ever be complete"
                .into(),
        ));
    }
    gang.min_member = gang.members.iter().map(|m| m.pods).sum();
    gang.min_resources = Some(resources);
    Ok(Some((scheduler, gang)))
}
