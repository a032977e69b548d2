//! How many processes each node runs, which torchrun and torchtune's command both take.

use super::policy::Node;

/// Processes per node, as torchrun's `--nproc-per-node` takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Procs {
    /// One per GPU.
    Auto,
    Count(i64),
}

impl std::fmt::Display for Procs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Count(count) => write!(f, "{count}"),
        }
    }
}

/// `numProcPerNode` if set; else `auto` with GPUs, and the CPU count without. trainset reads
/// the merged resources, where Trainer v2.3.0 reads `resourcesPerNode` alone when it is set
/// (kubeflow/trainer#3974: a TrainJob that only raises memory on a GPU runtime got one process
/// per node).
pub fn procs_per_node(node: &Node<'_>) -> Procs {
    match node.trainer.and_then(|t| t.num_proc_per_node) {
        Some(count) => Procs::Count(count.into()),
        None if node.gpus > 0 => Procs::Auto,
        None => Procs::Count(node.cpus.max(1)),
    }
}
