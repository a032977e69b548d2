//! The dataset and model initializers: the TrainJob's sources reach the runtime's initializer
//! steps, which must exist and mount the volume the trainer reads.

use jobset_types::JobSetSpec;
use k8s_openapi::api::core::v1::{Container, EnvFromSource, SecretEnvSource};

use super::{DATASET_INITIALIZER, MODEL_INITIALIZER, upsert};
use crate::api::trainer::{InitializerSource, TrainJob};
use crate::compile::CompileError;

/// An initializer's container: `STORAGE_URI`, the initializer's env, its secret as `envFrom`.
pub(super) fn build_initializer(container: &mut Container, source: &InitializerSource) {
    if let Some(uri) = &source.storage_uri {
        upsert(
            container,
            &[crate::compile::env::value("STORAGE_URI", uri.clone())],
        );
    }
    upsert(container, &source.env);
    if let Some(secret) = &source.secret_ref {
        container
            .env_from
            .get_or_insert_with(Vec::new)
            .push(EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.name.clone(),
                    optional: None,
                }),
                ..Default::default()
            });
    }
}

/// The volume an initializer writes to and the trainer reads from.
pub(super) const INITIALIZER_VOLUME: &str = "initializer";

/// An initializer the TrainJob configures needs the runtime's replicated job of that name, with
/// a container of that name mounting the `initializer` volume (Trainer's webhook rule).
pub(super) fn check_initializers(job: &TrainJob, spec: &JobSetSpec) -> Result<(), CompileError> {
    let initializer = job.spec.initializer.as_ref();
    for (field, step, source) in [
        (
            "dataset",
            DATASET_INITIALIZER,
            initializer.and_then(|i| i.dataset.as_ref()),
        ),
        (
            "model",
            MODEL_INITIALIZER,
            initializer.and_then(|i| i.model.as_ref()),
        ),
    ] {
        if source.is_none() {
            continue;
        }
        let refuse =
            |reason: String| CompileError::invalid(format!("spec.initializer.{field}"), reason);
        let replicated = spec
            .replicated_jobs
            .iter()
            .find(|r| r.name == step)
            .ok_or_else(|| refuse(format!("the runtime has no {step} replicated job")))?;
        let pod = replicated
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref());
        let container = pod
            .and_then(|p| p.containers.iter().find(|c| c.name == step))
            .ok_or_else(|| refuse(format!("the runtime's {step} job has no container {step}")))?;
        let mounts = container.volume_mounts.iter().flatten();
        if !mounts.into_iter().any(|m| m.name == INITIALIZER_VOLUME) {
            return Err(refuse(format!(
                "container {step} of the runtime's {step} job has no volumeMount named {INITIALIZER_VOLUME}"
            )));
        }
    }
    Ok(())
}
