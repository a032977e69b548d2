//! The v1 family's compiler. The shared driver here lays out replicated jobs, labels, restart
//! policies and the JobSet's success and failure policies; each framework file adds only what is
//! its own (env, success rule, layout, extra objects) through [`Framework`].

mod gang;
mod jax;
mod jobset;
mod mpi;
mod mpi_config;
pub mod mpi_kubectl_exec;
mod mpi_ssh;
mod paddle;
mod policy;
mod pytorch;
mod tensorflow;
mod xgboost;

use std::collections::BTreeMap;

use jobset_types::{
    DependsOn, JobSet, JobSetSpec, Network, Operator, ReplicatedJob, StartupPolicy,
    StartupPolicyOrder, SuccessPolicy, keys,
};
use k8s_openapi::api::batch::v1::SuccessPolicy as JobSuccessPolicy;
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, PodSpec, Secret};
use kube::{Resource, ResourceExt};

use super::meta::{JOB_ROLE, MANAGED_BY, Owner, TRAINSET};
use super::{CompileError, Compiled, LauncherAccess, Options, bounds, env};
use crate::api::{ReplicaSpec, RestartPolicy, TrainingJob};
use crate::compile::gang::{Gang, GangScheduler};
use jobset::{failure_policy, named_port, replicated_job};

/// Whole-gang restarts the default JobSet failure policy allows before the job fails.
pub const DEFAULT_MAX_RESTARTS: i32 = 3;

/// How the pods of one replica type are spread over Jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One Indexed Job of N pods; pod `i` is `<name>-<type>-0-<i>`.
    Indexed,
    /// N single-pod Jobs; pod `i` is `<name>-<type>-<i>-0` and its rank is the JobSet's global job
    /// index (used where v1's rank is an offset plus the index, which env cannot add).
    RankOffset,
}

/// One replica type as it is compiled: one replicated job.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// Canonical replica type, e.g. `Worker`.
    pub replica_type: &'static str,
    /// Replicated job name: the lower-case replica type.
    pub name: String,
    pub spec: &'a ReplicaSpec,
    pub replicas: i32,
    pub layout: Layout,
    pub restart_policy: RestartPolicy,
    /// The framework port of this type: its default container's named port, else the default.
    pub port: Option<i32>,
}

impl Group<'_> {
    /// Hostname of pod `index` of this type (without the subdomain); `index` may be a number or
    /// a `$(VAR)` reference.
    pub fn host(&self, job: &str, index: impl std::fmt::Display) -> String {
        match self.layout {
            Layout::Indexed => format!("{job}-{}-0-{index}", self.name),
            Layout::RankOffset => format!("{job}-{}-{index}-0", self.name),
        }
    }

    /// Downward-API path of the pod's index within its replica type.
    pub fn index_path(&self) -> &'static str {
        match self.layout {
            Layout::Indexed => env::COMPLETION_INDEX_PATH,
            Layout::RankOffset => env::JOB_INDEX_PATH,
        }
    }

    /// `TRAINSET_REPLICA_INDEX`, the pod's index within its type, from the downward API; define
    /// it before any value that embeds `$(TRAINSET_REPLICA_INDEX)`.
    pub fn index_env(&self) -> EnvVar {
        env::field(env::REPLICA_INDEX, self.index_path())
    }
}

/// Everything a framework reads while compiling one job.
pub struct Context<'a, J> {
    pub job: &'a J,
    pub owner: Owner,
    pub groups: Vec<Group<'a>>,
    pub cluster_domain: Option<String>,
    pub kubectl_delivery_image: Option<String>,
}

impl<J> Context<'_, J> {
    pub fn name(&self) -> &str {
        &self.owner.name
    }

    pub fn namespace(&self) -> &str {
        &self.owner.namespace
    }

    pub fn group(&self, replica_type: &str) -> Option<&Group<'_>> {
        self.groups.iter().find(|g| g.replica_type == replica_type)
    }

    /// Sum of replicas over every replica type.
    pub fn total_replicas(&self) -> i64 {
        self.groups.iter().map(|g| i64::from(g.replicas)).sum()
    }

    /// `<host>.<subdomain>` of pod `index` of `group`: resolvable in the job's namespace.
    pub fn address(&self, group: &Group<'_>, index: impl std::fmt::Display) -> String {
        format!("{}.{}", group.host(self.name(), index), self.name())
    }

    /// Like [`Context::address`], plus `.<namespace>.svc`, as v1 wrote TF_CONFIG and hostfiles.
    pub fn service_address(&self, group: &Group<'_>, index: impl std::fmt::Display) -> String {
        format!("{}.{}.svc", self.address(group, index), self.namespace())
    }
}

