//! trainset's pure core: the APIs it serves, what the apiserver and trainset check of them, the
//! compiler from a training job to its JobSet, status from what the JobSet reports, and the plan
//! of each reconcile. Nothing here takes a client or does I/O: the shell (`trainset`) fetches,
//! calls these functions, and writes what they decide.

pub mod admission;
pub mod api;
pub mod api_version;
pub mod autoscaler;
pub mod compile;
pub mod crds;
pub mod decode;
pub mod kinds;
pub mod plan;
pub mod pod_labels;
pub mod quantity;
pub mod resize;
pub mod run_policy;
pub mod shipped_policy;
pub mod status;
pub mod suspend;
pub mod trainjob_names;
