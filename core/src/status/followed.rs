//! The status of a job that trainset follows: one whose pods another operator made
//! (training-operator v1.9.4, mpi-operator v0.8.2) and that runs on in them after the switch
//! (docs/migration.md). It is derived from those pods, by the rules the job's own JobSet would
//! enforce (read from the job as trainset compiles it), with v1's condition algebra.

use jobset_types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Conditions, FAILED, RESTARTING, RUNNING, SUCCEEDED, SUSPENDED, Subject, is_terminal};
use crate::api::{JobStatus, ReplicaStatus};
use crate::compile::{JOB_ROLE, REPLICA_INDEX, REPLICA_TYPE};

/// How the pods of one replica type run, as the job's JobSet would run them.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeRule {
    /// The replica type as pods and replicated jobs name it: `worker`.
    pub name: String,
    /// Its spelling in `replicaStatuses`: `Worker`.
    pub replica_type: String,
    /// How many pods it has, indexed 0 to `replicas - 1`.
    pub replicas: i32,
    pub restart: Restart,
    pub success: TypeSuccess,
    /// Whether it must succeed for the job to succeed.
    pub target: bool,
}

/// What a failed pod means.
#[derive(Clone, Debug, PartialEq)]
pub enum Restart {
    /// `OnFailure` or `Always`: the operator makes it anew.
    Replaced,
    /// `Never`: the job fails.
    Never,
    /// `ExitCode`: an exit code of `container` in `permanent` fails the job; any other makes the
    /// pod anew.
    ExitCode {
        container: String,
        permanent: Vec<i32>,
    },
}

/// Which pods of a type must succeed for the type to succeed.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeSuccess {
    All,
    /// These indexes (TFJob's worker 0).
    Indexes(Vec<i32>),
    /// Any this many (an elastic PyTorchJob's one worker).
    Count(i32),
}

/// The rules of every replica type of `jobset`, the job compiled; `replica_types` are the
/// kind's canonical spellings.
pub fn rules(jobset: &JobSet, replica_types: &[&str]) -> Vec<TypeRule> {
    let policy = jobset.spec.success_policy.as_ref();
    let targets = policy.map(|p| p.target_replicated_jobs.as_slice());
    jobset
        .spec
        .replicated_jobs
        .iter()
        .map(|replicated| {
            let spec = replicated.template.spec.as_ref();
            let per_job = spec
                .and_then(|s| s.completions.or(s.parallelism))
                .unwrap_or(1);
            let pod = spec.and_then(|s| s.template.spec.as_ref());
            let restart = match pod.and_then(|p| p.restart_policy.as_deref()) {
                Some("Never") => spec
                    .and_then(|s| s.pod_failure_policy.as_ref())
                    .into_iter()
                    .flat_map(|p| &p.rules)
                    .filter(|rule| rule.action == "FailJob")
                    .find_map(|rule| rule.on_exit_codes.as_ref())
                    .map_or(Restart::Never, |codes| Restart::ExitCode {
                        container: codes.container_name.clone().unwrap_or_default(),
                        permanent: codes.values.clone(),
                    }),
                _ => Restart::Replaced,
            };
            let success = spec
                .and_then(|s| s.success_policy.as_ref())
                .and_then(|p| p.rules.first())
                .map_or(TypeSuccess::All, |rule| {
                    match (&rule.succeeded_indexes, rule.succeeded_count) {
                        (Some(indexes), _) => TypeSuccess::Indexes(parse_indexes(indexes)),
                        (None, Some(count)) => TypeSuccess::Count(count),
                        (None, None) => TypeSuccess::All,
                    }
                });
            let replica_type = replica_types
                .iter()
                .find(|t| t.eq_ignore_ascii_case(&replicated.name))
                .map_or_else(|| replicated.name.clone(), |t| (*t).to_owned());
            TypeRule {
                name: replicated.name.clone(),
                replica_type,
                replicas: replicated.replicas.unwrap_or(1).saturating_mul(per_job),
                restart,
                success,
                target: targets.is_none_or(|t| t.is_empty() || t.contains(&replicated.name)),
            }
        })
        .collect()
}

