//! The node's resources: the trainer's merged over the runtime's, and the GPUs and CPUs they
//! give a node.

use jobset_types::JobSetSpec;
use k8s_openapi::api::core::v1::ResourceRequirements;
use serde_json::Value;

use super::{NODE, TRAINER_STEP, malformed, merge, step};
use crate::api::trainer::Trainer;
use crate::compile::CompileError;

/// A quantity rounded up to whole units, as Go's `Quantity.Value()`; `None` if it does not parse.
fn whole_units(quantity: &str) -> Option<i64> {
    let (number, scale) = match quantity.strip_suffix('m') {
        Some(milli) => (milli, 1000.0),
        None => (quantity, 1.0),
    };
    let value: f64 = number.parse().ok()?;
    let units = (value / scale).ceil();
    (units.is_finite() && units >= 0.0 && units <= i64::MAX as f64).then_some(units as i64)
}

/// GPUs (the first resource whose name contains `gpu`, requests before limits) and CPUs
/// (request, else limit) per node.
pub(super) fn devices(resources: Option<&ResourceRequirements>) -> (i64, i64) {
    let lists = [
        resources.and_then(|r| r.requests.as_ref()),
        resources.and_then(|r| r.limits.as_ref()),
    ];
    let gpus = lists
        .iter()
        .flatten()
        .find_map(|list| {
            list.iter()
                .find(|(name, _)| name.to_ascii_lowercase().contains("gpu"))
        })
        .and_then(|(_, quantity)| whole_units(&quantity.0))
        .unwrap_or(0);
    let cpus = lists
        .iter()
        .flatten()
        .find_map(|list| list.get("cpu"))
        .and_then(|quantity| whole_units(&quantity.0))
        .unwrap_or(0);
    (gpus, cpus)
}

/// A `node` container's resources with `spec.trainer.resourcesPerNode` strategically merged in
/// (per key of limits and requests, Trainer v2.3.0's rule, kubeflow/trainer#3602).
pub(super) fn merged_resources(
    own: Option<&ResourceRequirements>,
    trainer: &Trainer,
) -> Result<Option<ResourceRequirements>, CompileError> {
    let Some(per_node) = &trainer.resources_per_node else {
        return Ok(own.cloned());
    };
    let malformed = |e: serde_json::Error| malformed("spec.trainer.resourcesPerNode", &e);
    let mut resources = serde_json::to_value(own).map_err(malformed)?;
    if resources.is_null() {
        resources = Value::Object(Default::default());
    }
    merge::merge(
        &mut resources,
        &serde_json::to_value(per_node).map_err(malformed)?,
    );
    serde_json::from_value(resources).map_err(malformed)
}

/// The resources of the trainer's `node` container, as the runtime (patched) has them.
pub(super) fn trainer_resources(spec: &JobSetSpec) -> Option<&ResourceRequirements> {
    let trainer = spec
        .replicated_jobs
        .iter()
        .find(|r| step(r) == Some(TRAINER_STEP))?;
    let pod = trainer.template.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers
        .iter()
        .find(|c| c.name == NODE)?
        .resources
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::whole_units;

    #[test]
    fn quantities_round_up_to_whole_units() {
        assert_eq!(whole_units("4"), Some(4));
        assert_eq!(whole_units("500m"), Some(1));
        assert_eq!(whole_units("1500m"), Some(2));
        assert_eq!(whole_units("2.5"), Some(3));
        assert_eq!(whole_units("0"), Some(0));
        assert_eq!(whole_units("4Gi"), None);
        assert_eq!(whole_units("-1"), None);
    }
}
