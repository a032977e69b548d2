//! `trainset render`: training job manifests in, the objects the controller would create out.

use serde_json::{Value, json};

use crate::admission::{self, AdmissionError};
use crate::compile::{self, CompileError, Options, SshKeyPair};

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
    #[error("generating the SSH key pair: {0}")]
    SshKey(#[from] ssh_key::Error),
    #[error("writing the output: {0}")]
    Output(String),
    #[error("no training job in the input")]
    Empty,
}

/// Compiles every document of `input`, placing jobs without a namespace in `namespace`. All documents are checked before anything is printed;
/// on failure every error is returned, so one run reports every bad document.
pub fn render(
    input: &str,
    namespace: &str,
    cluster_domain: Option<&str>,
    format: Format,
) -> Result<String, Vec<RenderError>> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(input).enumerate() {
        let number = index + 1;
        let value: Value = match serde::Deserialize::deserialize(document) {
            Ok(value) => value,
            Err(source) => {
                // The parser cannot resynchronise after a syntax error.
                errors.push(RenderError::Yaml {
                    document: number,
                    source,
                });
                break;
            }
        };
        if value.is_null() {
            continue;
        }
        match render_one(number, value, namespace, cluster_domain) {
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

fn render_one(
    document: usize,
    value: Value,
    namespace: &str,
    cluster_domain: Option<&str>,
) -> Result<Vec<Value>, RenderError> {
    if !value.is_object() || !value["kind"].is_string() || !value["apiVersion"].is_string() {
        return Err(RenderError::NotAnObject { document });
    }
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or("<unnamed>")
        .to_owned();
    // What the apiserver would refuse is refused here with the same rules.
    admission::admit(&value).map_err(|source| RenderError::Refused {
        document,
        kind: kind.clone(),
        name: name.clone(),
        source,
    })?;
    // Only an MPIJob needs a key; generating one for every job would be wasted work.
    let key = if kind == "MPIJob" {
        Some(SshKeyPair::generate()?)
    } else {
        None
    };
    let options = Options {
        default_namespace: Some(namespace),
        ssh_key: key.as_ref(),
        cluster_domain,
    };
    let compiled =
        compile::compile_manifest(value, &options).map_err(|source| RenderError::Compile {
            document,
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
    compiled
        .objects()
        .map_err(|e| RenderError::Output(e.to_string()))
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
