//! Jobs that another operator started (training-operator v1.9.4, mpi-operator v0.8.2), seen
//! when trainset takes over from it on a live cluster (docs/migration.md). Such a job is never
//! started a second time: while the pods that operator made run on, trainset follows them to the
//! job's end, with no JobSet, and applies the run policy to them. Where that operator would now
//! make a pod anew, or resume the job, trainset stops what is left of its pods and runs the job
//! as its own JobSet, and says so.
//!
//! What the job controls and trainset did not make is trusted as the previous operator's only
//! for a job whose status that operator wrote: one trainset has written carries `state` (and,
//! once taken over, `takeover`), so pods planted beside a job trainset runs count for nothing.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

mod verdict;

pub use verdict::{Verdict, verdict};

use super::{Facts, Plan, after_end, present_types, subject, transitions, wants_suspended};
use crate::api::{API_VERSION_ANNOTATION, CleanPodPolicy, JobStatus, Takeover};
use crate::compile::{Compiled, OPERATOR_NAME};
use crate::kinds::Served;
use crate::plan::Happened;
use crate::status::{self, followed};

/// What the shell found of a job's previous operator, for a job that may have one
/// ([`may_have_run_before`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Foreign<'a> {
    /// Pods in the job's namespace labelled with its name that no JobSet made: only those the
    /// job controls, directly or through its launcher Job, count.
    pub pods: &'a [Pod],
    /// The launcher Job `<name>-launcher` mpi-operator makes ([`launcher_job`]): `None` for a
    /// job whose previous operator makes none, `Some(None)` when there is none.
    pub launcher: Option<Option<&'a Job>>,
    /// The Services the job controls: (name, uid). trainset's JobSet Service is the JobSet's.
    pub services: &'a [(String, String)],
}

/// An object the previous operator made for the job, to delete before trainset runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignObject {
    pub kind: ForeignKind,
    pub name: String,
    /// Deleted only while it has this uid; `None`: only if the job controls it and trainset did
    /// not make it (the shell looks).
    pub uid: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForeignKind {
    Pod,
    Service,
    /// A launcher Job, deleted in the foreground: it stays until its pods are gone.
    Job,
    ConfigMap,
    Secret,
    ServiceAccount,
    Role,
    RoleBinding,
}

/// How often a followed job whose launcher is a Job is looked at again: the pods watch wakes it
/// when the launcher's pod ends, but the Job says it finished a moment later.
pub const LAUNCHER_LOOK_AGAIN: Duration = Duration::from_secs(10);

/// How often a job whose previous operator's pods are being deleted looks whether they are gone
/// (their deletion wakes it too).
pub const CLEARING_LOOK_AGAIN: Duration = Duration::from_secs(5);

/// How often a job whose pods another API's operator made looks again whether it was annotated
/// (an annotation does not change its generation, which is what wakes a job).
pub const UNKNOWN_API_LOOK_AGAIN: Duration = Duration::from_secs(20);

/// The launcher Job mpi-operator makes for an MPIJob of `kubeflow.org/v2beta1`, by name; other
/// kinds' operators run every replica as a pod.
pub fn launcher_job<K: Served>(job: &K) -> Option<String> {
    job.launcher_job_before()
        .then(|| format!("{}-launcher", job.name_any()))
}

/// Whether the status was written by another operator: conditions, and nothing only trainset
/// writes.
pub fn run_by_another(status: &JobStatus) -> bool {
    !status.conditions.is_empty()
        && status.state.is_none()
        && status.takeover.is_none()
        && status.job_set.is_none()
}

/// Whether the job may have pods of a previous operator: its status says another operator wrote
/// it, or trainset follows it or took it over and has not yet made its JobSet. Only for those
/// does the shell look.
pub fn may_have_run_before<K: Served>(job: &K) -> bool {
    job.job_status()
        .is_some_and(|s| run_by_another(s) || (s.takeover.is_some() && s.job_set.is_none()))
}

/// What of `foreign` belongs to `job`: the pods it controls, or its launcher Job does, and the
/// launcher Job if the job controls it.
struct Owned<'a> {
    pods: Vec<&'a Pod>,
    launcher: Option<Option<&'a Job>>,
    services: &'a [(String, String)],
}

fn controller_uid<R: Resource>(object: &R) -> Option<&str> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

fn owned<'a>(uid: &str, foreign: &Foreign<'a>) -> Owned<'a> {
    let launcher = foreign
        .launcher
        .map(|job| job.filter(|j| controller_uid(*j) == Some(uid)));
    let launcher_uid = launcher.flatten().and_then(|j| j.metadata.uid.as_deref());
    let pods = foreign
        .pods
        .iter()
        .filter(|pod| {
            let controller = controller_uid(*pod);
            controller == Some(uid) || (controller.is_some() && controller == launcher_uid)
        })
        .collect();
    Owned {
        pods,
        launcher,
        services: foreign.services,
    }
}

