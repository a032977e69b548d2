//! A v1 job's gang from `runPolicy.schedulingPolicy`, by training-operator v1.9.4's rules when
//! started with `--gang-scheduler-name` (mpi-operator's are in `mpi.rs`): all the job's pods
//! unless `minAvailable` says fewer; `minResources` as given, else what the first `minMember`
//! pods ask for; the queue (`default` unless named), priority class and timeout from the
//! policy; the job's annotations on the PodGroup. v1.9.4 counts pods by priority class, highest
//! first, in an order Go's map iteration leaves random among equals; trainset counts them in
//! replica-type order.

use jobset_types::ReplicatedJob;

use super::{Context, Group};
use crate::api::{SchedulingPolicy, TrainingJob};
use crate::compile::CompileError;
use crate::compile::gang::requests::{BadQuantity, Limits, container_requests};
use crate::compile::gang::{Convention, Gang, Member};
use crate::quantity::{Quantity, ResourceSums, add_to};

pub(super) const POLICY: &str = "spec.runPolicy.schedulingPolicy";
/// The Volcano queue training-operator places a job without one in.
const DEFAULT_QUEUE: &str = "default";

/// The job's scheduling policy, if it has one.
pub(super) fn policy<'a, J: TrainingJob>(ctx: &Context<'a, J>) -> Option<&'a SchedulingPolicy> {
    ctx.job
        .run_policy()
        .and_then(|p| p.scheduling_policy.as_ref())
}

/// The gang as training-operator v1.9.4 makes it.
pub(super) fn training_operator<J: TrainingJob>(
    ctx: &Context<'_, J>,
    replicated_jobs: &[ReplicatedJob],
) -> Result<Gang, CompileError> {
    let policy = policy(ctx);
    let min_member = match policy.and_then(|p| p.min_available) {
        Some(min) => min,
        None => pod_count(ctx)?,
    };
    let min_resources = match given_resources(policy)? {
        Some(given) => given,
        None => first_pods_requests::<J>(&ctx.groups, min_member)?,
    };
    let gang = Gang {
        min_member,
        min_resources: Some(min_resources),
        queue: Some(
            policy
                .and_then(|p| p.queue.clone())
                .filter(|q| !q.is_empty())
                .unwrap_or_else(|| DEFAULT_QUEUE.to_owned()),
        ),
        annotations: ctx.job.meta().annotations.clone().unwrap_or_default(),
        ..base(ctx, replicated_jobs, Convention::TrainingOperator)
    };
    Ok(gang)
}

/// What every v1 gang has: the job's name, its replicated jobs, the policy's priority class and
/// timeout. `min_member` is left at 0 for the caller.
pub(super) fn base<J: TrainingJob>(
    ctx: &Context<'_, J>,
    replicated_jobs: &[ReplicatedJob],
    convention: Convention,
) -> Gang {
    let policy = policy(ctx);
    Gang {
        name: ctx.name().to_owned(),
        priority_class: policy.and_then(|p| p.priority_class.clone()),
        schedule_timeout_seconds: policy.and_then(|p| p.schedule_timeout_seconds),
        members: ctx
            .groups
            .iter()
            .map(|group| Member {
                replicated_job: group.name.clone(),
                task: group.name.clone(),
                pods: group.replicas,
            })
            .collect(),
        ordered: replicated_jobs.iter().any(|r| !r.depends_on.is_empty()),
        convention,
        ..Gang::default()
    }
}

/// Every pod of the job.
pub(super) fn pod_count<J>(ctx: &Context<'_, J>) -> Result<i32, CompileError> {
    let total = ctx.total_replicas();
    i32::try_from(total).map_err(|_| {
        CompileError::invalid(
            "spec",
            format!("{total} replicas are more than a gang takes"),
        )
    })
}

/// `schedulingPolicy.minResources`, parsed, if given.
pub(super) fn given_resources(
    policy: Option<&SchedulingPolicy>,
) -> Result<Option<ResourceSums>, CompileError> {
    let Some(given) = policy.and_then(|p| p.min_resources.as_ref()) else {
        return Ok(None);
    };
    let mut sums = ResourceSums::new();
    for (name, quantity) in given {
        let parsed = Quantity::parse(&quantity.0).map_err(|error| {
            CompileError::invalid(format!("{POLICY}.minResources[{name}]"), error.to_string())
        })?;
        add_to(&mut sums, name, parsed);
    }
    Ok(Some(sums))
}

/// The pod template's field path of `group`, for errors.
pub(super) fn template_field<J: TrainingJob>(group: &Group<'_>) -> String {
    format!(
        "spec.{}.{}.template.spec",
        J::REPLICA_SPECS_FIELD,
        group.replica_type
    )
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
        let field = template_field::<J>(group);
        for (name, quantity) in container_requests(pod, &field, Limits::WithoutRequests)? {
            add_to(&mut sums, &name, quantity.times(i64::from(pods)));
        }
    }
    Ok(sums)
}
