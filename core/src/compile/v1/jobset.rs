//! The JobSet's parts the v1 driver lays out for every kind: one replicated job per replica
//! type, its pod template (labels, restart policy, the default container's port) and the JobSet's
//! failure policy.

use std::collections::BTreeMap;

use jobset_types::{
    FailurePolicy, FailurePolicyAction, FailurePolicyRule, ReplicatedJob, RestartStrategy, keys,
};
use k8s_openapi::api::batch::v1::{JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Context, DEFAULT_MAX_RESTARTS, Framework, Group, Layout, MasterRole, Success, policy};
use crate::api::{ReplicaSpec, RestartPolicy, TrainingJob};
use crate::compile::env;
use crate::compile::meta::{
    JOB_NAME, MANAGED_BY, MASTER_REPLICA_INDEX, OPERATOR_NAME, REPLICA_INDEX_OFFSET, REPLICA_TYPE,
    TRAINSET,
};

/// The container the framework's port and exit codes belong to: the named default container,
/// or container 0 where the kind names none.
fn default_container<'a>(
    containers: &'a mut [Container],
    name: Option<&str>,
) -> Option<&'a mut Container> {
    match name {
        Some(name) => containers.iter_mut().find(|c| c.name == name),
        None => containers.first_mut(),
    }
}

pub(super) fn named_port(spec: &ReplicaSpec, container: Option<&str>, port: &str) -> Option<i32> {
    let containers = &spec.template.as_ref()?.spec.as_ref()?.containers;
    let container = match container {
        Some(name) => containers.iter().find(|c| c.name == name)?,
        None => containers.first()?,
    };
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(port))
        .map(|p| p.container_port)
}

pub(super) fn replicated_job<F: Framework>(
    ctx: &Context<'_, F::Job>,
    group: &Group<'_>,
    success: &Success,
) -> ReplicatedJob {
    let (jobs, pods_per_job) = match group.layout {
        Layout::Indexed => (i32::from(group.replicas > 0), group.replicas.max(1)),
        Layout::RankOffset => (group.replicas, 1),
    };
    // The controller watches its Jobs by these labels.
    let labels = BTreeMap::from([
        (MANAGED_BY.to_owned(), TRAINSET.to_owned()),
        (JOB_NAME.to_owned(), ctx.owner.job_name_label()),
        (REPLICA_TYPE.to_owned(), group.name.clone()),
        (OPERATOR_NAME.to_owned(), F::OPERATOR_NAME.to_owned()),
    ]);
    let default_container = F::Job::DEFAULT_CONTAINER
        .map(str::to_owned)
        .or_else(|| first_container_name(group.spec))
        .unwrap_or_default();
    ReplicatedJob {
        name: group.name.clone(),
        group_name: Some("default".to_owned()),
        replicas: Some(jobs),
        depends_on: F::depends_on(ctx, group),
        template: JobTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            }),
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".to_owned()),
                completions: Some(pods_per_job),
                parallelism: Some(pods_per_job),
                backoff_limit: Some(policy::backoff_limit(
                    group.restart_policy,
                    ctx.job.run_policy(),
                )),
                pod_failure_policy: policy::pod_failure_policy(
                    group.restart_policy,
                    &default_container,
                ),
                success_policy: success.job_policies.get(&group.name).cloned(),
                template: pod_template::<F>(ctx, group),
                ..Default::default()
            }),
        },
    }
}

fn first_container_name(spec: &ReplicaSpec) -> Option<String> {
    spec.template
        .as_ref()?
        .spec
        .as_ref()?
        .containers
        .first()
        .map(|c| c.name.clone())
}