impl Owned<'_> {
    fn any(&self) -> bool {
        !self.pods.is_empty() || self.launcher.flatten().is_some()
    }

    /// The previous operator's objects not yet being deleted, and the auxiliary objects trainset
    /// would make under the same names (`compiled`'s: the hostfile, the SSH Secret, the
    /// launcher's Role), which the shell deletes only if the job controls them and trainset did
    /// not make them.
    fn to_delete(&self, compiled: Option<&Compiled>) -> Vec<ForeignObject> {
        let object = |kind, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            ForeignObject {
                kind,
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone(),
            }
        };
        let mut objects: Vec<ForeignObject> = self
            .launcher
            .flatten()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .map(|j| object(ForeignKind::Job, &j.metadata))
            .into_iter()
            .chain(
                self.pods
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| object(ForeignKind::Pod, &p.metadata)),
            )
            .chain(self.services.iter().map(|(name, uid)| ForeignObject {
                kind: ForeignKind::Service,
                name: name.clone(),
                uid: Some(uid.clone()),
            }))
            .collect();
        let named = |kind, name: Option<&String>| {
            name.map(|name| ForeignObject {
                kind,
                name: name.clone(),
                uid: None,
            })
        };
        if let Some(compiled) = compiled {
            let access = compiled.launcher_access.as_ref();
            objects.extend(
                [
                    named(
                        ForeignKind::ConfigMap,
                        compiled
                            .config_map
                            .as_ref()
                            .and_then(|c| c.metadata.name.as_ref()),
                    ),
                    named(
                        ForeignKind::Secret,
                        compiled
                            .secret
                            .as_ref()
                            .and_then(|s| s.metadata.name.as_ref()),
                    ),
                    named(
                        ForeignKind::ServiceAccount,
                        access
                            .and_then(|a| a.service_account.as_ref())
                            .and_then(|s| s.metadata.name.as_ref()),
                    ),
                    named(
                        ForeignKind::Role,
                        access.and_then(|a| a.role.metadata.name.as_ref()),
                    ),
                    named(
                        ForeignKind::RoleBinding,
                        access.and_then(|a| a.role_binding.metadata.name.as_ref()),
                    ),
                ]
                .into_iter()
                .flatten(),
            );
        }
        objects
    }

    fn operator(&self) -> Option<String> {
        self.pods
            .iter()
            .find_map(|p| p.metadata.labels.as_ref()?.get(OPERATOR_NAME).cloned())
    }
}

/// The plan of a job without a JobSet whose previous operator's pods may be about, when they
/// decide it: trainset follows them, or deletes what is left of them before it makes the job's
/// JobSet. `None`: the job has nothing of another operator's, and is planned as any other.
pub fn plan<K: Served>(facts: &mut Facts<'_, K>) -> Option<Plan> {
    let job = facts.job;
    let status = job.job_status()?;
    let uid = job.uid()?;
    let owned = owned(&uid, &facts.foreign);
    // A suspended job runs nowhere: what the old operator made of it (mpi-operator's suspended
    // launcher Job) goes, and it is held as any other.
    let held = wants_suspended(job);
    let following = status.takeover.as_ref().is_some_and(|t| t.following)
        || (run_by_another(status) && owned.any() && !held);
    let made_by = owned.operator().filter(|o| o != job.operator_name());
    if let Some(operator) = made_by.filter(|_| following) {
        // An MPIJob of training-operator's `kubeflow.org/v1` stored without the annotation
        // that says so reads as mpi-operator's `v2beta1`: nothing is done to it by the rules of
        // the other API.
        let message = format!(
            "{} {}'s pods were made by {operator}, whose API differs from the one trainset reads \
             the job as ({}); trainset leaves it alone until it says which it is: annotate it \
             {API_VERSION_ANNOTATION}=v1 if it was created as kubeflow.org/v1",
            K::kind(&()),
            job.name_any(),
            job.operator_name()
        );
        return Some(Plan {
            happened: vec![Happened::NotTakenOver { message }],
            requeue: Some(UNKNOWN_API_LOOK_AGAIN),
            ..Plan::default()
        });
    }
    if following {
        return Some(follow(facts, &owned));
    }
    if owned.any() && (status.takeover.is_some() || held) {
        // Taken over, and not all of the previous operator's pods are gone yet: the job's own
        // JobSet waits for them, so nothing runs twice.
        return Some(Plan {
            stop_foreign: owned.to_delete(None),
            requeue: Some(CLEARING_LOOK_AGAIN),
            ..Plan::default()
        });
    }
    None
}

