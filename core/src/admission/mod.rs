//! What the apiserver checks when a training job is created, done offline from the very CRDs
//! trainset installs (`crate::crds`): the structural schema (types, required fields, enums,
//! bounds, patterns, lengths, unknown fields) and every CEL rule, evaluated with the `cel` crate
//! plus the Kubernetes CEL functions the rules use. `trainset render` and the controller both
//! run it, so each validation rule is written once, in the CRD, and enforced the same way by the
//! apiserver and by trainset.

mod expressions;
mod schema;
mod walk;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use expressions::cel_env;
use schema::Node;
use walk::{Path, Walk};

use crate::crds;

/// At most this many errors are reported for one object, as the apiserver caps its list too.
const MAX_ERRORS: usize = 20;
/// Values nested deeper than this are not handed to CEL (no rule reads that deep); it bounds the
/// recursion on input that only the schema walk has seen.
const MAX_CEL_DEPTH: usize = 64;

/// One reason an object is refused: the field at fault, written as the apiserver writes it
/// (`spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image`), and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    #[error(
        "apiVersion/kind: {api_version}/{kind} is not a training kind trainset serves ({})",
        crate::kinds::served()
    )]
    NotServed { api_version: String, kind: String },
    #[error("building the validators from the CRDs: {0}")]
    Crds(String),
}

/// Checks `object` as the apiserver would on create, with strict field validation (what
/// `kubectl apply` asks for): every error, up to [`MAX_ERRORS`].
pub fn admit(object: &Value) -> Result<(), AdmissionError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let not_served = || AdmissionError::NotServed {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    };
    let schemas = validator(kind)
        .ok_or_else(not_served)?
        .map_err(AdmissionError::Crds)?;
    let schema = schemas.get(api_version).ok_or_else(not_served)?;
    let mut walk = Walk::default();
    walk.check(object, schema, &Path::default(), true);
    walk.evaluate_rules();
    if walk.errors.is_empty() {
        Ok(())
    } else {
        Err(AdmissionError::Invalid(walk.errors))
    }
}

/// A kind's schema per served apiVersion.
type Schemas = HashMap<String, Node>;

/// The kind's schemas, built from its CRD on first use and kept for the process; `None` when
/// trainset does not serve the kind.
fn validator(kind: &str) -> Option<Result<Arc<Schemas>, String>> {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<Schemas>>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    if let Some(schemas) = built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(kind)
    {
        return Some(Ok(schemas.clone()));
    }
    let crd = match crds::of_kind(kind)? {
        Ok(crd) => crd,
        Err(error) => return Some(Err(error.to_string())),
    };
    let schemas = match schemas(&crd) {
        Ok(schemas) => Arc::new(schemas),
        Err(error) => return Some(Err(error.to_string())),
    };
    built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(kind.to_owned(), schemas.clone());
    Some(Ok(schemas))
}

#[derive(Debug, thiserror::Error)]
enum BuildError {
    #[error("{crd}: {source}")]
    Json {
        crd: String,
        source: serde_json::Error,
    },
    #[error("{crd}: pattern {pattern:?}: {source}")]
    Pattern {
        crd: String,
        pattern: String,
        source: Box<regex::Error>,
    },
    #[error("{crd}: rule {rule:?}: {message}")]
    Rule {
        crd: String,
        rule: String,
        message: String,
    },
}

fn schemas(crd: &CustomResourceDefinition) -> Result<Schemas, BuildError> {
    let env = cel_env();
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut schemas = HashMap::new();
    for version in &crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        else {
            continue;
        };
        let schema = serde_json::to_value(schema).map_err(|source| BuildError::Json {
            crd: name.clone(),
            source,
        })?;
        let api_version = format!("{}/{}", crd.spec.group, version.name);
        schemas.insert(api_version, Node::build(&schema, &name, &env)?);
    }
    Ok(schemas)
}
