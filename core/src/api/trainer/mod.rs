//! Kubeflow Trainer v2's API, `trainer.kubeflow.org/v1alpha1`, field for field as Trainer v2.3.0
//! serves it: TrainJob, and the TrainingRuntime and ClusterTrainingRuntime it names.

mod patch;
mod runtime;
mod trainjob;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use patch::*;
pub use runtime::*;
pub use trainjob::*;

/// The API group of the Trainer v2 kinds.
pub const GROUP: &str = "trainer.kubeflow.org";

/// The metadata a template may carry into the objects made from it (controller-gen's embedded
/// `ObjectMeta`): labels and annotations are what Trainer reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddedMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The CEL rule Trainer puts on every field that may be set at creation only.
fn immutable() -> serde_json::Value {
    serde_json::json!([{"rule": "self == oldSelf", "message": "field is immutable"}])
}
