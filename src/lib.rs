//! trainset: serves the Kubeflow training APIs and runs every training job as one JobSet. The
//! pure core (`trainset-core`) is re-exported under its own module names; this crate is the
//! shell around it: the controller, leader election, telemetry and `trainset render`.

pub use trainset_core::{
    admission, api, api_version, autoscaler, compile, crds, kinds, plan, pod_labels, quantity,
    run_policy, shipped_policy, status, suspend, trainjob_names,
};

pub mod controller;
pub mod leader;
pub mod render;
pub mod telemetry;
