//! The runtime's ML policy, behind one trait whose methods are the extension points of Trainer
//! v2.3.0's runtime framework, called in its order: validate, node count, env, pod spec, build.
//! Each point has a default that adds nothing, so a policy's file holds only what it adds, and
//! the driver in [`super`] names no framework ([`super::policies`] lists them).

use jobset_types::{JobSetSpec, ReplicatedJob};
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, Secret};

use super::NODE;
use crate::api::trainer::Trainer;
use crate::compile::CompileError;
use crate::compile::meta::Owner;
use crate::compile::ssh::SshKeyPair;

/// What a policy knows of the trainer's nodes.
pub struct Node<'a> {
    pub(super) job: &'a str,
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

/// The node counts a policy may read: the TrainJob's `trainer.numNodes` and the runtime's
/// `mlPolicy.numNodes`.
pub struct NodeCounts {
    pub requested: Option<i32>,
    pub runtime: Option<i32>,
}

/// Objects a policy builds beside the JobSet.
#[derive(Default)]
pub struct Beside {
    pub config_map: Option<ConfigMap>,
    pub secret: Option<Secret>,
}

/// One ML policy, at each extension point in the order the driver calls them.
pub trait MlPolicy {
    /// Validate: env names `spec.trainer.env` may not set.
    fn reserved(&self) -> &'static [&'static str] {
        &[]
    }

    /// Node count: the pods of `replicated` when the policy decides them; `None` leaves the
    /// driver's count.
    fn pod_count(&self, _replicated: &ReplicatedJob, _counts: &NodeCounts) -> Option<i32> {
        None
    }

    /// Env: the port the trainer's `node` container opens.
    fn port(&self) -> Option<i32> {
        None
    }

    /// Env: the variables of the trainer's `node` container.
    fn env(&self, _node: &Node<'_>) -> Vec<EnvVar> {
        Vec::new()
    }

    /// Env: the trainer's command when the policy writes it (torchtune's `tune run`), given the
    /// runtime's `node` command; `None` leaves `spec.trainer.command` (or the runtime's) as is.
    fn command(
        &self,
        _node: &Node<'_>,
        _runtime_command: &[String],
    ) -> Result<Option<Vec<String>>, CompileError> {
        Ok(None)
    }

    /// Pod spec: what the policy sets in pods beyond the trainer's container (torch's
    /// `envInjection`, MPI's key and hostfile volumes). Called before the trainer's container
    /// is built, so what the TrainJob sets there comes last.
    fn pod_spec(&self, _spec: &mut JobSetSpec, _node: &Node<'_>) -> Result<(), CompileError> {
        Ok(())
    }

    /// Build: the name of the immutable SSH Secret the policy builds from a key pair, if any; the
    /// controller makes a key only while that Secret does not exist.
    fn ssh_secret(&self, _job: &str) -> Option<String> {
        None
    }

    /// Build: the objects beside the JobSet, from its finished spec.
    fn build(
        &self,
        _spec: &JobSetSpec,
        _owner: &Owner,
        _node: &Node<'_>,
        _ssh_key: Option<&SshKeyPair>,
    ) -> Result<Beside, CompileError> {
        Ok(Beside::default())
    }
}
