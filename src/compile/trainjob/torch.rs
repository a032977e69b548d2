//! `mlPolicy.torch`: torchrun's `PET_*` variables and the rendezvous port.

use k8s_openapi::api::core::v1::EnvVar;

use super::{MlPolicy, Node, PORT};
use crate::compile::env;

pub struct Torch;

const RESERVED: &[&str] = &[
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
];

impl MlPolicy for Torch {
    fn reserved(&self) -> &'static [&'static str] {
        RESERVED
    }

    fn port(&self) -> Option<i32> {
        Some(PORT)
    }

    /// Processes per node: `numProcPerNode` if set; else `auto` (one per GPU) with GPUs, and the
    /// CPU count without. trainset reads the merged resources, where Trainer v2.3.0 reads
    /// `resourcesPerNode` alone when it is set (kubeflow/trainer#3974: a TrainJob that only raises
    /// memory on a GPU runtime got one process per node).
    fn env(&self, node: &Node<'_>) -> Vec<EnvVar> {
        let per_node = match node.num_proc_per_node {
            Some(count) => count.to_string(),
            None if node.gpus > 0 => "auto".to_owned(),
            None => node.cpus.max(1).to_string(),
        };
        vec![
            env::value("PET_NNODES", node.count.to_string()),
            env::value("PET_NPROC_PER_NODE", per_node),
            env::field("PET_NODE_RANK", env::COMPLETION_INDEX_PATH),
            env::value("PET_MASTER_ADDR", node.first_host()),
            env::value("PET_MASTER_PORT", PORT.to_string()),
        ]
    }
}
