//! `trainset render`: training job manifests in, the objects the controller would create out.
//! A TrainJob renders against the runtimes given beside it (`--runtime`, or documents of the input
//! itself), as the controller would resolve its `runtimeRef` in the cluster.

use kube::ResourceExt;
use serde_json::{Value, json};

use crate::admission::{self, AdmissionError};
use crate::api::trainer::{ClusterTrainingRuntime, TrainJob, TrainingRuntime, TrainingRuntimeSpec};
use crate::compile::gang::GangScheduler;
use crate::compile::trainer::{self, Runtime, RuntimeKind};
use crate::compile::{self, CompileError, Compiled, Options, SshKeyPair};
use crate::kinds::{self, Served, Visitor, visit_all};

/// Output format of `trainset render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One YAML document per object, the JobSet first.
    Yaml,
    /// A `v1` `List` with the objects as `items`.
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("document {document}: malformed YAML: {source}")]
    Yaml {
        document: usize,
        source: serde_norway::Error,
    },
    #[error("document {document}: not a Kubernetes object (a mapping with apiVersion and kind)")]
    NotAnObject { document: usize },
    #[error("document {document} ({kind} {name}): {source}")]
    Refused {
        document: usize,
        kind: String,
        name: String,
        source: AdmissionError,
    },
    #[error("document {document} ({kind} {name}): {source}")]
    Compile {
        document: usize,
        kind: String,
        name: String,
        source: CompileError,
    },
    #[error("runtimes, document {document}: malformed YAML: {source}")]
    RuntimeYaml {
        document: usize,
        source: serde_norway::Error,
    },
    #[error("runtimes, document {document}: not a TrainingRuntime or ClusterTrainingRuntime")]
    NotARuntime { document: usize },
    #[error("runtimes, document {document} ({kind} {name}): {source}")]
    Runtime {
        document: usize,
        kind: String,
        name: String,
        source: CompileError,
    },
    #[error("generating the SSH key pair: {0}")]
    SshKey(#[from] ssh_key::Error),
    #[error("writing the output: {0}")]
    Output(String),
    #[error("no training job in the input")]
    Empty,
}

/// What `trainset run` is started with that changes what a job compiles to.
#[derive(Clone, Copy, Debug, Default)]
pub struct Operator<'a> {
    /// `--cluster-domain`: appended to TF_CONFIG's endpoints.
    pub cluster_domain: Option<&'a str>,
    /// `--gang-scheduler`: the gang scheduler that places v1 jobs.
    pub gang_scheduler: Option<&'a GangScheduler>,
    /// `--mpi-kubectl-delivery-image`: an MPIJob `kubeflow.org/v1` launcher's `kubectl` image.
    pub kubectl_delivery_image: Option<&'a str>,
}

/// Compiles every document of `input`, placing jobs without a namespace in `namespace`; a
/// TrainJob's runtime comes from `runtimes` (YAML documents) or from the input's own runtime
/// documents. All documents are checked before anything is printed; on failure every error is
/// returned, so one run reports every bad document.
pub fn render(
    input: &str,
    runtimes: &str,
    namespace: &str,
    operator: &Operator<'_>,
    format: Format,
) -> Result<String, Vec<RenderError>> {
    let mut errors = Vec::new();
    let inputs = documents(input, &mut errors, |document, source| RenderError::Yaml {
        document,
        source,
    });
    let extra = documents(runtimes, &mut errors, |document, source| {
        RenderError::RuntimeYaml { document, source }
    });
    let mut known = Runtimes::default();
    for (document, value) in &extra {
        if let Err(error) = known.add(*document, value, namespace, true) {
            errors.push(error);
        }
    }
    let mut jobs = Vec::new();
    for (document, value) in inputs {
        match known.add(document, &value, namespace, false) {
            Ok(true) => {}
            Ok(false) => jobs.push((document, value)),
            Err(error) => errors.push(error),
        }
    }
    let mut objects = Vec::new();
    for (document, value) in jobs {
        match render_job(document, value, namespace, operator, &known) {
            Ok(compiled) => objects.extend(compiled),
            Err(error) => errors.push(error),
        }
    }
    if errors.is_empty() && objects.is_empty() {
        errors.push(RenderError::Empty);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    format_objects(&objects, format).map_err(|e| vec![e])
}

/// The non-empty YAML documents of `text`, numbered from 1; a syntax error ends the list (the
/// parser cannot resynchronise after one).
fn documents(
    text: &str,
    errors: &mut Vec<RenderError>,
    error: impl Fn(usize, serde_norway::Error) -> RenderError,
) -> Vec<(usize, Value)> {
    let mut documents = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        match serde::Deserialize::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => documents.push((index + 1, value)),
            Err(source) => {
                errors.push(error(index + 1, source));
                break;
            }
        }
    }
    documents
}

