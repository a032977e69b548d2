//! Compiles a TrainJob and the runtime it names into one JobSet, as Trainer v2.3.0 builds it:
//! the runtime's JobSet template with the TrainJob's runtime patches merged in order, then the
//! ML policy's extension points in Trainer's order (validate, node count, env, pod spec, build;
//! one file per policy behind [`policy::MlPolicy`]), `resourcesPerNode` merged into the
//! trainer's `node` container, the initializers' and the trainer's settings, suspension and
//! ownership, and the gang the runtime's `podGroupPolicy` asks for. Pure, like the v1 compiler.
//! Not yet: the Flux policy.

mod gang;
mod initializers;
mod jax;
mod merge;
mod mpi;
mod patch;
mod plain;
mod policies;
mod policy;
mod procs;
mod resources;
pub mod snapshot;
mod torch;
mod torchtune;
mod xgboost;

use jobset_types::{JobSet, ReplicatedJob};
use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::meta::{MANAGED_BY, Owner, TRAINSET};
use super::ssh::SshKeyPair;
use super::{CompileError, Compiled};
use crate::api::trainer::{GROUP, TrainJob, Trainer, TrainingRuntimeSpec};
use initializers::{build_initializer, check_initializers};
use patch::{Patched, patched};
use policy::{Beside, MlPolicy, Node, NodeCounts};
use resources::{devices, merged_resources, trainer_resources};

/// Binds a replicated job (on its Job template's labels) to a part of the TrainJob.
pub const ANCESTOR_STEP: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
pub const TRAINER_STEP: &str = "trainer";
pub const DATASET_INITIALIZER: &str = "dataset-initializer";
pub const MODEL_INITIALIZER: &str = "model-initializer";
/// The trainer's container, and the replicated job whose first pod is the rendezvous host.
pub const NODE: &str = "node";
/// The rendezvous, coordinator and tracker port of every policy.
pub const PORT: i32 = 29500;

/// The two kinds of runtime a TrainJob may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// `ClusterTrainingRuntime`, the default.
    Cluster,
    /// `TrainingRuntime`, from the TrainJob's own namespace.
    Namespaced,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "ClusterTrainingRuntime",
            Self::Namespaced => "TrainingRuntime",
        }
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The runtime `spec.runtimeRef` names, with the CRD's defaults applied; any other group or kind
/// is Trainer's `TrainingRuntimeNotSupported`.
pub fn runtime_ref(job: &TrainJob) -> Result<(RuntimeKind, &str), CompileError> {
    let reference = &job.spec.runtime_ref;
    let group = reference.api_group.as_deref().unwrap_or(GROUP);
    let kind = match reference.kind.as_deref() {
        None | Some("ClusterTrainingRuntime") if group == GROUP => RuntimeKind::Cluster,
        Some("TrainingRuntime") if group == GROUP => RuntimeKind::Namespaced,
        other => {
            return Err(CompileError::invalid(
                "spec.runtimeRef",
                format!(
                    "unsupported runtime: {}.{group}",
                    other.unwrap_or("ClusterTrainingRuntime")
                ),
            ));
        }
    };
    Ok((kind, reference.name.as_str()))
}

/// The runtime a TrainJob names, as the controller (or `render`) resolved it.
#[derive(Clone, Copy, Debug)]
pub struct Runtime<'a> {
    pub kind: RuntimeKind,
    pub name: &'a str,
    pub spec: &'a TrainingRuntimeSpec,
}

fn malformed(path: &str, error: &serde_json::Error) -> CompileError {
    CompileError::Malformed {
        path: path.to_owned(),
        message: error.to_string(),
    }
}

/// The ancestor step of a replicated job, if it has one.
fn step(job: &ReplicatedJob) -> Option<&str> {
    job.template
        .metadata
        .as_ref()?
        .labels
        .as_ref()?
        .get(ANCESTOR_STEP)
        .map(String::as_str)
}

fn container<'a>(job: &'a mut ReplicatedJob, name: &str) -> Option<&'a mut Container> {
    job.template
        .spec
        .as_mut()?
        .template
        .spec
        .as_mut()?
        .containers
        .iter_mut()
        .find(|c| c.name == name)
}

