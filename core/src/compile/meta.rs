//! Labels, annotations and owner references that every compiled object carries.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// v1's pod labels, kept so existing tooling still selects training pods.
pub const JOB_NAME: &str = "training.kubeflow.org/job-name";
pub const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
pub const OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
pub const JOB_ROLE: &str = "training.kubeflow.org/job-role";
/// Set per pod by the pod-labels admission policy, from the annotations below.
pub const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// On a pod template whose pods get v1's replica-index label: what to add to the pod's index
/// within its replica type (mpi-operator counts workers from 1 when the launcher is a worker).
pub const REPLICA_INDEX_OFFSET: &str = "trainset.io/replica-index-offset";
/// On a pod template where only one index carries `job-role: master`: that replica-index.
pub const MASTER_REPLICA_INDEX: &str = "trainset.io/master-replica-index";
/// Marks every object trainset creates; the controller selects the Jobs of its JobSets by it.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const TRAINSET: &str = "trainset";

/// The training job as the owner of what it compiles to.
#[derive(Clone, Debug)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
}

impl Owner {
    /// `job` as the owner, in `namespace` (a job read from a file may have none of its own).
    pub fn of<K: kube::Resource<DynamicType = ()>>(job: &K, namespace: String) -> Self {
        let meta = job.meta();
        Self {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            name: meta.name.clone().unwrap_or_default(),
            namespace,
            uid: meta.uid.clone(),
        }
    }

    /// A controller reference, when the job has a uid (a manifest read from a file has none).
    pub fn reference(&self) -> Option<Vec<OwnerReference>> {
        let uid = self.uid.clone()?;
        Some(vec![OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    }

    /// Metadata of an object named `name` that this job owns.
    pub fn object_meta(&self, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: self.reference(),
            ..Default::default()
        }
    }

    /// `training.kubeflow.org/job-name` keeps v1's rule: `/` becomes `-`.
    pub fn job_name_label(&self) -> String {
        self.name.replace('/', "-")
    }
}