/// The runtimes a TrainJob may name: kind, namespace (none for a cluster runtime), name, spec.
#[derive(Default)]
struct Runtimes(Vec<(RuntimeKind, Option<String>, String, TrainingRuntimeSpec)>);

impl Runtimes {
    /// Keeps `value` if it is a runtime (`Ok(true)`); `Ok(false)` for anything else, which is an
    /// error where only runtimes belong (`only_runtimes`).
    fn add(
        &mut self,
        document: usize,
        value: &Value,
        namespace: &str,
        only_runtimes: bool,
    ) -> Result<bool, RenderError> {
        let kind = if kinds::is::<ClusterTrainingRuntime>(value) {
            RuntimeKind::Cluster
        } else if kinds::is::<TrainingRuntime>(value) {
            RuntimeKind::Namespaced
        } else if only_runtimes {
            return Err(RenderError::NotARuntime { document });
        } else {
            return Ok(false);
        };
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or("<unnamed>")
            .to_owned();
        let refused = |source| RenderError::Runtime {
            document,
            kind: kind.to_string(),
            name: name.clone(),
            source,
        };
        let (namespace, spec) = match kind {
            RuntimeKind::Cluster => {
                let runtime: ClusterTrainingRuntime =
                    compile::parse(value.clone()).map_err(refused)?;
                (None, runtime.spec.runtime)
            }
            RuntimeKind::Namespaced => {
                let runtime: TrainingRuntime = compile::parse(value.clone()).map_err(refused)?;
                let namespace = runtime.namespace().unwrap_or_else(|| namespace.to_owned());
                (Some(namespace), runtime.spec.runtime)
            }
        };
        self.0.push((kind, namespace, name, spec));
        Ok(true)
    }

    fn find(&self, kind: RuntimeKind, namespace: &str, name: &str) -> Option<Runtime<'_>> {
        self.0
            .iter()
            .find(|(k, ns, n, _)| {
                *k == kind && n == name && ns.as_deref().is_none_or(|ns| ns == namespace)
            })
            .map(|(kind, _, name, spec)| Runtime {
                kind: *kind,
                name,
                spec,
            })
    }
}

/// Renders one job document: refused as the apiserver would refuse it, else compiled by its
/// kind's entry in the registry.
fn render_job(
    document: usize,
    value: Value,
    namespace: &str,
    operator: &Operator<'_>,
    runtimes: &Runtimes,
) -> Result<Vec<Value>, RenderError> {
    if !value.is_object() || !value["kind"].is_string() || !value["apiVersion"].is_string() {
        return Err(RenderError::NotAnObject { document });
    }
    let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or("<unnamed>")
        .to_owned();
    admission::admit(&value).map_err(|source| RenderError::Refused {
        document,
        kind: kind.clone(),
        name: name.clone(),
        source,
    })?;
    let mut by_kind = ByKind {
        value: Some(value),
        namespace,
        operator: *operator,
        runtimes,
        compiled: None,
    };
    visit_all(&mut by_kind);
    // Admission has refused any kind the registry does not list.
    let compiled = by_kind.compiled.unwrap_or_else(|| {
        Err(CompileError::NotATrainingKind {
            kind: format!("{api_version}/{kind}"),
            served: kinds::served(),
        }
        .into())
    });
    let compiled = compiled.map_err(|error| match error {
        Failed::Compile(source) => RenderError::Compile {
            document,
            kind,
            name,
            source,
        },
        Failed::Render(error) => error,
    })?;
    compiled
        .objects()
        .map_err(|e| RenderError::Output(e.to_string()))
}