/// Which pods of a replica type v1 labelled `training.kubeflow.org/job-role: master`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MasterRole {
    NoPod,
    /// Every pod: the label goes on the pod template.
    EveryPod,
    /// Only pod 0 (v1's worker 0 of a job without a chief or master). One template serves every
    /// index, so the template names the index in an annotation and the pod-labels admission
    /// policy labels that pod when it is created.
    FirstPod,
}

impl MasterRole {
    /// v1's rule where one replica type is the master (XGBoostJob, PaddleJob).
    fn type_is(group: &Group<'_>, master: &str) -> Self {
        if group.replica_type == master {
            Self::EveryPod
        } else {
            Self::NoPod
        }
    }

    /// v1's rule for TFJob and PyTorchJob: the `coordinators` types when the job has one, else
    /// worker 0.
    fn coordinator_or_first_worker<J>(
        ctx: &Context<'_, J>,
        group: &Group<'_>,
        coordinators: &[&str],
    ) -> Self {
        if coordinators.contains(&group.replica_type) {
            Self::EveryPod
        } else if group.replica_type == "Worker"
            && !coordinators.iter().any(|c| ctx.group(c).is_some())
        {
            Self::FirstPod
        } else {
            Self::NoPod
        }
    }
}

/// Which replicated jobs must succeed for the JobSet to succeed.
pub struct Success {
    /// Replicated jobs the JobSet's `successPolicy` (operator All) targets.
    pub targets: Vec<String>,
    /// A Job `successPolicy` for a replicated job, e.g. "index 0 succeeded".
    pub job_policies: BTreeMap<String, JobSuccessPolicy>,
}

impl Success {
    pub fn all_of(targets: &[&str]) -> Self {
        Self {
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
            job_policies: BTreeMap::new(),
        }
    }
}

/// What a framework compiles besides the JobSet.
#[derive(Default)]
pub struct Extra {
    pub config_map: Option<ConfigMap>,
    pub secret: Option<Secret>,
    pub launcher_access: Option<LauncherAccess>,
}

/// One framework: what a kind adds on top of the shared compilation.
pub trait Framework {
    type Job: TrainingJob;
    /// Value of `training.kubeflow.org/operator-name`, as v1 set it.
    const OPERATOR_NAME: &'static str;
    /// The `framework` label of v1's metrics.
    const FRAMEWORK: &'static str;
    /// The framework's named port on the default container, with its default number.
    const PORT: Option<(&'static str, i32)>;
    /// Whether compiling needs an SSH key pair for an auxiliary Secret.
    const NEEDS_SSH_KEY: bool = false;
    /// Whether env goes into every container (true) or only the default container (TFJob).
    const ENV_IN_EVERY_CONTAINER: bool = true;
    /// Whether the pods get DNS hostnames under the job's headless Service, as every kind's did
    /// in v1 but MPIJob's, which had neither (its launcher reaches its workers through the API
    /// server).
    const DNS_HOSTNAMES: bool = true;
    /// Whether v1 published `replicaStatuses[].selector` for the kind (PyTorch, Paddle, JAX).
    const REPLICA_SELECTOR: bool = false;
    /// Whether a failure's reason names its cause (mpi-operator) rather than being
    /// `<Kind>Failed` whatever the cause (training-operator).
    const DETAILED_FAILURE_REASON: bool = false;

    fn default_restart_policy(replica_type: &str) -> RestartPolicy;

    fn default_replicas(_replica_type: &str) -> i32 {
        1
    }

    /// Replica types in replicated-job order: the coordinating type first.
    fn order(_job: &Self::Job) -> &'static [&'static str] {
        Self::Job::REPLICA_TYPES
    }

    fn layout(_job: &Self::Job, _replica_type: &str) -> Layout {
        Layout::Indexed
    }

    /// Which pods of `group` v1 labelled `training.kubeflow.org/job-role: master`.
    fn master_role(_ctx: &Context<'_, Self::Job>, _group: &Group<'_>) -> MasterRole {
        MasterRole::NoPod
    }

    /// Labels every pod of one replica type carries besides the shared ones (v1's job-role); the
    /// per-pod ones come from the pod-labels admission policy (see [`MasterRole::FirstPod`]).
    fn role_labels(
        ctx: &Context<'_, Self::Job>,
        group: &Group<'_>,
    ) -> Vec<(&'static str, &'static str)> {
        match Self::master_role(ctx, group) {
            MasterRole::EveryPod => vec![(JOB_ROLE, "master")],
            MasterRole::NoPod | MasterRole::FirstPod => Vec::new(),
        }
    }

    /// What v1's `training.kubeflow.org/replica-index` of pod `i` of `group` is: `i` plus this
    /// offset, or no label at all (`None`).
    fn replica_index_offset(_ctx: &Context<'_, Self::Job>, _group: &Group<'_>) -> Option<i32> {
        Some(0)
    }

