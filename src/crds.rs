//! The CRDs trainset serves, generated from the Rust types plus their CEL rules.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::api::{TrainingJob, with_rules};
use crate::kinds::{Served, Visitor, visit_all};

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

/// Builds the CRD of every served kind, or of the one named `only`.
struct Build {
    only: Option<String>,
    crds: Vec<Result<CustomResourceDefinition, CrdError>>,
}

impl Visitor for Build {
    fn visit<K: Served>(&mut self) {
        if self.only.as_deref().is_none_or(|kind| kind == K::kind(&())) {
            self.crds.push(crd::<K>());
        }
    }
}

/// All six CRDs, in a fixed order.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let mut build = Build {
        only: None,
        crds: Vec::new(),
    };
    visit_all(&mut build);
    build.crds.into_iter().collect()
}

/// The CRD of one kind, or `None` when trainset does not serve it.
pub fn of_kind(kind: &str) -> Option<Result<CustomResourceDefinition, CrdError>> {
    let mut build = Build {
        only: Some(kind.to_owned()),
        crds: Vec::new(),
    };
    visit_all(&mut build);
    build.crds.pop()
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
