//! What to do about one training job, decided without I/O: given the job, what the caches hold of
//! its JobSet (and Jobs), and the time, which objects to write or delete, what happened (for
//! events and metrics) and when to look again. The shell fetches the facts and carries the plan
//! out. Each family has its plan ([`v1`], [`trainer`]); what both decide alike is here.

pub mod trainer;
pub mod v1;

use std::time::Duration;

use jobset_types::JobSet;
use jobset_types::keys::{label as jobset_label, terminal_state};
use json_patch::Patch;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};

use crate::compile::{Compiled, gang};

/// A change of the JobSet's `spec.suspend`.
#[derive(Debug, PartialEq)]
pub enum SuspendWrite {
    Suspend,
    /// Resumes, carrying the pod-template fields a suspended JobSet may change, and the job's
    /// gang objects as it compiles now: their spec is written again before the JobSet resumes,
    /// as the peers make the gang anew on resume, so that a job resized while suspended gets a
    /// gang of its new size.
    Resume {
        patch: Patch,
        gang: Vec<DynamicObject>,
    },
}

impl SuspendWrite {
    /// Resumes `live` as the job compiles now.
    pub fn resume(live: &JobSet, compiled: Compiled) -> Self {
        Self::Resume {
            patch: crate::suspend::resume_patch(live, &compiled.jobset),
            gang: compiled.gang.into_iter().filter(gang::rewritable).collect(),
        }
    }
}

/// What happened, for events and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happened {
    Created,
    Recreated,
    /// trainset failed the job itself: an invalid spec, a JobSet name another job holds.
    Refused {
        reason: String,
        message: String,
    },
    Succeeded {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
    Restarted {
        count: i32,
    },
    Suspended {
        reason: String,
        message: String,
    },
    Resumed {
        reason: String,
        message: String,
    },
    /// trainset follows the pods another operator made for the job (`v1::takeover`).
    Following {
        message: String,
    },
    /// A job trainset followed runs again as trainset's own JobSet.
    RestartingAsJobSet {
        message: String,
    },
    /// A job another operator runs that trainset cannot take over yet (`message` says why).
    NotTakenOver {
        message: String,
    },
    /// The job waits for an earlier job's object of the name it needs to go.
    Waiting {
        message: String,
    },
    /// The job's Worker count is not autoscaled: an autoscaler of its name is another's.
    NotAutoscaled {
        message: String,
    },
    DeletedAfterTtl,
}

/// Whether the job is being deleted: then nothing is written for it, least of all a JobSet the
/// garbage collector has just deleted in the foreground.
pub fn deleting<K: Resource>(job: &K) -> bool {
    job.meta().deletion_timestamp.is_some()
}

/// Why the running JobSet `live` can never make the job's pods, from what Kubernetes said it cannot
/// create for it (`failure`): only a refusal of the object's content (`... is invalid: <field>:
/// ...`), which no retry passes. Others (an exceeded quota, a webhook's denial, a namespace's
/// pod security) may pass once the cluster changes, and the Job and JobSet controllers retry them.
pub fn refused_by_kubernetes(live: &JobSet, failure: Option<&str>) -> Option<String> {
    let failure = failure.filter(|f| f.contains(" is invalid: "))?;
    (!jobset_finished(live)).then(|| format!("Kubernetes refuses what its JobSet makes: {failure}"))
}

/// Why a job fails whose spec cannot run.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Why a job fails whose JobSet name another object's JobSet already has.
pub const NAME_CONFLICT: &str = "JobSetNameConflict";

/// Who controls an object trainset needs under a name it derives from a job's (the JobSet, an
/// MPI hostfile or SSH Secret, a runtime snapshot, the JobSet's Service).
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// The job itself (its uid): the object is its own.
    This,
    /// An earlier job of the same kind and name (another uid), or an object already being
    /// deleted: wait until the garbage collector has removed it, never adopt it.
    Earlier,
    /// Anything else, named (`TrainJob foo`, `no controller`): never used nor changed.
    Foreign(String),
}

/// Who holds `object`, for the job of `kind` and `name` with `uid`. A job without a uid (read
/// from a file) holds what it finds.
pub fn holder(object: &ObjectMeta, kind: &str, name: &str, uid: Option<&str>) -> Holder {
    let Some(uid) = uid else {
        return Holder::This;
    };
    let controller = object
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(owner) if owner.uid == uid => Holder::This,
        Some(owner) if owner.kind == kind && owner.name == name => Holder::Earlier,
        _ if object.deletion_timestamp.is_some() => Holder::Earlier,
        Some(owner) => Holder::Foreign(format!("{} {}", owner.kind, owner.name)),
        None => Holder::Foreign("no controller".to_owned()),
    }
}

/// How long a job waits before looking again whether an earlier job's object is gone (its
/// deletion also wakes it, when it is a JobSet).
pub const EARLIER_WAIT: Duration = Duration::from_secs(5);

/// What a job waiting for the `object` an earlier job of its name left is told.
pub fn waiting_for_earlier(object: &str, kind: &str, name: &str) -> String {
    format!(
        "{object} belongs to an earlier {kind} {name} and is being deleted; {kind} {name} \
         starts once it is gone"
    )
}

/// Why a job fails whose hostfile, SSH Secret, runtime snapshot or Service name is another's.
pub const RESOURCE_EXISTS: &str = "ResourceExists";

/// What a job is told whose `object` (`ConfigMap train-config`) exists, held by `holder`.
pub fn resource_exists(object: &str, holder: &str, kind: &str, name: &str) -> String {
    format!(
        "{object} already exists and is controlled by {holder}, not by {kind} {name}: it is left \
         untouched. Rename the job, or delete the {object} if it is not needed."
    )
}

/// What a job whose JobSet name is taken is told.
pub fn name_conflict(kind: &str, name: &str, holder: &str) -> String {
    format!(
        "{kind} {name} cannot run: its JobSet {name} already exists and belongs to {holder}. \
         Every training job's JobSet is named after it, so give jobs of different kinds in one \
         namespace different names."
    )
}

/// Whether the JobSet reached a terminal state.
pub fn jobset_finished(jobset: &JobSet) -> bool {
    jobset
        .status
        .as_ref()
        .and_then(|s| s.terminal_state.as_deref())
        .is_some_and(|s| s == terminal_state::COMPLETED || s == terminal_state::FAILED)
}

/// Whether `jobs`, as a cache holds them, show how the finished `jobset` ended: a Job of its last
/// restart attempt finished the same way (`Complete` for a completed JobSet, `Failed` for a failed
/// one). If none does, the Job cache is behind the JobSet cache (a watch re-listing after an
/// apiserver restart, say), and the final counts, written once, must be read elsewhere.
pub fn jobs_show_end(jobset: &JobSet, jobs: &[Job]) -> bool {
    let Some(status) = &jobset.status else {
        return false;
    };
    let condition = match status.terminal_state.as_deref() {
        Some(terminal_state::COMPLETED) => "Complete",
        Some(terminal_state::FAILED) => "Failed",
        _ => return false,
    };
    let attempt = status.restarts.to_string();
    jobs.iter()
        .filter(|job| job.labels().get(jobset_label::RESTART_ATTEMPT) == Some(&attempt))
        .filter_map(|job| job.status.as_ref()?.conditions.as_ref())
        .flatten()
        .any(|c| c.type_ == condition && c.status == "True")
}
