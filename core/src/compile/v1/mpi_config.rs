//! What both MPIJob APIs share: the job's ConfigMap, where its pods mount it, and the slots
//! each worker's hostfile line offers.

use crate::api::MPIJob;

/// Where both APIs mount the job's ConfigMap in their pods.
pub(super) const CONFIG_MOUNT: &str = "/etc/mpi";
/// The name of that volume in the pod.
pub(super) const CONFIG_VOLUME: &str = "mpi-job-config";

/// The job's ConfigMap (hostfile and scripts): `<name>-config`, as both operators name it.
pub(super) fn config_map_name(job: &str) -> String {
    format!("{job}-config")
}

/// Slots per worker in the hostfile: `slotsPerWorker`, 1 when unset.
pub(super) fn slots(job: &MPIJob) -> i32 {
    job.spec.slots_per_worker.unwrap_or(1)
}