/// Sets each variable: in place where the container has the name, else appended (v2's rule:
/// injected values win).
fn upsert(container: &mut Container, vars: &[EnvVar]) {
    let env = container.env.get_or_insert_with(Vec::new);
    for var in vars {
        match env.iter_mut().find(|own| own.name == var.name) {
            Some(own) => *own = var.clone(),
            None => env.push(var.clone()),
        }
    }
}

/// The trainer's `node` container: `resourcesPerNode` merged (when the runtime has an ML
/// policy), the policy's env and port (when the TrainJob has a `trainer` section), then the
/// trainer's image, command (or the policy's), args and env.
fn build_trainer(
    node: &mut Container,
    with_policy: bool,
    policy: &dyn MlPolicy,
    facts: &Node<'_>,
) -> Result<(), CompileError> {
    let Some(trainer) = facts.trainer else {
        return Ok(());
    };
    if with_policy {
        node.resources = merged_resources(node.resources.as_ref(), trainer)?;
    }
    upsert(node, &policy.env(facts));
    if let Some(port) = policy.port() {
        let ports = node.ports.get_or_insert_with(Vec::new);
        if !ports.iter().any(|p| p.container_port == port) {
            ports.push(ContainerPort {
                container_port: port,
                ..Default::default()
            });
        }
    }
    if let Some(image) = &trainer.image {
        node.image = Some(image.clone());
    }
    let runtime_command = node.command.as_deref().unwrap_or_default();
    if let Some(command) = policy.command(facts, runtime_command)? {
        node.command = Some(command);
    } else if !trainer.command.is_empty() {
        node.command = Some(trainer.command.clone());
    }
    if !trainer.args.is_empty() {
        node.args = Some(trainer.args.clone());
    }
    upsert(node, &trainer.env);
    Ok(())
}

/// The name of the immutable SSH Secret the runtime's policy builds for the TrainJob `job` (an
/// MPI runtime's `<trainjob>-mpi-ssh-auth`), if any; compiling makes it only when given a key.
pub fn ssh_secret(job: &str, runtime: &TrainingRuntimeSpec) -> Option<String> {
    policies::select(runtime).ok()?.ssh_secret(job)
}