    /// Variables for the containers of `group`, in order; they follow the user's own and win over
    /// a user's variable of the same name (see [`env::inject`]).
    fn env(ctx: &Context<'_, Self::Job>, group: &Group<'_>) -> Vec<EnvVar>;

    fn success(ctx: &Context<'_, Self::Job>) -> Success;

    fn depends_on(_ctx: &Context<'_, Self::Job>, _group: &Group<'_>) -> Vec<DependsOn> {
        Vec::new()
    }

    /// Last changes to one replica type's pod (MPIJob: mounts and the default command).
    fn finish_pod(_ctx: &Context<'_, Self::Job>, _group: &Group<'_>, _pod: &mut PodSpec) {}

    /// The job's gang, when trainset runs with a gang scheduler (training-operator's rules
    /// unless the kind's operator had its own).
    fn gang(
        ctx: &Context<'_, Self::Job>,
        replicated_jobs: &[ReplicatedJob],
    ) -> Result<Gang, CompileError> {
        gang::training_operator(ctx, replicated_jobs)
    }

    /// Objects besides the JobSet.
    fn extra_objects(
        _ctx: &Context<'_, Self::Job>,
        _options: &Options<'_>,
    ) -> Result<Extra, CompileError> {
        Ok(Extra::default())
    }
}

/// A training job that compiles into a JobSet.
pub trait Compile {
    /// The framework label of v1's metrics: `tensorflow`, `pytorch`, ...
    const FRAMEWORK: &'static str;
    /// Every value of `training.kubeflow.org/operator-name` the kind's pods may carry.
    const OPERATOR_NAMES: &'static [&'static str];
    /// Whether compiling may need [`Options::ssh_key`] (MPIJob).
    const NEEDS_SSH_KEY: bool;
    /// Whether the status publishes each replica type's label selector.
    const REPLICA_SELECTOR: bool;

    /// The value of `training.kubeflow.org/operator-name` on this job's pods.
    fn operator_name(&self) -> &'static str;
    /// Whether a failure's reason names its cause.
    fn detailed_failure_reason(&self) -> bool;
    /// The replicated job whose pods this job's launcher execs into (MPIJob `kubeflow.org/v1`),
    /// so that its Role names them.
    fn exec_targets(&self) -> Option<&'static str> {
        None
    }
    /// Whether compiling this job needs [`Options::ssh_key`]: an MPIJob of the API that runs
    /// over SSH does, one that runs over `kubectl exec` does not.
    fn needs_ssh_key(&self) -> bool {
        Self::NEEDS_SSH_KEY
    }
    /// Whether the operator this job's API comes from runs its launcher as a Job of its own,
    /// `<name>-launcher` (mpi-operator), which a job trainset takes over may still have.
    fn launcher_job_before(&self) -> bool {
        false
    }
    fn compile(&self, options: &Options<'_>) -> Result<Compiled, CompileError>;
}

/// Implements [`Compile`] for a kind from its framework, in the framework's file:
/// `compiles_with!(PaddleJob, Paddle)`. A concrete impl, not a blanket one over a trait, so each
/// kind's compiler is generated once, here in the core, and the shell calls it rather than
/// generating its own copy.
macro_rules! compiles_with {
    ($job:ty, $framework:ty) => {
        impl $crate::compile::v1::Compile for $job {
            const FRAMEWORK: &'static str =
                <$framework as $crate::compile::v1::Framework>::FRAMEWORK;
            const OPERATOR_NAMES: &'static [&'static str] =
                &[<$framework as $crate::compile::v1::Framework>::OPERATOR_NAME];
            const NEEDS_SSH_KEY: bool =
                <$framework as $crate::compile::v1::Framework>::NEEDS_SSH_KEY;
            const REPLICA_SELECTOR: bool =
                <$framework as $crate::compile::v1::Framework>::REPLICA_SELECTOR;

            fn operator_name(&self) -> &'static str {
                <$framework as $crate::compile::v1::Framework>::OPERATOR_NAME
            }

            fn detailed_failure_reason(&self) -> bool {
                <$framework as $crate::compile::v1::Framework>::DETAILED_FAILURE_REASON
            }

            fn compile(
                &self,
                options: &$crate::compile::Options<'_>,
            ) -> Result<$crate::compile::Compiled, $crate::compile::CompileError> {
                $crate::compile::v1::compile::<$framework>(self, options)
            }
        }
    };
}
use compiles_with;

