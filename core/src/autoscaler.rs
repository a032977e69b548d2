//! The HorizontalPodAutoscaler of a job that asks for one (a PyTorchJob's
//! `elasticPolicy.metrics`), as training-operator v1.9.4 makes it: `autoscaling/v2`, named after
//! the job and owned by it, scaling the job itself through its scale subresource between the
//! elastic bounds with the job's metrics. A change of the Worker count that it makes is a
//! resize like any other ([`crate::resize`]).
//!
//! It exists while the job runs. A suspended job has none (v1 deletes it too), nor one whose
//! JobSet Kueue holds suspended until it is admitted; unlike v1, a finished job's is
//! deleted as well, since there is nothing left to scale and the HPA controller would otherwise
//! keep reading its metrics until the job is deleted. One of the job's name that the job does not
//! own is never changed: the job runs without autoscaling, and says so.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use kube::{Resource, ResourceExt};

use crate::api::TrainingJob;
use crate::compile::{MANAGED_BY, Owner, TRAINSET};
use crate::plan::{Holder, holder};

/// A write of the job's autoscaler.
#[derive(Clone, Debug, PartialEq)]
pub enum AutoscalerWrite {
    Create(HorizontalPodAutoscaler),
    /// The spec the job asks for now, over the version read (its `resourceVersion`).
    Replace(HorizontalPodAutoscaler),
    /// Delete the job's own autoscaler, this one only (its uid).
    Delete {
        name: String,
        uid: String,
    },
}

/// What to do about the autoscaler of `job`'s name, `existing` (the cluster's, if any), when
/// the job is `running` (neither suspended nor finished).
pub fn write<K: TrainingJob>(
    job: &K,
    running: bool,
    existing: Option<&HorizontalPodAutoscaler>,
) -> Result<Option<AutoscalerWrite>, Held> {
    let namespace = job.namespace().unwrap_or_default();
    let wanted = running.then(|| desired(job, namespace)).flatten();
    let Some(existing) = existing else {
        return Ok(wanted.map(AutoscalerWrite::Create));
    };
    let (kind, name) = (K::kind(&()), job.name_any());
    match holder(existing.meta(), &kind, &name, job.uid().as_deref()) {
        Holder::This => {}
        Holder::Earlier => return Err(Held::Earlier),
        Holder::Foreign(holder) => {
            return Err(Held::Foreign(format!(
                "HorizontalPodAutoscaler {name} belongs to {holder}, not to {kind} {name}: \
                 it is left as it is, and the job's Worker count is not autoscaled"
            )));
        }
    }
    Ok(match wanted {
        Some(mut wanted) if wanted.spec != existing.spec => {
            wanted.metadata.resource_version = existing.resource_version();
            Some(AutoscalerWrite::Replace(wanted))
        }
        Some(_) => None,
        None => existing.uid().map(|uid| AutoscalerWrite::Delete {
            name: existing.name_any(),
            uid,
        }),
    })
}

/// An autoscaler of the job's name that the job does not own, left alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Held {
    /// Another's (said here): the job runs without autoscaling.
    #[error("{0}")]
    Foreign(String),
    /// An earlier job's of the same name, which the garbage collector is removing: look again
    /// soon (autoscalers are not watched).
    #[error("the autoscaler of an earlier job of this name is being removed")]
    Earlier,
}