/// Why a document did not compile: the job itself (reported with its document, kind and name),
/// or rendering (an SSH key that could not be generated).
enum Failed {
    Compile(CompileError),
    Render(RenderError),
}

impl From<CompileError> for Failed {
    fn from(error: CompileError) -> Self {
        Self::Compile(error)
    }
}

impl From<ssh_key::Error> for Failed {
    fn from(error: ssh_key::Error) -> Self {
        Self::Render(error.into())
    }
}

/// Compiles the document of whichever kind it is.
struct ByKind<'a> {
    value: Option<Value>,
    namespace: &'a str,
    operator: Operator<'a>,
    runtimes: &'a Runtimes,
    compiled: Option<Result<Compiled, Failed>>,
}

impl Visitor for ByKind<'_> {
    fn v1<K: Served>(&mut self) {
        if let Some(value) = self.value.take_if(|v| kinds::is_served::<K>(v)) {
            self.compiled = Some(compile_v1::<K>(value, self.namespace, &self.operator));
        }
    }

    fn trainer(&mut self) {
        if let Some(value) = self.value.take_if(|v| kinds::is::<TrainJob>(v)) {
            self.compiled = Some(compile_trainjob(value, self.namespace, self.runtimes));
        }
    }
}

/// A v1 job, through the core's entry point, so the kinds' parsers are generated once, there.
fn compile_v1<K: Served>(
    value: Value,
    namespace: &str,
    operator: &Operator<'_>,
) -> Result<Compiled, Failed> {
    // Generating a key for a kind that needs none would be wasted work.
    let key = K::NEEDS_SSH_KEY.then(SshKeyPair::generate).transpose()?;
    let options = Options {
        default_namespace: Some(namespace),
        ssh_key: key.as_ref(),
        cluster_domain: operator.cluster_domain,
        gang_scheduler: operator.gang_scheduler,
        kubectl_delivery_image: operator.kubectl_delivery_image,
    };
    Ok(kinds::compile_manifest(value, &options)?)
}

/// A TrainJob against the runtime it names among `runtimes`.
fn compile_trainjob(
    value: Value,
    namespace: &str,
    runtimes: &Runtimes,
) -> Result<Compiled, Failed> {
    let mut job: TrainJob = compile::parse(value)?;
    let namespace = job.namespace().unwrap_or_else(|| namespace.to_owned());
    job.metadata.namespace = Some(namespace.clone());
    let (kind, runtime_name) = trainer::runtime_ref(&job)?;
    let runtime = runtimes
        .find(kind, &namespace, runtime_name)
        .ok_or_else(|| {
            CompileError::invalid(
                "spec.runtimeRef.name",
                format!("no {kind} {runtime_name:?} among the runtimes given (--runtime FILE)"),
            )
        })?;
    // Only an MPI runtime needs a key, as for an MPIJob.
    let key = trainer::ssh_secret(&job.name_any(), runtime.spec)
        .map(|_| SshKeyPair::generate())
        .transpose()?;
    Ok(trainer::compile_trainjob(&job, &runtime, key.as_ref())?)
}

fn format_objects(objects: &[Value], format: Format) -> Result<String, RenderError> {
    match format {
        Format::Yaml => {
            let mut out = String::new();
            for object in objects {
                out.push_str("---\n");
                out.push_str(
                    &serde_norway::to_string(object)
                        .map_err(|e| RenderError::Output(e.to_string()))?,
                );
            }
            Ok(out)
        }
        Format::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
            serde_json::to_string_pretty(&list)
                .map(|s| s + "\n")
                .map_err(|e| RenderError::Output(e.to_string()))
        }
    }
}
