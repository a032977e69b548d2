//! What a pod asks of the cluster, summed the way each upstream operator sums it for a
//! PodGroup's `minResources`.

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

use crate::compile::CompileError;
use crate::quantity::{Quantity, ResourceSums, add_to};

/// A quantity that does not parse, and where it is.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {error}")]
pub struct BadQuantity {
    pub field: String,
    pub error: crate::quantity::QuantityError,
}

impl From<BadQuantity> for CompileError {
    fn from(bad: BadQuantity) -> Self {
        Self::invalid(bad.field, bad.error.to_string())
    }
}

/// The resources Kubernetes' scheduler counts for one pod (component-helpers' `PodRequests`,
/// which Trainer uses): the containers' requests, the sidecars' added, the largest of the init
/// containers' if larger, pod-level requests where set, plus the overhead. Limits are ignored.
pub fn pod_requests(pod: &PodSpec, field: &str) -> Result<ResourceSums, BadQuantity> {
    let mut sums = ResourceSums::new();
    for (i, container) in pod.containers.iter().enumerate() {
        let at = format!("{field}.containers[{i}].resources.requests");
        add_all(&mut sums, requests(container), &at)?;
    }
    let mut sidecars = ResourceSums::new();
    let mut init_peak = ResourceSums::new();
    for (i, container) in pod.init_containers.iter().flatten().enumerate() {
        let at = format!("{field}.initContainers[{i}].resources.requests");
        let own = parsed(requests(container), &at)?;
        let running = if container.restart_policy.as_deref() == Some("Always") {
            add_sums(&mut sums, &own);
            add_sums(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut running = own;
            add_sums(&mut running, &sidecars);
            running
        };
        keep_larger(&mut init_peak, &running);
    }
    keep_larger(&mut sums, &init_peak);
    if let Some(pod_level) = pod.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        for (name, quantity) in pod_level {
            let supported = name == "cpu" || name == "memory" || name.starts_with("hugepages-");
            if supported {
                let at = format!("{field}.resources.requests[{name}]");
                sums.insert(name.clone(), parse(&quantity.0, &at)?);
            }
        }
    }
    if let Some(overhead) = &pod.overhead {
        let overhead = overhead.iter().map(|(n, q)| (n.as_str(), q.0.as_str()));
        add_all(&mut sums, overhead, &format!("{field}.overhead"))?;
    }
    Ok(sums)
}

/// Which limits count beside a container's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limits {
    /// training-operator: all of them, only where the container requests nothing at all.
    WithoutRequests,
    /// mpi-operator: those of the resources the container requests nothing of.
    OfUnrequested,
}

/// What the v1 operators count for one pod: each container's requests, and its limits as
/// `limits` says; no init containers, no overhead.
pub fn container_requests(
    pod: &PodSpec,
    field: &str,
    limits: Limits,
) -> Result<ResourceSums, BadQuantity> {
    let mut sums = ResourceSums::new();
    for (i, container) in pod.containers.iter().enumerate() {
        let at = format!("{field}.containers[{i}].resources");
        let resources = container.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        if let Some(requests) = requests {
            let requests = requests.iter().map(|(n, q)| (n.as_str(), q.0.as_str()));
            add_all(&mut sums, requests, &format!("{at}.requests"))?;
        }
        let counted = |name: &String| match limits {
            Limits::WithoutRequests => requests.is_none(),
            Limits::OfUnrequested => requests.is_none_or(|r| !r.contains_key(name)),
        };
        let container_limits = resources
            .and_then(|r| r.limits.as_ref())
            .into_iter()
            .flatten();
        let counted_limits = container_limits
            .filter(|(name, _)| counted(name))
            .map(|(n, q)| (n.as_str(), q.0.as_str()));
        add_all(&mut sums, counted_limits, &format!("{at}.limits"))?;
    }
    Ok(sums)
}

fn requests(container: &Container) -> impl Iterator<Item = (&str, &str)> {
    container
        .resources
        .as_ref()
        .and_then(|r: &ResourceRequirements| r.requests.as_ref())
        .into_iter()
        .flatten()
        .map(|(name, quantity)| (name.as_str(), quantity.0.as_str()))
}

fn parse(text: &str, field: &str) -> Result<Quantity, BadQuantity> {
    Quantity::parse(text).map_err(|error| BadQuantity {
        field: field.to_owned(),
        error,
    })
}

fn parsed<'a>(
    quantities: impl Iterator<Item = (&'a str, &'a str)>,
    field: &str,
) -> Result<ResourceSums, BadQuantity> {
    let mut sums = ResourceSums::new();
    add_all(&mut sums, quantities, field)?;
    Ok(sums)
}

fn add_all<'a>(
    sums: &mut ResourceSums,
    quantities: impl Iterator<Item = (&'a str, &'a str)>,
    field: &str,
) -> Result<(), BadQuantity> {
    for (name, text) in quantities {
        add_to(sums, name, parse(text, &format!("{field}[{name}]"))?);
    }
    Ok(())
}

fn add_sums(sums: &mut ResourceSums, more: &ResourceSums) {
    for (name, quantity) in more {
        add_to(sums, name, *quantity);
    }
}

/// Each resource of `other` that is larger replaces this one's.
fn keep_larger(sums: &mut ResourceSums, other: &ResourceSums) {
    for (name, quantity) in other {
        if sums
            .get(name)
            .is_none_or(|mine| quantity.cmp_value(mine).is_gt())
        {
            sums.insert(name.clone(), *quantity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> PodSpec {
        serde_json::from_value(spec).unwrap_or_default()
    }

    fn printed(sums: &ResourceSums) -> Vec<(String, String)> {
        sums.iter()
            .map(|(n, q)| (n.clone(), q.to_string()))
            .collect()
    }

    #[test]
    fn containers_add_sidecars_add_and_init_containers_peak() {
        let spec = pod(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
                {"name": "big-init", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}
            ],
            "overhead": {"memory": "64Mi"}
        }));
        let sums = pod_requests(&spec, "spec").map(|s| printed(&s));
        // cpu: max(1 + 0.5 + 0.25, 4 + 0.25) = 4.25; memory: max(1Gi, 512Mi) + 64Mi.
        assert_eq!(
            sums,
            Ok(vec![
                ("cpu".to_owned(), "4250m".to_owned()),
                ("memory".to_owned(), "1088Mi".to_owned()),
            ])
        );
    }

    #[test]
    fn v1_counts_limits_only_where_no_requests_are_set() {
        let spec = pod(json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
            ]
        }));
        assert_eq!(
            container_requests(&spec, "spec", Limits::WithoutRequests).map(|s| printed(&s)),
            Ok(vec![
                ("cpu".to_owned(), "3".to_owned()),
                ("nvidia.com/gpu".to_owned(), "1".to_owned()),
            ])
        );
    }

    #[test]
    fn a_bad_quantity_names_its_field() {
        let spec = pod(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]
        }));
        let error = pod_requests(&spec, "spec.template.spec").map(|_| ());
        assert!(
            matches!(&error, Err(e) if e.field == "spec.template.spec.containers[0].resources.requests[cpu]"),
            "{error:?}"
        );
    }
}
