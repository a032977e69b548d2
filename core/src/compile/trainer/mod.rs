//! Compiles a TrainJob and the runtime it names into one JobSet, as Trainer v2.3.0 builds it:
//! the runtime's JobSet template with the TrainJob's runtime
//! patches merged in order, `resourcesPerNode` merged into the trainer's `node` container, the
//! node count, the ML policy's env and port (one file per policy behind [`MlPolicy`]), the
//! initializers' and the trainer's settings, suspension and ownership; for MPI runtimes also the
//! hostfile ConfigMap and the SSH Secret; torchtune's `tune run` command. Pure, like the v1
//! compiler. Not yet: the Flux policy.

mod initializers;
mod jax;
mod merge;
mod mpi;
mod patch;
mod plain;
mod procs;
mod resources;
pub mod snapshot;
mod torch;
mod torchtune;
mod xgboost;

use std::collections::BTreeMap;

use jobset_types::{JobSet, JobSetSpec, ReplicatedJob};
use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::meta::{MANAGED_BY, Owner, TRAINSET};
use super::ssh::{SshKeyPair, ssh_auth_secret};
use super::{CompileError, Compiled};
use crate::api::trainer::{GROUP, MLPolicy, TrainJob, Trainer, TrainingRuntimeSpec};
use initializers::{build_initializer, check_initializers};
use patch::{Patched, patched};
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

/// What a policy knows of the trainer's nodes.
pub struct Node<'a> {
    job: &'a str,
    /// The runtime's name (torchtune reads the model from it).
    pub runtime: &'a str,
    /// Pods of the trainer's replicated job.
    pub count: i32,
    pub trainer: Option<&'a Trainer>,
    /// GPUs and CPUs (rounded up) per node, from the `node` container's merged resources.
    pub gpus: i64,
    pub cpus: i64,
}

impl Node<'_> {
    /// `<job>-node-0-0.<job>`: the first node's address, where rendezvous happens.
    pub fn first_host(&self) -> String {
        format!("{0}-{NODE}-0-0.{0}", self.job)
    }
}

/// What an ML policy adds to the trainer's `node` container, and to other containers.
trait MlPolicy {
    /// Env names `spec.trainer.env` may not set.
    fn reserved(&self) -> &'static [&'static str];
    fn port(&self) -> Option<i32>;
    fn env(&self, node: &Node<'_>) -> Vec<EnvVar>;

    /// The trainer's command when the policy writes it (torchtune's `tune run`), given the
    /// runtime's `node` command; `None` leaves `spec.trainer.command` (or the runtime's) as is.
    fn command(
        &self,
        _node: &Node<'_>,
        _runtime_command: &[String],
    ) -> Result<Option<Vec<String>>, CompileError> {
        Ok(None)
    }

    /// What the policy adds to containers other than the trainer's (torch's `envInjection`).
    fn inject(&self, _spec: &mut JobSetSpec, _node: &Node<'_>) -> Result<(), CompileError> {
        Ok(())
    }
}

fn policy(spec: &TrainingRuntimeSpec) -> Result<Box<dyn MlPolicy + '_>, CompileError> {
    let Some(ml) = &spec.ml_policy else {
        return Ok(Box::new(plain::Plain));
    };
    let unsupported = |policy: &str| {
        CompileError::invalid(
            "spec.runtimeRef",
            format!("the runtime's mlPolicy.{policy} is not supported by trainset yet"),
        )
    };
    if let Some(source) = &ml.mpi {
        return Ok(Box::new(mpi::Mpi::new(source)?));
    }
    if ml.flux.is_some() {
        return Err(unsupported("flux"));
    }
    Ok(if let Some(source) = &ml.torch {
        Box::new(torch::Torch { source })
    } else if ml.jax.is_some() {
        Box::new(jax::Jax)
    } else if ml.xgboost.is_some() {
        Box::new(xgboost::XGBoost)
    } else {
        Box::new(plain::Plain)
    })
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

/// Whether the runtime's pods reach each other by SSH (an MPI runtime): compiling then makes the
/// SSH Secret from a key pair.
pub fn uses_ssh(runtime: &TrainingRuntimeSpec) -> bool {
    runtime.ml_policy.as_ref().is_some_and(|m| m.mpi.is_some())
}

/// The SSH Secret's name for the TrainJob `job`.
pub fn ssh_auth_name(job: &str) -> String {
    mpi::ssh_auth_name(job)
}