/// A Job's `succeededIndexes` (`0`, `0,2-4`) as indexes; what does not parse is left out.
fn parse_indexes(indexes: &str) -> Vec<i32> {
    indexes
        .split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((from, to)) => match (from.trim().parse::<i32>(), to.trim().parse::<i32>()) {
                (Ok(from), Ok(to)) => (from..=to.min(from.saturating_add(10_000))).collect(),
                _ => Vec::new(),
            },
            None => part.trim().parse().into_iter().collect(),
        })
        .collect()
}

/// What was seen of a followed job.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// The job's pods: each controlled by the job, or by its launcher Job.
    pub pods: &'a [&'a Pod],
    /// mpi-operator's launcher: `None` where the previous operator made no launcher Job,
    /// `Some(None)` where it did and none is left.
    pub launcher: Option<Option<&'a Job>>,
    /// `runPolicy.backoffLimit`.
    pub backoff_limit: Option<i32>,
}

/// The followed job's new status, and why it cannot run on in those pods, if it cannot: a pod
/// that the previous operator would now make anew (one gone, or failed where its restart policy
/// replaces it). trainset then runs the job again as its own JobSet.
#[derive(Debug, PartialEq)]
pub struct Derived {
    pub status: JobStatus,
    pub replace: Option<String>,
}

/// The replica type a pod of the previous operator belongs to: `training.kubeflow.org/replica-type`
/// (training-operator), or its `job-role` (mpi-operator labels only that).
pub fn pod_type(pod: &Pod) -> Option<&str> {
    let labels = pod.metadata.labels.as_ref()?;
    labels
        .get(REPLICA_TYPE)
        .or_else(|| labels.get(JOB_ROLE))
        .map(String::as_str)
}

fn pod_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REPLICA_INDEX)?
        .parse()
        .ok()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The exit code `container` ended with, if it ended.
fn exit_code(pod: &Pod, container: &str) -> Option<i32> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let status = statuses.iter().find(|s| s.name == container)?;
    Some(status.state.as_ref()?.terminated.as_ref()?.exit_code)
}

fn restarts(pod: &Pod) -> i32 {
    let status = pod.status.as_ref();
    let containers = status.and_then(|s| s.container_statuses.as_deref());
    let init = status.and_then(|s| s.init_container_statuses.as_deref());
    containers
        .into_iter()
        .chain(init)
        .flatten()
        .fold(0i32, |sum, c| sum.saturating_add(c.restart_count.max(0)))
}

fn job_condition<'a>(job: &'a Job, type_: &'a str) -> Option<(&'a str, &'a str)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.as_deref().unwrap_or(type_),
                c.message.as_deref().unwrap_or_default(),
            )
        })
}

