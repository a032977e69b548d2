//! What `trainset takeover --dry-run` says of a job: the verdict of the plan the controller
//! would make of it now.

use super::super::{Plan, managed_here, wants_suspended};
use crate::kinds::Served;
use crate::plan::Happened;
use crate::status;

/// What `trainset takeover --dry-run` says trainset will do with a job, from the plan the
/// controller would make of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Another operator's pods run on: followed to the end, no JobSet.
    Follow,
    /// Another operator's pods cannot run on: they are deleted and the job runs as a JobSet.
    Restart,
    /// Its JobSet exists and is the job's: trainset reports from it.
    Adopt,
    /// trainset makes its JobSet.
    Start,
    /// Suspended: no JobSet until it is resumed.
    Held,
    /// Succeeded or Failed: kept as it is.
    Finished,
    /// Waits for an earlier job's object, or for another operator's pods to go.
    Wait,
    /// Handed off (`runPolicy.managedBy`): trainset leaves it alone.
    Skip,
    /// trainset fails it: the reason says why.
    Refuse,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Self::Follow => "follow",
            Self::Restart => "restart",
            Self::Adopt => "adopt",
            Self::Start => "start",
            Self::Held => "held",
            Self::Finished => "finished",
            Self::Wait => "wait",
            Self::Skip => "skip",
            Self::Refuse => "refuse",
        }
    }
}

/// The verdict on `job` from `plan`, the plan [`super::super::plan`] made of it with `jobset` (its
/// JobSet, if one exists), and what it means for this job.
pub fn verdict<K: Served>(job: &K, has_jobset: bool, plan: &Plan) -> (Verdict, String) {
    let status = job.job_status();
    if !managed_here(job) {
        let manager = job.run_policy().and_then(|p| p.managed_by.clone());
        return (
            Verdict::Skip,
            format!(
                "runPolicy.managedBy is {}: handed off",
                manager.unwrap_or_default()
            ),
        );
    }
    // What ends following outweighs that it began.
    let said = |verdict: Verdict| {
        plan.happened
            .iter()
            .find_map(|happened| match (verdict, happened) {
                (Verdict::Refuse, Happened::Refused { message, .. })
                | (Verdict::Restart, Happened::RestartingAsJobSet { message })
                | (Verdict::Wait, Happened::Waiting { message })
                | (Verdict::Wait, Happened::NotTakenOver { message })
                | (Verdict::Follow, Happened::Following { message }) => {
                    Some((verdict, message.clone()))
                }
                _ => None,
            })
    };
    let told = [
        Verdict::Refuse,
        Verdict::Restart,
        Verdict::Wait,
        Verdict::Follow,
    ]
    .into_iter()
    .find_map(said);
    if let Some(told) = told {
        return told;
    }
    let ended = plan
        .status
        .as_ref()
        .or(status)
        .filter(|s| status::is_terminal(s));
    if let Some(ended) = ended {
        return (
            Verdict::Finished,
            format!("{}: kept as it is", status::state(ended)),
        );
    }
    let following = plan
        .status
        .as_ref()
        .or(status)
        .and_then(|s| s.takeover.as_ref())
        .is_some_and(|t| t.following);
    if following {
        return (
            Verdict::Follow,
            "trainset follows the pods another operator made for it".to_owned(),
        );
    }
    if !plan.stop_foreign.is_empty() && wants_suspended(job) {
        return (
            Verdict::Held,
            "suspended: what another operator made of it goes, and it gets no JobSet until it \
             is resumed"
                .to_owned(),
        );
    }
    if !plan.stop_foreign.is_empty() {
        return (
            Verdict::Wait,
            "another operator's pods of it are being deleted; then trainset makes its JobSet"
                .to_owned(),
        );
    }
    if plan.create.is_some() {
        return (Verdict::Start, "trainset makes its JobSet".to_owned());
    }
    if has_jobset {
        return (
            Verdict::Adopt,
            "its JobSet exists and is the job's: trainset reports from it".to_owned(),
        );
    }
    (
        Verdict::Held,
        "suspended: no JobSet until it is resumed".to_owned(),
    )
}