/// The autoscaler `job` asks for in `namespace`, if any.
pub fn desired<K: TrainingJob>(job: &K, namespace: String) -> Option<HorizontalPodAutoscaler> {
    let autoscaling = job.autoscaling()?;
    let owner = Owner::of(job, namespace);
    let name = owner.name.clone();
    let labels = [(MANAGED_BY.to_owned(), TRAINSET.to_owned())].into();
    Some(HorizontalPodAutoscaler {
        metadata: owner.object_meta(name.clone(), labels),
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some(owner.api_version.clone()),
                kind: owner.kind.clone(),
                name,
            },
            min_replicas: Some(autoscaling.min_replicas),
            max_replicas: autoscaling.max_replicas,
            metrics: Some(autoscaling.metrics.to_vec()),
            behavior: None,
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::PyTorchJob;

    fn job(elastic: Value) -> PyTorchJob {
        let worker = json!({"replicas": 2, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "trainer:1"}]}}});
        serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "elastic", "namespace": "team-a", "uid": "job-uid"},
            "spec": {"elasticPolicy": elastic, "pytorchReplicaSpecs": {"Worker": worker}},
        }))
        .unwrap_or_else(|e| panic!("job: {e}"))
    }

    fn cpu_metric() -> Value {
        json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}])
    }

    fn existing(owner_uid: &str, spec_from: &PyTorchJob) -> HorizontalPodAutoscaler {
        let mut hpa =
            desired(spec_from, "team-a".to_owned()).unwrap_or_else(|| panic!("an autoscaler"));
        hpa.metadata.uid = Some("hpa-uid".to_owned());
        hpa.metadata.resource_version = Some("7".to_owned());
        hpa.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "kubeflow.org/v1".to_owned(),
            kind: "PyTorchJob".to_owned(),
            name: "elastic".to_owned(),
            uid: owner_uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        hpa
    }

    #[test]
    fn metrics_make_an_autoscaler_of_the_job_between_its_bounds() {
        let job = job(json!({"minReplicas": 1, "maxReplicas": 4, "metrics": cpu_metric()}));
        let hpa = desired(&job, "team-a".to_owned()).unwrap_or_else(|| panic!("an autoscaler"));
        assert_eq!(
            serde_json::to_value(&hpa).unwrap_or_default(),
            json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {
                    "name": "elastic", "namespace": "team-a",
                    "labels": {"app.kubernetes.io/managed-by": "trainset"},
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "name": "elastic", "uid": "job-uid", "controller": true,
                        "blockOwnerDeletion": true}],
                },
                "spec": {
                    "scaleTargetRef": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                       "name": "elastic"},
                    "minReplicas": 1, "maxReplicas": 4, "metrics": cpu_metric(),
                },
            })
        );
    }

    #[test]
    fn bounds_default_as_v1_defaults_them() {
        let bounds = |elastic: Value| {
            desired(&job(elastic), "team-a".to_owned())
                .map(|hpa| (hpa.spec.min_replicas, hpa.spec.max_replicas))
        };
        assert_eq!(
            bounds(json!({"maxReplicas": 5, "metrics": cpu_metric()})),
            Some((Some(5), 5))
        );
        assert_eq!(
            bounds(json!({"minReplicas": 3, "metrics": cpu_metric()})),
            Some((Some(3), 3))
        );
        // Both from the Worker count (2).
        assert_eq!(bounds(json!({"metrics": cpu_metric()})), Some((Some(2), 2)));
    }

    #[test]
    fn no_metrics_no_autoscaler() {
        assert_eq!(
            desired(
                &job(json!({"minReplicas": 1, "maxReplicas": 4})),
                "team-a".to_owned()
            ),
            None
        );
        let plain: PyTorchJob = serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "plain", "namespace": "team-a"},
            "spec": {"pytorchReplicaSpecs": {}},
        }))
        .unwrap_or_else(|e| panic!("job: {e}"));
        assert_eq!(desired(&plain, "team-a".to_owned()), None);
    }

    #[test]
    fn a_running_job_gets_its_autoscaler_once_and_follows_its_spec() {
        let asked = job(json!({"minReplicas": 1, "maxReplicas": 4, "metrics": cpu_metric()}));
        let made = write(&asked, true, None);
        assert!(
            matches!(made, Ok(Some(AutoscalerWrite::Create(_)))),
            "{made:?}"
        );

        let current = existing("job-uid", &asked);
        assert_eq!(write(&asked, true, Some(&current)), Ok(None));

        let wider = job(json!({"minReplicas": 1, "maxReplicas": 6, "metrics": cpu_metric()}));
        match write(&wider, true, Some(&current)) {
            Ok(Some(AutoscalerWrite::Replace(hpa))) => {
                assert_eq!(hpa.spec.max_replicas, 6);
                assert_eq!(hpa.metadata.resource_version.as_deref(), Some("7"));
            }
            other => panic!("a replacement, not {other:?}"),
        }
    }

    #[test]
    fn a_suspended_or_finished_job_has_none() {
        let asked = job(json!({"minReplicas": 1, "maxReplicas": 4, "metrics": cpu_metric()}));
        assert_eq!(write(&asked, false, None), Ok(None));
        let current = existing("job-uid", &asked);
        assert_eq!(
            write(&asked, false, Some(&current)),
            Ok(Some(AutoscalerWrite::Delete {
                name: "elastic".to_owned(),
                uid: "hpa-uid".to_owned()
            }))
        );
        // Metrics taken away: the autoscaler goes too.
        let without = job(json!({"minReplicas": 1, "maxReplicas": 4}));
        assert!(matches!(
            write(&without, true, Some(&current)),
            Ok(Some(AutoscalerWrite::Delete { .. }))
        ));
    }

    #[test]
    fn another_owners_autoscaler_is_left_alone_and_an_earlier_jobs_awaited() {
        let asked = job(json!({"minReplicas": 1, "maxReplicas": 4, "metrics": cpu_metric()}));
        let mut theirs = existing("other-uid", &asked);
        if let Some(owner) = theirs
            .metadata
            .owner_references
            .as_mut()
            .and_then(|o| o.first_mut())
        {
            owner.kind = "Deployment".to_owned();
            owner.name = "web".to_owned();
        }
        let refused = write(&asked, true, Some(&theirs));
        assert!(
            matches!(&refused, Err(Held::Foreign(m)) if m.contains("belongs to Deployment web")),
            "{refused:?}"
        );
        assert!(write(&asked, false, Some(&theirs)).is_err());
        // The same job's name with another uid: an earlier job's, which the garbage collector
        // removes.
        let earlier = existing("earlier-uid", &asked);
        assert_eq!(write(&asked, true, Some(&earlier)), Err(Held::Earlier));
    }
}
