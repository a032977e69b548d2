//! Label, annotation, condition and reason strings the JobSet controller (v0.12.0) and Kueue use.

/// Set both as label and as annotation on every child Job and its pod template.
pub mod label {
    pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
    pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";
    pub const REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
    pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
    pub const JOB_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/job-restart-attempt";
    pub const REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
    pub const GLOBAL_REPLICAS: &str = "jobset.sigs.k8s.io/global-replicas";
    pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
    pub const JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
    pub const JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
    pub const GROUP_NAME: &str = "jobset.sigs.k8s.io/group-name";
    pub const GROUP_REPLICAS: &str = "jobset.sigs.k8s.io/group-replicas";
    pub const JOB_GROUP_INDEX: &str = "jobset.sigs.k8s.io/job-group-index";
    pub const COORDINATOR: &str = "jobset.sigs.k8s.io/coordinator";
    /// Added to pods by the JobSet pod webhook.
    pub const PRIORITY: &str = "jobset.sigs.k8s.io/priority";
    pub const NAMESPACED_JOB: &str = "alpha.jobset.sigs.k8s.io/namespaced-job";
}

pub mod annotation {
    pub const EXCLUSIVE_TOPOLOGY: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";
    pub const NODE_SELECTOR: &str = "alpha.jobset.sigs.k8s.io/node-selector";
    pub const IN_PLACE_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";
    pub const DISABLE_IN_PLACE_RESTART: &str = "jobset.sigs.k8s.io/disable-in-place-restart";
}

/// Toleration key the node-selector placement strategy adds.
pub const NO_SCHEDULE_TAINT: &str = "alpha.jobset.sigs.k8s.io/no-schedule";

/// The JobSet controller's own `spec.managedBy` value.
pub const JOBSET_CONTROLLER: &str = "jobset.sigs.k8s.io/jobset-controller";

/// Set by the Kubernetes Job controller on Indexed Job pods (annotation and label).
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

pub mod condition {
    pub const COMPLETED: &str = "Completed";
    pub const FAILED: &str = "Failed";
    pub const SUSPENDED: &str = "Suspended";
    pub const RESTARTING: &str = "RestartingJobSet";
    pub const STARTUP_POLICY_IN_PROGRESS: &str = "StartupPolicyInProgress";
    pub const STARTUP_POLICY_COMPLETED: &str = "StartupPolicyCompleted";
}

pub mod reason {
    pub const ALL_JOBS_COMPLETED: &str = "AllJobsCompleted";
    pub const FAILED_JOBS: &str = "FailedJobs";
    pub const FAIL_JOBSET_ACTION: &str = "FailJobSetFailurePolicyAction";
    pub const REACHED_MAX_RESTARTS: &str = "ReachedMaxRestarts";
    pub const SUSPENDED_JOBS: &str = "SuspendedJobs";
    pub const RESUME_JOBS: &str = "ResumeJobs";
    pub const DEFAULT_FAILURE_POLICY: &str = "DefaultFailurePolicy";
    /// Prefix of the restart reason when a named rule matched: `FailurePolicy_<rule>`.
    pub const FAILURE_POLICY_RULE_PREFIX: &str = "FailurePolicy_";
    pub const JOBS_READY: &str = "JobsReady";
    pub const JOBSET_FAILED: &str = "JobSetFailed";
    pub const JOBSET_COMPLETED: &str = "JobSetCompleted";
    pub const JOBSET_SUSPENDED: &str = "JobSetSuspended";
    pub const IN_ORDER_STARTUP_IN_PROGRESS: &str = "InOrderStartupPolicyInProgress";
    pub const IN_ORDER_STARTUP_COMPLETED: &str = "InOrderStartupPolicyCompleted";
}

/// Reasons of a batch/v1 Job's `Failed` condition, the only values `onJobFailureReasons` accepts.
pub mod job_failure_reason {
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const FAILED_INDEXES: &str = "FailedIndexes";
    pub const MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
    pub const POD_FAILURE_POLICY: &str = "PodFailurePolicy";
}

pub mod terminal_state {
    pub const COMPLETED: &str = "Completed";
    pub const FAILED: &str = "Failed";
}

pub mod kueue {
    pub const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
    pub const PRIORITY_CLASS: &str = "kueue.x-k8s.io/priority-class";
    pub const PREBUILT_WORKLOAD_NAME: &str = "kueue.x-k8s.io/prebuilt-workload-name";
    pub const PODSET: &str = "kueue.x-k8s.io/podset";
    /// On a Workload: the uid of the job it queues.
    pub const JOB_UID: &str = "kueue.x-k8s.io/job-uid";
    pub const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";
}
