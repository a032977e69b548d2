//! The v1 family: what a job compiles to (each rule, and its pods as the kubelet would run them),
//! the per-pod labels, its status and suspension.

mod compile;
mod gang;
mod mpi;
mod pod_labels;
mod pods;
mod status;
mod suspend;