/// The followed job's status from what was seen, over its `previous` one (the previous
/// operator's, then trainset's). `namespace` goes into v1's messages.
pub fn derive(
    subject: &Subject<'_>,
    namespace: &str,
    previous: Option<&JobStatus>,
    rules: &[TypeRule],
    seen: &Seen<'_>,
    now: &Time,
) -> Derived {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return Derived {
            status,
            replace: None,
        };
    }
    let (kind, name) = (subject.kind, subject.name);
    let live: Vec<&Pod> = seen
        .pods
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let of_type = |rule: &TypeRule| -> Vec<&Pod> {
        live.iter()
            .copied()
            .filter(|p| pod_type(p) == Some(rule.name.as_str()))
            .collect()
    };
    let launcher_job = seen.launcher.flatten();
    let mut succeeded_types = Vec::new();
    let mut failure: Option<(String, String)> = None;
    let mut replace: Option<String> = None;
    let mut any_running = false;
    let mut restart_sum = 0i32;
    for rule in rules {
        let pods = of_type(rule);
        let mut counts = status
            .replica_statuses
            .get(&rule.replica_type)
            .map(|r| ReplicaStatus {
                selector: r.selector.clone(),
                ..ReplicaStatus::default()
            })
            .unwrap_or_default();
        for pod in &pods {
            match phase(pod) {
                "Running" => counts.active = counts.active.saturating_add(1),
                "Succeeded" => counts.succeeded = counts.succeeded.saturating_add(1),
                "Failed" => counts.failed = counts.failed.saturating_add(1),
                _ => {}
            }
            if phase(pod) == "Running" && rule.restart != Restart::Never {
                restart_sum = restart_sum.saturating_add(restarts(pod));
            }
        }
        any_running |= counts.active > 0;
        let launched_by_job = seen.launcher.is_some() && rule.name == "launcher";
        if launched_by_job {
            // mpi-operator's launcher is a Job of its own: the Job controller retries its pod,
            // and the Job's end is the launcher's.
            match launcher_job {
                None => replace = replace.or(Some("its launcher Job is gone".to_owned())),
                Some(job) => {
                    let job_status = job.status.as_ref();
                    counts.failed = job_status.and_then(|s| s.failed).unwrap_or(0).max(0);
                    if job_condition(job, "Complete").is_some() {
                        counts.succeeded = 1;
                        counts.active = 0;
                        succeeded_types.push(rule.name.clone());
                    } else if let Some((reason, message)) = job_condition(job, "Failed") {
                        failure.get_or_insert((reason.to_owned(), message.to_owned()));
                    }
                }
            }
        } else {
            if type_succeeded(rule, &pods) {
                succeeded_types.push(rule.name.clone());
            }
            for pod in pods.iter().filter(|p| phase(p) == "Failed") {
                let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
                match &rule.restart {
                    Restart::Never if seen.launcher.is_some() => {
                        // mpi-operator fails the job for a worker only when it was evicted.
                        let evicted = pod.status.as_ref().and_then(|s| s.reason.as_deref())
                            == Some("Evicted");
                        if evicted {
                            failure.get_or_insert((
                                "Evicted".to_owned(),
                                format!("pod {pod_name} was evicted"),
                            ));
                        }
                    }
                    Restart::Never => {
                        let message = format!(
                            "{kind} {namespace}/{name} has failed because {} {} replica(s) failed.",
                            counts.failed, rule.replica_type
                        );
                        failure.get_or_insert(("Failed".to_owned(), message));
                    }
                    Restart::ExitCode {
                        container,
                        permanent,
                    } => match exit_code(pod, container) {
                        Some(code) if permanent.contains(&code) => {
                            let message = format!(
                                "{kind} {namespace}/{name} has failed because pod {pod_name} \
                                 exited with the permanent code {code}."
                            );
                            failure.get_or_insert(("Failed".to_owned(), message));
                        }
                        code => {
                            let code = code
                                .map_or("no exit code".to_owned(), |c| format!("exit code {c}"));
                            replace.get_or_insert(format!("pod {pod_name} failed ({code})"));
                        }
                    },
                    Restart::Replaced => {
                        replace.get_or_insert(format!("pod {pod_name} failed"));
                    }
                }
            }
            if let Some(have) = missing(rule, &pods) {
                let message = format!("it has {have} of its {} {} pods", rule.replicas, rule.name);
                replace.get_or_insert(message);
            }
        }
        status
            .replica_statuses
            .insert(rule.replica_type.clone(), counts);
    }
    // v1's check of container restarts in running pods; a launcher Job keeps its own limit.
    let limit_passed = seen.launcher.is_none()
        && seen
            .backoff_limit
            .is_some_and(|limit| restart_sum >= limit.max(1));
    if failure.is_none() && limit_passed {
        let message =
            format!("Job {name} has failed because it has reached the specified backoff limit");
        failure = Some(("Failed".to_owned(), message));
    }
    let succeeded = rules
        .iter()
        .filter(|r| r.target)
        .all(|r| succeeded_types.contains(&r.name))
        && rules.iter().any(|r| r.target);

    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    if succeeded {
        let message = format!("{kind} {namespace}/{name} successfully completed.");
        conditions.set(SUCCEEDED, true, &format!("{kind}Succeeded"), &message);
        conditions.stop(RUNNING);
        conditions.remove(RESTARTING);
        // training-operator counts the pods still active at the end as succeeded; mpi-operator
        // counts no worker once its launcher is done.
        for replica in status.replica_statuses.values_mut() {
            if seen.launcher.is_none() {
                replica.succeeded = replica.succeeded.saturating_add(replica.active);
            }
            replica.active = 0;
        }
        let launcher_done = launcher_job
            .and_then(|j| j.status.as_ref())
            .and_then(|s| s.completion_time.clone());
        status.completion_time = Some(launcher_done.unwrap_or_else(|| now.clone()));
        replace = None;
    } else if let Some((cause, message)) = failure {
        let reason = format!("{kind}{}", subject.failure(&cause));
        conditions.set(FAILED, true, &reason, &message);
        conditions.stop(RUNNING);
        conditions.remove(RESTARTING);
        status.completion_time = Some(now.clone());
        replace = None;
    } else if any_running && replace.is_none() {
        let message = format!("{kind} {namespace}/{name} is running.");
        conditions.set(RUNNING, true, &format!("{kind}Running"), &message);
        conditions.remove(RESTARTING);
    }
    if status.start_time.is_none() {
        status.start_time = Some(now.clone());
    }
    status.state = Some(super::state(&status).to_owned());
    Derived { status, replace }
}

