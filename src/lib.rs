//! trainset: serves the Kubeflow training APIs and runs every training job as one JobSet.

pub mod admission;
pub mod api;
pub mod compile;
pub mod controller;
pub mod crds;
pub mod kinds;
pub mod leader;
pub mod pod_labels;
pub mod render;
pub mod status;
pub mod suspend;
pub mod telemetry;
pub mod trainjob_names;
