//! Every training kind trainset serves, listed once: the six kinds of the v1 family, each a
//! profile of its own ([`Served`]), and the Trainer family, TrainJob with the runtimes it names.
//! The CRDs, offline admission, `render` and the controller visit this list, so adding a kind
//! touches only [`visit_all`] and the kind's own files; a v1 manifest compiles through
//! [`compile_manifest`].

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::trainer::TrainJob;
use crate::api::{
    API_VERSION_ANNOTATION, JAXJob, MPIJob, PaddleJob, PyTorchJob, TFJob, TrainingJob, XGBoostJob,
};
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
    /// One kind of the v1 family (`kubeflow.org`).
    fn v1<K: Served>(&mut self);
    /// The Trainer family (`trainer.kubeflow.org`): TrainJob, compiled against the
    /// TrainingRuntime or ClusterTrainingRuntime it names.
    fn trainer(&mut self);
}

/// Visits every served kind, in a fixed order.
pub fn visit_all(visitor: &mut impl Visitor) {
    visitor.v1::<TFJob>();
    visitor.v1::<PyTorchJob>();
    visitor.v1::<XGBoostJob>();
    visitor.v1::<PaddleJob>();
    visitor.v1::<JAXJob>();
    visitor.v1::<MPIJob>();
    visitor.trainer();
}

/// Whether `manifest` is an object of kind `K` at `K`'s apiVersion.
pub fn is<K: Resource<DynamicType = ()>>(manifest: &Value) -> bool {
    manifest["apiVersion"] == K::api_version(&()).as_ref()
        && manifest["kind"] == K::kind(&()).as_ref()
}

/// Whether `manifest` is a training job of kind `K` at any version `K` is served at.
pub fn is_served<K: TrainingJob>(manifest: &Value) -> bool {
    manifest["kind"] == K::kind(&()).as_ref()
        && api_versions::<K>().any(|version| manifest["apiVersion"] == version)
}

/// `group/version` for each version `K` is served at, its own first.
fn api_versions<K: TrainingJob>() -> impl Iterator<Item = String> {
    let group = K::group(&());
    std::iter::once(K::api_version(&()).into_owned()).chain(
        K::ALSO_SERVED_AT
            .iter()
            .map(move |version| format!("{group}/{version}")),
    )
}

/// What the apiserver's admission policy does when a job of a kind served at more than one
/// version is created (`crate::api_version`): records the version in
/// [`API_VERSION_ANNOTATION`], whatever the manifest said there.
pub fn record_api_version<K: TrainingJob>(manifest: &mut Value) {
    if K::ALSO_SERVED_AT.is_empty() {
        return;
    }
    let Some((_, version)) = manifest["apiVersion"]
        .as_str()
        .and_then(|api_version| api_version.split_once('/'))
    else {
        return;
    };
    let version = Value::String(version.to_owned());
    if !manifest["metadata"].is_object() {
        manifest["metadata"] = Value::Object(Default::default());
    }
    let metadata = &mut manifest["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(Default::default());
    }
    metadata["annotations"][API_VERSION_ANNOTATION] = version;
}

/// The served kinds and versions as error messages name them:
/// `TFJob, PyTorchJob, ... at kubeflow.org/v1; MPIJob at kubeflow.org/v2beta1; TrainJob at ...`.
pub fn served() -> String {
    struct Names(Vec<(String, Vec<String>)>);
    impl Names {
        fn add<K: Resource<DynamicType = ()>>(&mut self) {
            self.add_at::<K>(K::api_version(&()).into_owned());
        }
        /// `K` at `version`, which may name more than one: `kubeflow.org/v2beta1 and ...`.
        fn add_at<K: Resource<DynamicType = ()>>(&mut self, version: String) {
            let kind = K::kind(&()).into_owned();
            match self.0.last_mut() {
                Some((last, kinds)) if *last == version => kinds.push(kind),
                _ => self.0.push((version, vec![kind])),
            }
        }
    }
    impl Visitor for Names {
        fn v1<K: Served>(&mut self) {
            self.add_at::<K>(api_versions::<K>().collect::<Vec<_>>().join(" and "));
        }
        fn trainer(&mut self) {
            self.add::<TrainJob>();
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

/// Compiles a manifest of a v1 kind, read as JSON. A TrainJob compiles only against its
/// runtime: `compile::trainer::compile_trainjob`.
pub fn compile_manifest(manifest: Value, options: &Options<'_>) -> Result<Compiled, CompileError> {
    struct ByKind<'a> {
        manifest: Option<Value>,
        options: &'a Options<'a>,
        compiled: Option<Result<Compiled, CompileError>>,
    }
    impl Visitor for ByKind<'_> {
        fn v1<K: Served>(&mut self) {
            if let Some(mut manifest) = self.manifest.take_if(|m| is_served::<K>(m)) {
                record_api_version::<K>(&mut manifest);
                self.compiled =
                    Some(parse::<K>(manifest).and_then(|job| job.compile(self.options)));
            }
        }
        fn trainer(&mut self) {
            if self.manifest.take_if(|m| is::<TrainJob>(m)).is_some() {
                self.compiled = Some(Err(CompileError::invalid(
                    "spec.runtimeRef",
                    "a TrainJob compiles only against the runtime it names",
                )));
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
             MPIJob at kubeflow.org/v2beta1 and kubeflow.org/v1; \
             TrainJob at trainer.kubeflow.org/v1alpha1"
        );
    }
}
