//! The CRDs trainset serves, generated from the Rust types plus their CEL rules.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

use crate::api::trainer::{ClusterTrainingRuntime, GROUP, TrainJob, TrainingRuntime};
use crate::api::{TrainingJob, with_rules};
use crate::kinds::{Served, Visitor, visit_all};

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("building the {crd} CRD: {source}")]
    Build {
        crd: &'static str,
        source: serde_json::Error,
    },
    #[error("shaping the {crd} CRD: {source}")]
    Shape {
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
    let build = |source| CrdError::Build {
        crd: K::crd_name(),
        source,
    };
    let mut value =
        serde_json::to_value(with_rules::<K>(K::crd()).map_err(build)?).map_err(build)?;
    bound_integers(&mut value);
    also_served_at(&mut value, K::ALSO_SERVED_AT);
    serde_json::from_value(value).map_err(build)
}

/// Serves the CRD's one version under each name of `versions` too, with the same schema, not
/// stored: with conversion `None` the apiserver converts by rewriting `apiVersion`, and prunes
/// an object by the schema of the version it is stored in and of the version it is read in, so
/// only one schema for all loses no field either way.
fn also_served_at(crd: &mut Value, versions: &[&str]) {
    let Some(served) = crd["spec"]["versions"].as_array_mut() else {
        return;
    };
    let Some(stored) = served.first().cloned() else {
        return;
    };
    for version in versions {
        let mut also = stored.clone();
        also["name"] = json!(version);
        also["storage"] = json!(false);
        served.push(also);
    }
}

/// The smallest and largest port Kubernetes accepts in a probe or lifecycle handler.
const PORT_RANGE: (i32, i32) = (1, 65535);

/// Bounds every integer the types hold in 32 bits, and every int-or-string `port` (a probe's, a
/// lifecycle handler's) to the range of a port, so the apiserver refuses on every Kubernetes
/// version what trainset could not read: before 1.36 it does not enforce `format: int32`, and an
/// int-or-string field has no bound at all. Bounds a field has already are kept.
pub fn bound_integers(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("format").and_then(Value::as_str) == Some("int32") {
                map.entry("minimum").or_insert(json!(i32::MIN));
                map.entry("maximum").or_insert(json!(i32::MAX));
            }
            if let Some(Value::Object(port)) = map
                .get_mut("properties")
                .and_then(|properties| properties.get_mut("port"))
                && port.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            {
                port.entry("minimum").or_insert(json!(PORT_RANGE.0));
                port.entry("maximum").or_insert(json!(PORT_RANGE.1));
            }
            map.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// Builds the CRDs of every served kind in the registry's order, or only the one of kind `only`
/// (building a CRD generates its schema, which is not cheap).
struct Build {
    only: Option<String>,
    crds: Vec<Result<CustomResourceDefinition, CrdError>>,
}

impl Build {
    fn wants(&self, kind: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == kind)
    }
}

impl Visitor for Build {
    fn v1<K: Served>(&mut self) {
        if self.wants(&K::kind(&())) {
            self.crds.push(crd::<K>());
        }
    }

    fn trainer(&mut self) {
        let kinds = [
            TrainJob::kind(&()),
            TrainingRuntime::kind(&()),
            ClusterTrainingRuntime::kind(&()),
        ];
        if !kinds.iter().any(|kind| self.wants(kind)) {
            return;
        }
        match trainer() {
            Ok(crds) => {
                let wanted: Vec<_> = crds
                    .into_iter()
                    .filter(|crd| self.wants(&crd.spec.names.kind))
                    .collect();
                self.crds.extend(wanted.into_iter().map(Ok));
            }
            Err(error) => self.crds.push(Err(error)),
        }
    }
}

/// Every CRD trainset serves, in a fixed order: the v1 kinds', then Trainer v2's.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let mut build = Build {
        only: None,
        crds: Vec::new(),
    };
    visit_all(&mut build);
    build.crds.into_iter().collect()
}

/// The CRDs of the six v1 kinds, in a fixed order.
pub fn v1() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Ok(all()?
        .into_iter()
        .filter(|crd| crd.spec.group != GROUP)
        .collect())
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

/// The Trainer v2 CRDs (`trainer.kubeflow.org/v1alpha1`), shaped as Trainer v2.3.0's: without the
/// `Option` markers Go's CRDs do not have.
pub fn trainer() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    [
        ("trainjobs", TrainJob::crd()),
        ("trainingruntimes", TrainingRuntime::crd()),
        ("clustertrainingruntimes", ClusterTrainingRuntime::crd()),
    ]
    .into_iter()
    .map(|(crd, definition)| {
        let shape = |source| CrdError::Shape { crd, source };
        let mut value = serde_json::to_value(definition).map_err(shape)?;
        for version in value["spec"]["versions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let schema = &mut version["schema"]["openAPIV3Schema"];
            without_option_markers(schema);
            bound_integers(schema);
        }
        serde_json::from_value(value).map_err(shape)
    })
    .collect()
}

/// kube marks every `Option` field `nullable`, and schemars lists `null` among an optional enum's
/// values; Go's CRDs do neither (a `null` is then pruned, and defaults apply).
pub fn without_option_markers(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("nullable");
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|value| !value.is_null());
            }
            map.values_mut().for_each(without_option_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(without_option_markers),
        _ => {}
    }
}