/// The record a job gets when trainset first writes its status over another operator's.
pub fn taken_over(previous_operator: Option<String>, following: bool) -> Takeover {
    Takeover {
        previous_operator,
        following,
    }
}

fn follow<K: Served>(facts: &mut Facts<'_, K>, owned: &Owned<'_>) -> Plan {
    let job = facts.job;
    let now = facts.now.clone();
    let (kind, name) = (K::kind(&()), job.name_any());
    let namespace = job.namespace().unwrap_or_default();
    let present = present_types(job);
    let subject = subject(job, &name, &kind, &present);
    let previous = job.job_status();
    let mut plan = Plan::default();
    let operator = previous
        .and_then(|s| s.takeover.as_ref())
        .and_then(|t| t.previous_operator.clone())
        .or_else(|| owned.operator());
    let who = operator
        .clone()
        .unwrap_or_else(|| "another operator".to_owned());
    if previous.is_none_or(|s| s.takeover.is_none()) {
        plan.happened.push(Happened::Following {
            message: format!(
                "{kind} {name} runs in {} pods that {who} made: trainset follows them to the \
                 job's end, applies its run policy to them and makes no JobSet for it",
                owned.pods.len()
            ),
        });
    }
    let compiled = match facts.compiled.take() {
        Some(Ok(compiled)) => compiled,
        // A spec trainset refuses cannot be followed by its rules: it fails, and its pods stop.
        Some(Err(reason)) => {
            let mut refused = super::invalid(job, &reason, &now);
            refused.happened.splice(0..0, plan.happened);
            refused.stop_foreign = owned.to_delete(None);
            if let Some(status) = &mut refused.status {
                status.takeover = Some(taken_over(operator, true));
            }
            return refused;
        }
        None => return plan,
    };

    let (mut next, stop) = if wants_suspended(job) {
        // As v1 suspends a job: its pods go. Resumed, it runs as trainset's own JobSet.
        let next = followed::suspended(&subject, previous, &now);
        (next, true)
    } else {
        let rules = followed::rules(&compiled.jobset, &present);
        let seen = followed::Seen {
            pods: &owned.pods,
            launcher: owned.launcher,
            backoff_limit: job.run_policy().and_then(|p| p.backoff_limit),
        };
        let derived = followed::derive(&subject, &namespace, previous, &rules, &seen, &now);
        let mut next = derived.status;
        let deadline_seconds = job.run_policy().and_then(|p| p.active_deadline_seconds);
        let deadline = status::deadline_left(deadline_seconds, &next, false, &now);
        if deadline.is_some_and(|left| left.is_zero()) {
            let seconds = deadline_seconds.unwrap_or_default();
            let message = format!(
                "{kind} {name} was active longer than its activeDeadlineSeconds ({seconds}s)."
            );
            let cause = subject.failure("DeadlineExceeded");
            next = status::fail(&subject, Some(&next), cause, &message, &now);
            // As trainset stops its own job's pods at the deadline.
            plan.clean_pods = Some(CleanPodPolicy::Running);
        } else {
            plan.requeue = deadline.map(crate::run_policy::look_again);
        }
        match derived.replace.filter(|_| !status::is_terminal(&next)) {
            Some(why) => {
                let message = format!(
                    "{kind} {name} cannot run on in the pods {who} made: {why}, and {who} would \
                     make it anew. trainset stops the job's pods and runs it again as JobSet \
                     {name}."
                );
                next = followed::restarting(&subject, Some(&next), &message, &now);
                plan.happened.push(Happened::RestartingAsJobSet { message });
                (next, true)
            }
            None => (next, false),
        }
    };
    if stop {
        plan.stop_foreign = owned.to_delete(Some(&compiled));
        plan.requeue = Some(CLEARING_LOOK_AGAIN);
    } else if owned.launcher.flatten().is_some() && !status::is_terminal(&next) {
        plan.requeue = Some(
            plan.requeue
                .map_or(LAUNCHER_LOOK_AGAIN, |r| r.min(LAUNCHER_LOOK_AGAIN)),
        );
    }
    next.takeover = Some(taken_over(operator, !stop));
    let empty = JobStatus::default();
    transitions(previous.unwrap_or(&empty), &next, &mut plan.happened);
    if status::is_terminal(&next) {
        let deadline_clean = plan.clean_pods.take();
        after_end(job, &next, &now, &mut plan);
        plan.clean_pods = match (plan.clean_pods, deadline_clean) {
            (Some(CleanPodPolicy::All), _) => Some(CleanPodPolicy::All),
            (policy, deadline) => deadline.or(policy),
        };
    }
    super::plan_status(facts, previous.unwrap_or(&empty), next, &mut plan);
    plan
}

#[cfg(test)]
mod tests;
