//! The CRDs trainset serves, generated from the Rust types plus their CEL rules.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::api::{
    JAXJob, MPIJob, PaddleJob, PyTorchJob, TFJob, TrainingJob, XGBoostJob, with_rules,
};

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("building the {crd} CRD: {source}")]
    Build {
        crd: &'static str,
        source: serde_json::Error,
    },
    #[error("writing the {name} CRD as YAML: {source}")]
    Yaml {
        name: String,
        source: serde_norway::Error,
    },
}

fn crd<K: TrainingJob>() -> Result<CustomResourceDefinition, CrdError> {
    with_rules::<K>(K::crd()).map_err(|source| CrdError::Build {
        crd: K::crd_name(),
        source,
    })
}

/// The kinds and versions trainset serves, as error messages name them.
pub const SERVED: &str = "TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob at kubeflow.org/v1; MPIJob at kubeflow.org/v2beta1";

type Builder = fn() -> Result<CustomResourceDefinition, CrdError>;

/// Every training kind trainset serves, by kind name, in a fixed order.
const KINDS: [(&str, Builder); 6] = [
    ("TFJob", crd::<TFJob>),
    ("PyTorchJob", crd::<PyTorchJob>),
    ("XGBoostJob", crd::<XGBoostJob>),
    ("PaddleJob", crd::<PaddleJob>),
    ("JAXJob", crd::<JAXJob>),
    ("MPIJob", crd::<MPIJob>),
];

/// All six CRDs, in a fixed order.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    KINDS.iter().map(|(_, build)| build()).collect()
}

/// The CRD of one kind, or `None` when trainset does not serve it.
pub fn of_kind(kind: &str) -> Option<Result<CustomResourceDefinition, CrdError>> {
    KINDS
        .iter()
        .find(|(name, _)| *name == kind)
        .map(|(_, build)| build())
}

/// The file a CRD is committed as under `crds/`: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// One CRD as a YAML document (without the `---` separator).
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    serde_norway::to_string(crd).map_err(|source| CrdError::Yaml { name, source })
}
