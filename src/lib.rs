//! trainset: serves the Kubeflow training APIs and runs every training job as one JobSet.

pub mod api;
pub mod crds;