fn pod_template<F: Framework>(ctx: &Context<'_, F::Job>, group: &Group<'_>) -> PodTemplateSpec {
    let mut template = group.spec.template.clone().unwrap_or_default();
    let metadata = template.metadata.get_or_insert_with(Default::default);
    let labels = metadata.labels.get_or_insert_with(Default::default);
    labels.insert(JOB_NAME.to_owned(), ctx.owner.job_name_label());
    labels.insert(REPLICA_TYPE.to_owned(), group.name.clone());
    labels.insert(OPERATOR_NAME.to_owned(), F::OPERATOR_NAME.to_owned());
    for (key, value) in F::role_labels(ctx, group) {
        labels.insert(key.to_owned(), value.to_owned());
    }
    if let Some(offset) = F::replica_index_offset(ctx, group) {
        let annotations = metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(REPLICA_INDEX_OFFSET.to_owned(), offset.to_string());
        if F::master_role(ctx, group) == MasterRole::FirstPod {
            annotations.insert(MASTER_REPLICA_INDEX.to_owned(), offset.to_string());
        }
    }

    let pod = template.spec.get_or_insert_with(Default::default);
    pod.restart_policy = Some(policy::pod_restart_policy(group.restart_policy).to_owned());
    if pod.priority_class_name.is_none() {
        pod.priority_class_name = ctx
            .job
            .run_policy()
            .and_then(|p| p.scheduling_policy.as_ref())
            .and_then(|s| s.priority_class.clone());
    }
    if let (Some((port_name, _)), Some(port)) = (F::PORT, group.port)
        && let Some(container) = default_container(&mut pod.containers, F::Job::DEFAULT_CONTAINER)
    {
        let ports = container.ports.get_or_insert_with(Vec::new);
        if !ports.iter().any(|p| p.name.as_deref() == Some(port_name)) {
            ports.push(ContainerPort {
                name: Some(port_name.to_owned()),
                container_port: port,
                ..Default::default()
            });
        }
    }

    let injected = F::env(ctx, group);
    if !injected.is_empty() {
        for container in pod.containers.iter_mut() {
            if F::ENV_IN_EVERY_CONTAINER
                || Some(container.name.as_str()) == F::Job::DEFAULT_CONTAINER
            {
                env::inject(container, &injected);
            }
        }
    }
    F::finish_pod(ctx, group, pod);
    template
}

/// The documented default failure policy: a permanent exit code (ExitCode policy, 1-127) or a
/// failed Job of a `Never` replica type fails the JobSet at once, as v1 failed the job; any other
/// Job failure (a replica type's backoffLimit exhausted) restarts the whole gang, at most
/// [`DEFAULT_MAX_RESTARTS`] times.
pub(super) fn failure_policy(groups: &[Group<'_>]) -> FailurePolicy {
    let mut rules = vec![FailurePolicyRule {
        name: "failOnPermanentExitCode".to_owned(),
        action: FailurePolicyAction::FailJobSet,
        on_job_failure_reasons: vec![keys::job_failure_reason::POD_FAILURE_POLICY.to_owned()],
        on_job_failure_message_patterns: Vec::new(),
        target_replicated_jobs: Vec::new(),
    }];
    let never: Vec<String> = groups
        .iter()
        .filter(|g| g.restart_policy == RestartPolicy::Never)
        .map(|g| g.name.clone())
        .collect();
    if !never.is_empty() {
        rules.push(FailurePolicyRule {
            name: "failOnRestartPolicyNever".to_owned(),
            action: FailurePolicyAction::FailJobSet,
            on_job_failure_reasons: Vec::new(),
            on_job_failure_message_patterns: Vec::new(),
            target_replicated_jobs: never,
        });
    }
    rules.push(FailurePolicyRule {
        name: "restartGang".to_owned(),
        action: FailurePolicyAction::RestartJobSet,
        on_job_failure_reasons: Vec::new(),
        on_job_failure_message_patterns: Vec::new(),
        target_replicated_jobs: Vec::new(),
    });
    FailurePolicy {
        max_restarts: Some(DEFAULT_MAX_RESTARTS),
        restart_strategy: Some(RestartStrategy::Recreate),
        rules,
    }
}