/// The TrainJob's JobSet, and the objects its runtime's policy builds beside it (for MPI the
/// hostfile ConfigMap `<trainjob>-mpi-hostfile` and, given `ssh_key`, the SSH Secret
/// [`ssh_secret`] names; the controller gives a key only while that Secret does not exist).
pub fn compile_trainjob(
    job: &TrainJob,
    runtime: &Runtime<'_>,
    ssh_key: Option<&SshKeyPair>,
) -> Result<Compiled, CompileError> {
    let name = job.name_any();
    let policy = policies::select(runtime.spec)?;
    let trainer = job.spec.trainer.as_ref();
    if let Some(trainer) = trainer {
        validate(trainer, policy.reserved())?;
    }
    let Patched {
        mut spec,
        mut labels,
        annotations,
    } = patched(job, runtime)?;
    labels.insert(MANAGED_BY.to_owned(), TRAINSET.to_owned());
    check_initializers(job, &spec)?;
    let ml = runtime.spec.ml_policy.as_ref();
    let counts = NodeCounts {
        requested: trainer.and_then(|t| t.num_nodes),
        runtime: ml.and_then(|m| m.num_nodes),
    };
    let pod_count = |replicated: &ReplicatedJob| {
        policy
            .pod_count(replicated, &counts)
            .unwrap_or_else(|| default_pod_count(replicated, &counts, ml.is_some()))
            .max(1)
    };
    let resources = match trainer {
        Some(trainer) => merged_resources(trainer_resources(&spec), trainer)?,
        None => trainer_resources(&spec).cloned(),
    };
    let (gpus, cpus) = devices(resources.as_ref());
    let node = Node {
        job: &name,
        runtime: runtime.name,
        count: spec
            .replicated_jobs
            .iter()
            .find(|r| step(r) == Some(TRAINER_STEP))
            .map_or(1, pod_count),
        trainer,
        gpus,
        cpus,
    };
    policy.pod_spec(&mut spec, &node)?;

    for replicated in &mut spec.replicated_jobs {
        let count = pod_count(replicated);
        let ancestor = step(replicated).map(str::to_owned);
        let job_spec = replicated
            .template
            .spec
            .get_or_insert_with(Default::default);
        job_spec.parallelism = Some(count);
        job_spec.completions = Some(count);
        let job_labels = replicated
            .template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default);
        job_labels.insert(MANAGED_BY.to_owned(), TRAINSET.to_owned());

        match ancestor.as_deref() {
            Some(TRAINER_STEP) => {
                replicated.replicas = Some(1);
                if let Some(container) = container(replicated, NODE) {
                    build_trainer(container, ml.is_some(), policy.as_ref(), &node)?;
                }
            }
            Some(step @ (DATASET_INITIALIZER | MODEL_INITIALIZER)) => {
                replicated.replicas = Some(1);
                let initializer = job.spec.initializer.as_ref();
                let source = if step == DATASET_INITIALIZER {
                    initializer.and_then(|i| i.dataset.as_ref())
                } else {
                    initializer.and_then(|i| i.model.as_ref())
                };
                let step = step.to_owned();
                if let (Some(source), Some(container)) = (source, container(replicated, &step)) {
                    build_initializer(container, source);
                }
            }
            _ => {}
        }
    }
    spec.suspend = job.spec.suspend;
    super::bounds::pod_names(
        &name,
        spec.replicated_jobs.iter().map(|r| {
            let pods = r.template.spec.as_ref().and_then(|s| s.parallelism);
            (r.name.as_str(), r.replicas.unwrap_or(1), pods.unwrap_or(1))
        }),
    )?;

    let owner = Owner::of(job, job.namespace().unwrap_or_default());
    let gang = match gang::gang(&name, runtime, &spec, &annotations)? {
        Some((scheduler, gang)) => match scheduler.route() {
            Some(route) => {
                crate::compile::gang::join(route.as_ref(), gang, &mut spec.replicated_jobs, &owner)?
            }
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let Beside { config_map, secret } = policy.build(&spec, &owner, &node, ssh_key)?;
    let jobset = JobSet {
        metadata: ObjectMeta {
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..owner.object_meta(name, labels)
        },
        spec,
        status: None,
    };
    Ok(Compiled {
        jobset,
        config_map,
        secret,
        launcher_access: None,
        gang,
        autoscaler: None,
    })
}

/// The TrainJob's own trainer settings, before anything is built: no variable the policy sets,
/// and at least one node and process per node.
fn validate(trainer: &Trainer, reserved: &[&str]) -> Result<(), CompileError> {
    for (i, var) in trainer.env.iter().enumerate() {
        if reserved.contains(&var.name.as_str()) {
            return Err(CompileError::invalid(
                format!("spec.trainer.env[{i}].name"),
                format!("{} is set by the runtime's ML policy", var.name),
            ));
        }
    }
    for (field, value) in [
        ("numNodes", trainer.num_nodes),
        ("numProcPerNode", trainer.num_proc_per_node),
    ] {
        if value.is_some_and(|v| v < 1) {
            return Err(CompileError::invalid(
                format!("spec.trainer.{field}"),
                "must be at least 1",
            ));
        }
    }
    Ok(())
}

/// Pods of a replicated job where the policy does not decide them: the trainer's from
/// `numNodes` (the TrainJob's, else the runtime's when it has an ML policy), any other's its own
/// parallelism. The admission policy of `crate::trainjob_names` counts the same way in CEL.
fn default_pod_count(replicated: &ReplicatedJob, counts: &NodeCounts, with_policy: bool) -> i32 {
    let parallelism = replicated
        .template
        .spec
        .as_ref()
        .and_then(|s| s.parallelism)
        .unwrap_or(1);
    match step(replicated) {
        Some(TRAINER_STEP) => counts
            .requested
            .or(with_policy.then(|| counts.runtime.unwrap_or(1)))
            .unwrap_or(parallelism),
        _ => parallelism,
    }
}