/// Kueue names a LocalQueue by the queue-name label and refuses, on the JobSet, one that is not
/// a DNS subdomain (`team_a` is a valid label value but no queue name): refused here instead,
/// naming the label, so the job fails at once rather than never getting its JobSet.
fn queue_name(labels: &BTreeMap<String, String>) -> Result<(), CompileError> {
    let Some(queue) = labels.get(keys::kueue::QUEUE_NAME) else {
        return Ok(());
    };
    let label = |part: &str| {
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        edge(part.chars().next())
            && edge(part.chars().last())
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if queue.len() <= 253 && queue.split('.').all(label) {
        return Ok(());
    }
    Err(CompileError::invalid(
        format!("metadata.labels[{}]", keys::kueue::QUEUE_NAME),
        format!(
            "Invalid value: {queue:?}: a LocalQueue name must be a lowercase RFC 1123 subdomain \
             (lower case letters, digits, '-' and '.', starting and ending with a letter or digit)"
        ),
    ))
}

pub(crate) fn compile<F: Framework>(
    job: &F::Job,
    options: &Options<'_>,
) -> Result<Compiled, CompileError> {
    let ctx = context::<F>(job, options);
    bounds::names(ctx.name(), ctx.namespace())?;
    bounds::replicas::<F::Job>(ctx.groups.iter().map(|g| (g.replica_type, g.replicas)))?;
    let success = F::success(&ctx);
    let mut replicated_jobs: Vec<_> = ctx
        .groups
        .iter()
        .map(|group| replicated_job::<F>(&ctx, group, &success))
        .collect();
    let gang_objects = match options.gang_scheduler.and_then(GangScheduler::route) {
        Some(route) => {
            let gang = F::gang(&ctx, &replicated_jobs)?;
            gang.check(&format!("{}.minAvailable", gang::POLICY), route.as_ref())?;
            crate::compile::gang::join(route.as_ref(), gang, &mut replicated_jobs, &ctx.owner)?
        }
        None => Vec::new(),
    };
    let Extra {
        config_map,
        secret,
        launcher_access,
    } = F::extra_objects(&ctx, options)?;

    let labels = job.labels();
    queue_name(labels)?;
    let mut jobset_labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
    for key in [keys::kueue::QUEUE_NAME, keys::kueue::PRIORITY_CLASS] {
        if let Some(value) = labels.get(key) {
            jobset_labels.insert(key.to_owned(), value.clone());
        }
    }
    // Kueue admits a queued JobSet by unsuspending it, so it is created suspended.
    let queued = labels.contains_key(keys::kueue::QUEUE_NAME);
    let suspended = job.run_policy().and_then(|p| p.suspend).unwrap_or(false);

    let jobset = JobSet {
        metadata: ctx.owner.object_meta(ctx.name().to_owned(), jobset_labels),
        spec: JobSetSpec {
            replicated_jobs,
            network: Some(if F::DNS_HOSTNAMES {
                Network {
                    enable_dns_hostnames: Some(true),
                    subdomain: Some(ctx.name().to_owned()),
                    publish_not_ready_addresses: Some(true),
                }
            } else {
                // JobSet's default is on: no Service, and the pods keep their own hostnames.
                Network {
                    enable_dns_hostnames: Some(false),
                    ..Default::default()
                }
            }),
            success_policy: Some(SuccessPolicy {
                operator: Operator::All,
                target_replicated_jobs: success.targets,
            }),
            failure_policy: Some(failure_policy(&ctx.groups)),
            startup_policy: Some(StartupPolicy {
                startup_policy_order: StartupPolicyOrder::AnyOrder,
            }),
            suspend: Some(suspended || queued),
            ..Default::default()
        },
        status: None,
    };
    let compiled = Compiled {
        jobset,
        config_map,
        secret,
        launcher_access,
        gang: gang_objects,
        autoscaler: crate::autoscaler::desired(job, ctx.namespace().to_owned()),
    };
    bounds::object_sizes(&compiled)?;
    Ok(compiled)
}

fn context<'a, F: Framework>(job: &'a F::Job, options: &Options<'_>) -> Context<'a, F::Job> {
    let namespace = job
        .meta()
        .namespace
        .clone()
        .or_else(|| options.default_namespace.map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    let owner = Owner::of(job, namespace);
    let groups = F::order(job)
        .iter()
        .filter_map(|replica_type| {
            let (_, spec) = job
                .replica_specs()
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(replica_type))?;
            Some(Group {
                replica_type,
                name: replica_type.to_ascii_lowercase(),
                spec,
                replicas: spec.replicas_or(F::default_replicas(replica_type)),
                layout: F::layout(job, replica_type),
                restart_policy: spec
                    .restart_policy
                    .unwrap_or_else(|| F::default_restart_policy(replica_type)),
                port: F::PORT.map(|(name, number)| {
                    named_port(spec, F::Job::DEFAULT_CONTAINER, name).unwrap_or(number)
                }),
            })
        })
        .collect();
    Context {
        job,
        owner,
        groups,
        cluster_domain: options.cluster_domain.map(str::to_owned),
        kubectl_delivery_image: options.kubectl_delivery_image.map(str::to_owned),
    }
}