/// Whether the pods of `rule`'s type meet its success rule.
fn type_succeeded(rule: &TypeRule, pods: &[&Pod]) -> bool {
    let succeeded = || pods.iter().filter(|p| phase(p) == "Succeeded");
    match &rule.success {
        TypeSuccess::All => {
            let count = succeeded().count();
            rule.replicas > 0 && count >= usize::try_from(rule.replicas).unwrap_or(usize::MAX)
        }
        TypeSuccess::Indexes(indexes) => {
            !indexes.is_empty()
                && indexes
                    .iter()
                    .all(|i| succeeded().any(|p| pod_index(p) == Some(*i)))
        }
        TypeSuccess::Count(count) => {
            succeeded().count() >= usize::try_from((*count).max(1)).unwrap_or(usize::MAX)
        }
    }
}

/// How many pods of `rule`'s type there are, when fewer than it has: counted by distinct index
/// where its pods carry one (mpi-operator's workers start at 1 when the launcher is one too).
fn missing(rule: &TypeRule, pods: &[&Pod]) -> Option<usize> {
    let mut indexes: Vec<i32> = pods.iter().filter_map(|p| pod_index(p)).collect();
    indexes.sort_unstable();
    indexes.dedup();
    let have = if indexes.is_empty() {
        pods.len()
    } else {
        indexes.len()
    };
    (have < usize::try_from(rule.replicas).unwrap_or(0)).then_some(have)
}

/// A followed job suspended: its pods are deleted, so none is active; `Running` turns False and
/// `Suspended` True, as v1 says it.
pub fn suspended(subject: &Subject<'_>, previous: Option<&JobStatus>, now: &Time) -> JobStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return status;
    }
    let (kind, name) = (subject.kind, subject.name);
    let reason = format!("{kind}Suspended");
    let message = format!("{kind} {name} is suspended.");
    for replica in status.replica_statuses.values_mut() {
        replica.active = 0;
    }
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    if conditions.is_true(RUNNING) {
        conditions.set(RUNNING, false, &reason, &message);
    }
    conditions.set(SUSPENDED, true, &reason, &message);
    conditions.remove(RESTARTING);
    status.state = Some(super::state(&status).to_owned());
    status
}

/// A followed job that runs again as trainset's own JobSet, for `why`: `Restarting` True says so
/// until its new pods run.
pub fn restarting(
    subject: &Subject<'_>,
    previous: Option<&JobStatus>,
    why: &str,
    now: &Time,
) -> JobStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if is_terminal(&status) {
        return status;
    }
    let kind = subject.kind;
    let mut conditions = Conditions {
        list: &mut status.conditions,
        now,
    };
    conditions.set(RESTARTING, true, &format!("{kind}Restarting"), why);
    conditions.remove(RUNNING);
    for replica in status.replica_statuses.values_mut() {
        replica.active = 0;
    }
    status.state = Some(super::state(&status).to_owned());
    status
}
