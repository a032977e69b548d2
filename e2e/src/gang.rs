//! The gang-scheduling routes as the tests and the differentials meet them: each scheduler, its
//! PodGroup kind and where a gang's size is in it.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

/// A gang scheduler trainset is started for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Native,
    SchedulerPlugins,
    Volcano,
}

impl Route {
    /// As training-operator's `--gang-scheduler-name` names a scheduler: `volcano`, else the name
    /// of a scheduler-plugins scheduler.
    pub fn from_v1_name(name: &str) -> Self {
        if name.eq_ignore_ascii_case("volcano") {
            Self::Volcano
        } else {
            Self::SchedulerPlugins
        }
    }

    /// As `trainset run --gang-scheduler` names the route.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::SchedulerPlugins => "scheduler-plugins",
            Self::Volcano => "volcano",
        }
    }

    /// The route's PodGroups: the objects the scheduler reads a gang from.
    pub fn pod_groups(self, client: &Client, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), ns, &self.pod_group_resource())
    }

    /// The route's PodGroup kind, for a watch over every namespace.
    pub fn pod_group_resource(self) -> ApiResource {
        let (group, version) = match self {
            Self::Native => ("scheduling.k8s.io", "v1alpha2"),
            Self::SchedulerPlugins => ("scheduling.x-k8s.io", "v1alpha1"),
            Self::Volcano => ("scheduling.volcano.sh", "v1beta1"),
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, "PodGroup"))
    }

    /// The scheduler the job's pods are sent to.
    pub fn scheduler(self) -> &'static str {
        match self {
            Self::Native => "default-scheduler",
            Self::SchedulerPlugins => "scheduler-plugins-scheduler",
            Self::Volcano => "volcano",
        }
    }

    /// The scheduler for pods outside any gang: the route's own, but for Volcano, which places
    /// only pods of a PodGroup (its controller manager, not run here, would make one for them).
    pub fn plain_scheduler(self) -> &'static str {
        match self {
            Self::Volcano => "default-scheduler",
            other => other.scheduler(),
        }
    }

    /// How many pods the PodGroup holds back until they can be placed together.
    pub fn min_count(self, group: &DynamicObject) -> &Value {
        match self {
            Self::Native => &group.data["spec"]["schedulingPolicy"]["gang"]["minCount"],
            Self::SchedulerPlugins | Self::Volcano => &group.data["spec"]["minMember"],
        }
    }

    /// The route's PodGroup resource is served: for scheduler-plugins, its scheduler was started.
    pub async fn served(self, client: &Client) -> bool {
        self.pod_groups(client, "default")
            .list(&ListParams::default().limit(1))
            .await
            .is_ok()
    }
}
