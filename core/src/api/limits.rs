//! The bounds of every number trainset expands into per-replica data. Each is written once here;
//! the CRD schema carries it (`maximum`, or a CEL rule) so the apiserver refuses a job beyond it,
//! and `compile` checks it again before allocating anything in proportion to it.
//!
//! Chosen from what the parts below can carry: an Indexed Job runs at most 100,000 pods, a
//! JobSet's Jobs are created one per replica, and every replica address in `TF_CONFIG`,
//! `WORKER_ADDRS` or an MPI hostfile costs about 50 bytes of an object etcd stores whole (1.5 MiB
//! by default). A job within these bounds whose compiled objects are still too large fails with
//! `InvalidSpec` (see `MAX_OBJECT_BYTES` in `compile`).

/// Pods of one replica type.
pub const MAX_REPLICAS: i32 = 10_000;
/// Pods of all replica types of one job together.
pub const MAX_TOTAL_REPLICAS: i32 = 20_000;
/// Processes per node (`nprocPerNode`, `elasticPolicy.nProcPerNode`).
pub const MAX_PROCS_PER_NODE: i32 = 1_024;
/// MPI slots per worker.
pub const MAX_SLOTS_PER_WORKER: i32 = 1_024;
/// Characters of `nprocPerNode`: enough for `auto` and for every number up to the maximum, and
/// few enough that the apiserver's `int()` of it cannot overflow.
pub const MAX_PROCS_PER_NODE_CHARS: u32 = 4;
