//! The runtime's JobSet template with the TrainJob's runtime patches merged in, refusing a
//! patch that names what the runtime lacks or sets what the TrainJob's own fields set.

use std::collections::BTreeMap;

use jobset_types::JobSetSpec;

use super::{DATASET_INITIALIZER, MODEL_INITIALIZER, NODE, Runtime, malformed, merge};
use crate::api::trainer::TrainJob;
use crate::compile::CompileError;

/// The runtime's JobSet spec with every runtime patch merged in order, and the JobSet's labels
/// and annotations (the runtime template's, then each patch's).
pub(super) struct Patched {
    pub spec: JobSetSpec,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

pub(super) fn patched(job: &TrainJob, runtime: &Runtime<'_>) -> Result<Patched, CompileError> {
    let template = runtime.spec.template.as_ref();
    let spec = template.and_then(|t| t.spec.as_ref()).ok_or_else(|| {
        CompileError::invalid(
            "spec.runtimeRef",
            format!("{} {} has no template.spec", runtime.kind, runtime.name),
        )
    })?;
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    if let Some(metadata) = template.and_then(|t| t.metadata.as_ref()) {
        labels.extend(metadata.labels.clone());
        annotations.extend(metadata.annotations.clone());
    }
    let mut merged = serde_json::to_value(spec).map_err(|e| malformed("spec.runtimeRef", &e))?;
    for (i, patch) in job.spec.runtime_patches.iter().enumerate() {
        let Some(template) = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
        else {
            continue;
        };
        if let Some(metadata) = &template.metadata {
            labels.extend(metadata.labels.clone());
            annotations.extend(metadata.annotations.clone());
        }
        let Some(patch_spec) = &template.spec else {
            continue;
        };
        let at = format!("spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec");
        for (j, patched_job) in patch_spec.replicated_jobs.iter().enumerate() {
            let Some(target) = spec
                .replicated_jobs
                .iter()
                .find(|r| r.name == patched_job.name)
            else {
                return Err(CompileError::invalid(
                    format!("{at}.replicatedJobs[{j}].name"),
                    format!("the runtime has no replicated job {:?}", patched_job.name),
                ));
            };
            let pod = target
                .template
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref());
            let patched_pod = patched_job
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref());
            for (field, patched_containers, own) in [
                (
                    "containers",
                    patched_pod.map(|p| &p.containers),
                    pod.map(|p| &p.containers),
                ),
                (
                    "initContainers",
                    patched_pod.map(|p| &p.init_containers),
                    pod.and_then(|p| p.init_containers.as_ref()),
                ),
            ] {
                for (k, patched_container) in patched_containers.into_iter().flatten().enumerate() {
                    let at_container = format!(
                        "{at}.replicatedJobs[{j}].template.spec.template.spec.{field}[{k}]"
                    );
                    let owns_env = [NODE, DATASET_INITIALIZER, MODEL_INITIALIZER]
                        .contains(&patched_container.name.as_str());
                    if field == "containers" && owns_env && !patched_container.env.is_empty() {
                        return Err(CompileError::invalid(
                            format!("{at_container}.env"),
                            format!(
                                "the {:?} container's env comes from spec.trainer and spec.initializer, not from runtime patches",
                                patched_container.name
                            ),
                        ));
                    }
                    if !own
                        .into_iter()
                        .flatten()
                        .any(|c| c.name == patched_container.name)
                    {
                        return Err(CompileError::invalid(
                            format!("{at_container}.name"),
                            format!(
                                "replicated job {:?} of the runtime has no container {:?}",
                                patched_job.name, patched_container.name
                            ),
                        ));
                    }
                }
            }
        }
        let change = serde_json::to_value(patch_spec).map_err(|e| malformed(&at, &e))?;
        merge::merge(&mut merged, &change);
    }
    let spec = serde_json::from_value(merged).map_err(|e| malformed("spec.runtimePatches", &e))?;
    Ok(Patched {
        spec,
        labels,
        annotations,
    })
}