/// The TrainJob's JobSet, and for an MPI runtime its hostfile ConfigMap `<trainjob>-mpi-hostfile`
/// and, given `ssh_key`, its SSH Secret `<trainjob>-mpi-ssh-auth` (the controller gives a key
/// only while that immutable Secret does not exist).
pub fn compile_trainjob(
    job: &TrainJob,
    runtime: &Runtime<'_>,
    ssh_key: Option<&SshKeyPair>,
) -> Result<Compiled, CompileError> {
    let name = job.name_any();
    let policy = policy(runtime.spec)?;
    let trainer = job.spec.trainer.as_ref();
    if let Some(trainer) = trainer {
        for (i, var) in trainer.env.iter().enumerate() {
            if policy.reserved().contains(&var.name.as_str()) {
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
    }
    let Patched {
        mut spec,
        mut labels,
        annotations,
    } = patched(job, runtime)?;
    labels.insert(MANAGED_BY.to_owned(), TRAINSET.to_owned());
    check_initializers(job, &spec)?;
    let ml = runtime.spec.ml_policy.as_ref();
    let mpi = ml
        .and_then(|m| m.mpi.as_ref())
        .map(mpi::Mpi::new)
        .transpose()?;
    let num_nodes = trainer.and_then(|t| t.num_nodes);
    let resources = match trainer {
        Some(trainer) => merged_resources(trainer_resources(&spec), trainer)?,
        None => trainer_resources(&spec).cloned(),
    };
    let (gpus, cpus) = devices(resources.as_ref());
    let facts = Node {
        job: &name,
        runtime: runtime.name,
        count: spec
            .replicated_jobs
            .iter()
            .find(|r| step(r) == Some(TRAINER_STEP))
            .map_or(1, |r| pod_count(r, num_nodes, ml, mpi.as_ref())),
        trainer,
        gpus,
        cpus,
    };
    let slots = match &mpi {
        Some(mpi) => {
            let slots = mpi.slots(trainer.and_then(|t| t.num_proc_per_node), gpus);
            mpi.attach(&mut spec, &name, slots);
            slots
        }
        None => 0,
    };

    for replicated in &mut spec.replicated_jobs {
        let count = pod_count(replicated, num_nodes, ml, mpi.as_ref());
        let ancestor = step(replicated).map(str::to_owned);
        let is_node = replicated.name == NODE;
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
                if let Some(node) = container(replicated, NODE) {
                    build_trainer(node, ml.is_some(), policy.as_ref(), &facts)?;
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
            // With `runLauncherAsNode` the `node` pods are trainers too: the trainer's
            // resources and env reach them (kubeflow/trainer#3602).
            _ if is_node && mpi.as_ref().is_some_and(|m| m.launcher_is_node()) => {
                if let (Some(trainer), Some(node)) = (trainer, container(replicated, NODE)) {
                    node.resources = merged_resources(node.resources.as_ref(), trainer)?;
                    upsert(node, &trainer.env);
                }
            }
            _ => {}
        }
    }
    policy.inject(&mut spec, &facts)?;
    spec.suspend = job.spec.suspend;
    super::bounds::pod_names(
        &name,
        spec.replicated_jobs.iter().map(|r| {
            let pods = r.template.spec.as_ref().and_then(|s| s.parallelism);
            (r.name.as_str(), r.replicas.unwrap_or(1), pods.unwrap_or(1))
        }),
    )?;

    let owner = Owner {
        api_version: TrainJob::api_version(&()).into_owned(),
        kind: TrainJob::kind(&()).into_owned(),
        name: name.clone(),
        namespace: job.namespace().unwrap_or_default(),
        uid: job.uid(),
    };
    let hostfile = mpi
        .as_ref()
        .map(|mpi| mpi.hostfile(&spec, &owner, slots))
        .transpose()?;
    let ssh_auth = ssh_key.filter(|_| mpi.is_some()).map(|key| {
        let labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
        ssh_auth_secret(owner.object_meta(ssh_auth_name(&name), labels), key)
    });
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
        config_map: hostfile,
        secret: ssh_auth,
    })
}

/// Pods of a replicated job: the trainer's from `numNodes` (the TrainJob's, else the runtime's;
/// with MPI the runtime's alone, as the nodes are the `node` job's), MPI's `node` job's from
/// the policy, any other's its own parallelism. The admission policy of `crate::trainjob_names`
/// counts the same way in CEL.
fn pod_count(
    replicated: &ReplicatedJob,
    num_nodes: Option<i32>,
    ml: Option<&MLPolicy>,
    mpi: Option<&mpi::Mpi<'_>>,
) -> i32 {
    let parallelism = replicated
        .template
        .spec
        .as_ref()
        .and_then(|s| s.parallelism)
        .unwrap_or(1);
    let runtime_nodes = ml.and_then(|m| m.num_nodes);
    match (step(replicated), mpi) {
        (Some(TRAINER_STEP), Some(_)) => runtime_nodes.unwrap_or(1),
        (Some(TRAINER_STEP), None) => num_nodes
            .or(ml.map(|_| runtime_nodes.unwrap_or(1)))
            .unwrap_or(parallelism),
        (_, Some(mpi)) if replicated.name == NODE => {
            mpi.node_count(num_nodes).unwrap_or(parallelism)
        }
        _ => parallelism,
    }
    .max(1)
}
