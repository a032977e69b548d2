//! Every training kind trainset serves, listed once. The CRDs, `render` and the controller visit
//! this list, so adding a kind touches only [`visit_all`]; a manifest of any of them compiles
//! through [`compile_manifest`].

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{JAXJob, MPIJob, PaddleJob, PyTorchJob, TFJob, TrainingJob, XGBoostJob};
use serde_json::Value;

use crate::compile::v1::Compile;
use crate::compile::{CompileError, Compiled, Options, parse};

/// A training kind trainset serves: its API, its compiler and what the controller needs of it.
pub trait Served:
    TrainingJob
    + Compile
    + Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Served for K where
    K: TrainingJob
        + Compile
        + Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Something done once per served kind.
pub trait Visitor {
    fn visit<K: Served>(&mut self);
}

/// Visits every served kind, in a fixed order.
pub fn visit_all(visitor: &mut impl Visitor) {
    visitor.visit::<TFJob>();
    visitor.visit::<PyTorchJob>();
    visitor.visit::<XGBoostJob>();
    visitor.visit::<PaddleJob>();
    visitor.visit::<JAXJob>();
    visitor.visit::<MPIJob>();
}

/// The served kinds and versions as error messages name them:
/// `TFJob, PyTorchJob, ... at kubeflow.org/v1; MPIJob at kubeflow.org/v2beta1`.
pub fn served() -> String {
    struct Names(Vec<(String, Vec<String>)>);
    impl Visitor for Names {
        fn visit<K: Served>(&mut self) {
            let version = K::api_version(&()).into_owned();
            let kind = K::kind(&()).into_owned();
            match self.0.last_mut() {
                Some((last, kinds)) if *last == version => kinds.push(kind),
                _ => self.0.push((version, vec![kind])),
            }
        }
    }
    let mut names = Names(Vec::new());
    visit_all(&mut names);
    let groups: Vec<String> = names
        .0
        .iter()
        .map(|(version, kinds)| format!("{} at {version}", kinds.join(", ")))
        .collect();
    groups.join("; ")
}

/// Compiles a manifest of any training kind, read as JSON.
pub fn compile_manifest(manifest: Value, options: &Options<'_>) -> Result<Compiled, CompileError> {
    struct ByKind<'a> {
        manifest: Option<Value>,
        options: &'a Options<'a>,
        compiled: Option<Result<Compiled, CompileError>>,
    }
    impl Visitor for ByKind<'_> {
        fn visit<K: Served>(&mut self) {
            let is_kind = self.manifest.as_ref().is_some_and(|m| {
                m["apiVersion"] == K::api_version(&()).as_ref()
                    && m["kind"] == K::kind(&()).as_ref()
            });
            if let Some(manifest) = self.manifest.take_if(|_| is_kind) {
                self.compiled =
                    Some(parse::<K>(manifest).and_then(|job| job.compile(self.options)));
            }
        }
    }
    let kind = format!(
        "{}/{}",
        manifest["apiVersion"].as_str().unwrap_or_default(),
        manifest["kind"].as_str().unwrap_or_default()
    );
    let mut by_kind = ByKind {
        manifest: Some(manifest),
        options,
        compiled: None,
    };
    visit_all(&mut by_kind);
    by_kind.compiled.unwrap_or_else(|| {
        Err(CompileError::NotATrainingKind {
            kind,
            served: served(),
        })
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_served_kinds_are_named_by_version() {
        assert_eq!(
            super::served(),
            "TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob at kubeflow.org/v1; \
             MPIJob at kubeflow.org/v2beta1"
        );
    }
}
