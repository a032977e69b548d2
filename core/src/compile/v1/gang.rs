//! A v1 job's gang, as training-operator v1.9.4 makes its PodGroup when started with
//! `--gang-scheduler-name`: all the job's pods unless `schedulingPolicy.minAvailable` says
//! fewer; `minResources` as given, else what the first `minMember` pods ask for; the queue
//! (`default` unless named), priority class and timeout from `schedulingPolicy`; the job's
//! annotations. v1.9.4 counts pods by priority class, highest first, in an order Go's map
//! iteration leaves random among equals; trainset counts them in replica-type order.

use jobset_types::ReplicatedJob;

use super::{Context, Group};
use crate::api::TrainingJob;
use crate::compile::CompileError;
use crate::gang::requests::{BadQuantity, container_requests_or_limits};
use crate::gang::{Gang, Member};
use crate::quantity::{Quantity, ResourceSums, add_to};

const POLICY: &str = "spec.runPolicy.schedulingPolicy";
/// The Volcano queue a v1 job without one is placed in.
const DEFAULT_QUEUE: &str = "default";

pub(super) fn gang<J: TrainingJob>(
    ctx: &Context<'_, J>,
    replicated_jobs: &[ReplicatedJob],
) -> Result<Gang, CompileError> {
    let policy = ctx
        .job
        .run_policy()
        .and_then(|p| p.scheduling_policy.as_ref());
    let total = ctx.total_replicas();
    let min_member = match policy.and_then(|p| p.min_available) {
        Some(min) => min,
        None => i32::try_from(total).map_err(|_| {
            CompileError::invalid(
                "spec",
                format!("{total} replicas are more than a gang takes"),
            )
        })?,
    };
    let min_resources = match policy.and_then(|p| p.min_resources.as_ref()) {
        Some(given) => {
            let mut sums = ResourceSums::new();
            for (name, quantity) in given {
                let parsed = Quantity::parse(&quantity.0).map_err(|error| {
                    CompileError::invalid(
                        format!("{POLICY}.minResources[{name}]"),
                        error.to_string(),
                    )
                })?;
                add_to(&mut sums, name, parsed);
            }
            sums
        }
        None => first_pods_requests::<J>(&ctx.groups, min_member)
            .map_err(|e| CompileError::invalid(e.field, e.error.to_string()))?,
    };
    let members = ctx
        .groups
        .iter()
        .map(|group| Member {
            replicated_job: group.name.clone(),
            task: group.name.clone(),
            pods: group.replicas,
        })
        .collect();
    let gang = Gang {
        name: ctx.name().to_owned(),
        min_member,
        min_resources: Some(min_resources),
        queue: Some(
            policy
                .and_then(|p| p.queue.clone())
                .filter(|q| !q.is_empty())
                .unwrap_or_else(|| DEFAULT_QUEUE.to_owned()),
        ),
        priority_class: policy.and_then(|p| p.priority_class.clone()),
        schedule_timeout_seconds: policy.and_then(|p| p.schedule_timeout_seconds),
        annotations: ctx.job.meta().annotations.clone().unwrap_or_default(),
        members,
        ordered: replicated_jobs.iter().any(|r| !r.depends_on.is_empty()),
    };
    gang.check(&format!("{POLICY}.minAvailable"))?;
    Ok(gang)
}

/// What the first `min_member` pods ask for, counting each replica type's pods in turn.
fn first_pods_requests<J: TrainingJob>(
    groups: &[Group<'_>],
    min_member: i32,
) -> Result<ResourceSums, BadQuantity> {
    let mut sums = ResourceSums::new();
    let mut counted = 0;
    for group in groups {
        let pods = group.replicas.min(min_member - counted).max(0);
        counted += pods;
        let Some(pod) = group.spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
            continue;
        };
        let field = format!(
            "spec.{}.{}.template.spec",
            J::REPLICA_SPECS_FIELD,
            group.replica_type
        );
        for (name, quantity) in container_requests_or_limits(pod, &field)? {
            add_to(&mut sums, &name, quantity.times(i64::from(pods)));
        }
    }
    Ok(sums)
}
