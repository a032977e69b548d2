//! `mlPolicy.torch`: torchrun's `PET_*` variables and the rendezvous port, on the trainer's
//! `node` container and on the runtime's `envInjection` targets; torchtune's `tune run` command
//! ([`super::torchtune`]).

use jobset_types::JobSetSpec;
use k8s_openapi::api::core::v1::{Container, EnvVar};

use super::policy::{MlPolicy, Node};
use super::procs::procs_per_node;
use super::{PORT, torchtune, upsert};
use crate::api::trainer::TorchMLPolicySource;
use crate::compile::{CompileError, env};

pub struct Torch<'a> {
    pub source: &'a TorchMLPolicySource,
}

const NUM_NODES: &str = "PET_NNODES";
const PROCS_PER_NODE: &str = "PET_NPROC_PER_NODE";
const NODE_RANK: &str = "PET_NODE_RANK";
const MASTER_ADDR: &str = "PET_MASTER_ADDR";
const MASTER_PORT: &str = "PET_MASTER_PORT";
const RESERVED: &[&str] = &[
    NUM_NODES,
    PROCS_PER_NODE,
    NODE_RANK,
    MASTER_ADDR,
    MASTER_PORT,
];

/// The variables every process gets; the master's address and port only where rendezvous is
/// torchrun's (torchtune gets `--rdzv_endpoint` instead).
fn pet_env(node: &Node<'_>, with_master: bool) -> Vec<EnvVar> {
    let mut vars = vec![
        env::value(NUM_NODES, node.count.to_string()),
        env::value(PROCS_PER_NODE, procs_per_node(node).to_string()),
        env::field(NODE_RANK, env::COMPLETION_INDEX_PATH),
    ];
    if with_master {
        vars.push(env::value(MASTER_ADDR, node.first_host()));
        vars.push(env::value(MASTER_PORT, PORT.to_string()));
    }
    vars
}

impl MlPolicy for Torch<'_> {
    fn reserved(&self) -> &'static [&'static str] {
        RESERVED
    }

    fn port(&self) -> Option<i32> {
        Some(PORT)
    }

    fn env(&self, node: &Node<'_>) -> Vec<EnvVar> {
        pet_env(node, !torchtune::applies(node.trainer))
    }

    fn command(
        &self,
        node: &Node<'_>,
        runtime_command: &[String],
    ) -> Result<Option<Vec<String>>, CompileError> {
        match node.trainer {
            Some(trainer) if torchtune::applies(Some(trainer)) => {
                torchtune::command(node, trainer, runtime_command).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Each `envInjection` target (a container or init container of a replicated job) gets the
    /// `PET_*` variables, the master's always: sidecars and init containers check or wait for
    /// the rendezvous host whatever the trainer's command.
    fn pod_spec(&self, spec: &mut JobSetSpec, node: &Node<'_>) -> Result<(), CompileError> {
        let Some(injection) = &self.source.env_injection else {
            return Ok(());
        };
        let vars = pet_env(node, true);
        for target in &injection.targets {
            for name in &target.container_names {
                let container = spec
                    .replicated_jobs
                    .iter_mut()
                    .find(|r| r.name == target.job_name)
                    .and_then(|r| r.template.spec.as_mut())
                    .and_then(|s| s.template.spec.as_mut())
                    .and_then(|pod| find_container(&mut pod.containers, &mut pod.init_containers, name))
                    .ok_or_else(|| {
                        CompileError::invalid(
                            "spec.runtimeRef",
                            format!(
                                "the runtime's mlPolicy.torch.envInjection names container {name:?} of replicated job {:?}, which the runtime does not have",
                                target.job_name
                            ),
                        )
                    })?;
                upsert(container, &vars);
            }
        }
        Ok(())
    }
}

/// A container by name, else an init container (Trainer's lookup order).
fn find_container<'a>(
    containers: &'a mut [Container],
    init_containers: &'a mut Option<Vec<Container>>,
    name: &str,
) -> Option<&'a mut Container> {
    match containers.iter_mut().find(|c| c.name == *name) {
        Some(container) => Some(container),
        None => init_containers
            .iter_mut()
            .flatten()
            .find(|c| c.name == *name),
    }
}
