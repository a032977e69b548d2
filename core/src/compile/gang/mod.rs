//! Gang scheduling: a job's pods are placed all at once or not at all. A [`Gang`] says what
//! must be placed together; a [`Route`] turns it into the objects a gang scheduler reads and
//! the fields that put each pod in its gang. One file per route: scheduler-plugins'
//! coscheduling, Volcano, and Kubernetes' own Workload API (`native`). Pure: no I/O.

mod native;
pub mod requests;
mod scheduler_plugins;
mod volcano;

use std::collections::BTreeMap;

use jobset_types::ReplicatedJob;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, TypeMeta};
use serde_json::Value;

use crate::compile::CompileError;
use crate::compile::meta::{MANAGED_BY, Owner, TRAINSET};
use crate::quantity::ResourceSums;

pub use volcano::QUEUE_NAME_ANNOTATION;

/// The gang scheduler v1 jobs are placed by: `trainset run --gang-scheduler`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GangScheduler {
    /// No gangs.
    #[default]
    None,
    /// scheduler-plugins' coscheduling: a `scheduling.x-k8s.io` PodGroup, pods sent to the
    /// scheduler of this name.
    SchedulerPlugins { scheduler_name: String },
    /// Volcano: a `scheduling.volcano.sh` PodGroup, pods sent to the `volcano` scheduler.
    Volcano,
    /// Kubernetes' Workload API (`scheduling.k8s.io`): the default scheduler places the gang.
    Native,
}

impl GangScheduler {
    /// From `--gang-scheduler` (`none`, `scheduler-plugins`, `volcano`, `native`) and
    /// training-operator's `--gang-scheduler-name` (`volcano`, or the name of a scheduler-plugins
    /// scheduler), at most one of them given.
    pub fn from_flags(route: Option<&str>, v1_name: Option<&str>) -> Result<Self, String> {
        match (route, v1_name.filter(|n| !n.is_empty())) {
            (Some(_), Some(_)) => Err(
                "--gang-scheduler and --gang-scheduler-name name the same thing: give one".into(),
            ),
            (None | Some("none"), None) => Ok(Self::None),
            (Some("scheduler-plugins"), None) => Ok(Self::scheduler_plugins()),
            (Some("volcano"), None) => Ok(Self::Volcano),
            (Some("native"), None) => Ok(Self::Native),
            (Some(other), None) => Err(format!(
                "--gang-scheduler {other:?}: expected none, scheduler-plugins, volcano or native"
            )),
            // training-operator's rule: `volcano`, in any case, or else a scheduler-plugins name.
            (None, Some(name)) if name.eq_ignore_ascii_case("volcano") => Ok(Self::Volcano),
            (None, Some(name)) => Ok(Self::SchedulerPlugins {
                scheduler_name: name.to_owned(),
            }),
        }
    }

    /// scheduler-plugins with its own deployment's scheduler name.
    pub fn scheduler_plugins() -> Self {
        Self::SchedulerPlugins {
            scheduler_name: scheduler_plugins::DEFAULT_SCHEDULER.to_owned(),
        }
    }

    /// Whether the gang objects follow the job's spec while it runs (see [`Route::follows_the_spec`]).
    pub fn follows_the_spec(&self) -> bool {
        self.route().is_some_and(|route| route.follows_the_spec())
    }

    /// The route that places the job, if any.
    pub fn route(&self) -> Option<Box<dyn Route>> {
        match self {
            Self::None => None,
            Self::SchedulerPlugins { scheduler_name } => {
                Some(Box::new(scheduler_plugins::SchedulerPlugins {
                    scheduler_name: scheduler_name.clone(),
                }))
            }
            Self::Volcano => Some(Box::new(volcano::Volcano)),
            Self::Native => Some(Box::new(native::Native)),
        }
    }
}

/// Whose conventions a gang's pods follow: the operator the kind's users come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Convention {
    /// training-operator v1.9.4: a scheduler the pod names is kept; Volcano pods name their
    /// replica type as their task.
    #[default]
    TrainingOperator,
    /// mpi-operator v0.8.2: the gang's scheduler replaces any the pod names; no task.
    MpiOperator,
    /// Trainer v2.3.0: pods join the gang by label or annotation alone and keep the scheduler
    /// the runtime names; no task.
    Trainer,
}

/// Volcano's constraint on how far apart in the network a gang's pods may be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkTopology {
    /// `hard` or `soft`.
    pub mode: String,
    pub highest_tier_allowed: i32,
}

/// The pods of one replicated job, in the gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The replicated job's name.
    pub replicated_job: String,
    /// v1's replica type (Volcano's `task-spec`): `worker`, `master`.
    pub task: String,
    /// Pods: replicas times parallelism.
    pub pods: i32,
}

/// What must be placed together, and how the scheduler is told.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gang {
    /// The PodGroup's (or Workload's) name: the job's.
    pub name: String,
    /// Pods that must be placed at once.
    pub min_member: i32,
    /// Resources those pods need; omitted when `None`.
    pub min_resources: Option<ResourceSums>,
    /// Volcano's queue.
    pub queue: Option<String>,
    pub priority_class: Option<String>,
    /// scheduler-plugins: how long a gang may wait for all its members.
    pub schedule_timeout_seconds: Option<i32>,
    /// Volcano: how close together the pods must be placed.
    pub network_topology: Option<NetworkTopology>,
    /// Annotations the PodGroup carries (v1 copies the job's).
    pub annotations: BTreeMap<String, String>,
    /// The replicated jobs, in the JobSet's order.
    pub members: Vec<Member>,
    /// Whether the replicated jobs start in order (`dependsOn`): then one gang over all of them
    /// would wait for pods that wait for it, so the native route makes one per replicated job.
    pub ordered: bool,
    /// Whose pod conventions the job's kind follows.
    pub convention: Convention,
}

impl Gang {
    /// Pods over every replicated job.
    pub fn pods(&self) -> i64 {
        self.members.iter().map(|m| i64::from(m.pods)).sum()
    }

    /// Refuses a gang that can never be placed: fewer than one member, or more members than the
    /// job has pods where the route's objects cannot change once made. A scheduler-plugins or
    /// Volcano gang larger than its job waits, as training-operator's does, until a change of
    /// the job's spec brings it within reach: its PodGroup follows the spec while the job runs.
    pub fn check(&self, min_available_field: &str, route: &dyn Route) -> Result<(), CompileError> {
        if self.min_member < 1 {
            return Err(CompileError::invalid(
                min_available_field,
                format!("Invalid value: {}: must be at least 1", self.min_member),
            ));
        }
        if !route.follows_the_spec() && i64::from(self.min_member) > self.pods() {
            return Err(CompileError::invalid(
                min_available_field,
                format!(
                    "Invalid value: {}: the job has {} pods, and a gang larger than its job is \
                     never placed (the Workload API's gangs cannot change once made)",
                    self.min_member,
                    self.pods()
                ),
            ));
        }
        Ok(())
    }
}

/// One gang scheduler's objects and pod fields.
pub trait Route {
    /// The objects to create before the JobSet, owned by the job, in creation order.
    fn objects(&self, gang: &Gang, owner: &Owner) -> Result<Vec<DynamicObject>, CompileError>;

    /// Puts the pods of `member` in the gang.
    fn join(&self, gang: &Gang, member: &Member, pod: &mut PodTemplateSpec);

    /// Whether one gang spans replicated jobs that `dependsOn` orders, and so would never be
    /// complete: the compiler then drops the ordering (the peers had none either).
    fn spans_ordered_jobs(&self) -> bool {
        true
    }

    /// Whether the route's objects may be written again once made, and so follow the job's
    /// spec (see [`rewritable`]).
    fn follows_the_spec(&self) -> bool {
        true
    }
}

/// Puts every pod of `replicated_jobs` in `gang` by `route`, and returns the objects to create
/// before the JobSet. A route whose one gang spans the replicated jobs drops their ordering.
pub fn join(
    route: &dyn Route,
    mut gang: Gang,
    replicated_jobs: &mut [ReplicatedJob],
    owner: &Owner,
) -> Result<Vec<DynamicObject>, CompileError> {
    if gang.ordered && route.spans_ordered_jobs() {
        for replicated_job in replicated_jobs.iter_mut() {
            replicated_job.depends_on.clear();
        }
        gang.ordered = false;
    }
    for replicated_job in replicated_jobs.iter_mut() {
        let member = gang
            .members
            .iter()
            .find(|m| m.replicated_job == replicated_job.name);
        if let (Some(member), Some(job)) = (member, replicated_job.template.spec.as_mut()) {
            route.join(&gang, member, &mut job.template);
        }
    }
    route.objects(&gang, owner)
}

/// `minResources` as a PodGroup writes it: each sum in Kubernetes' canonical form.
fn resources_json(resources: &ResourceSums) -> Value {
    resources
        .iter()
        .map(|(name, quantity)| (name.clone(), Value::String(quantity.to_string())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// An object of `api_version` and `kind` named `name`, owned by the job, with `spec`.
fn object(
    (api_version, kind): (&str, &str),
    owner: &Owner,
    name: &str,
    annotations: &BTreeMap<String, String>,
    spec: Value,
) -> DynamicObject {
    let labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
    DynamicObject {
        types: Some(TypeMeta {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }),
        metadata: ObjectMeta {
            annotations: (!annotations.is_empty()).then(|| annotations.clone()),
            ..owner.object_meta(name.to_owned(), labels)
        },
        data: serde_json::json!({ "spec": spec }),
    }
}

/// The API a gang object is written through (`podgroups`, `workloads`).
pub fn api_resource(object: &DynamicObject) -> Option<ApiResource> {
    let types = object.types.as_ref()?;
    let (group, version) = types.api_version.split_once('/')?;
    Some(ApiResource::from_gvk(&GroupVersionKind::gvk(
        group,
        version,
        &types.kind,
    )))
}

/// Whether a gang object's spec may be written again once made (to follow a job resized while
/// suspended): a scheduler-plugins or Volcano PodGroup's may, the Workload API's is immutable.
pub fn rewritable(object: &DynamicObject) -> bool {
    object
        .types
        .as_ref()
        .is_some_and(|t| t.api_version != native::API_VERSION)
}

/// Sends the pod to `scheduler` as the gang's `convention` has it: training-operator unless the
/// pod names a scheduler of its own, mpi-operator whatever it names, Trainer never.
fn schedule_with(pod: &mut PodTemplateSpec, scheduler: &str, convention: Convention) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    let own = spec
        .scheduler_name
        .as_deref()
        .is_some_and(|s| !s.is_empty());
    let send = match convention {
        Convention::TrainingOperator => !own,
        Convention::MpiOperator => true,
        Convention::Trainer => false,
    };
    if send {
        spec.scheduler_name = Some(scheduler.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_choose_the_route_as_each_operator_did() {
        let sp = |name: &str| GangScheduler::SchedulerPlugins {
            scheduler_name: name.to_owned(),
        };
        assert_eq!(
            GangScheduler::from_flags(None, None),
            Ok(GangScheduler::None)
        );
        assert_eq!(
            GangScheduler::from_flags(Some("native"), None),
            Ok(GangScheduler::Native)
        );
        assert_eq!(
            GangScheduler::from_flags(Some("scheduler-plugins"), None),
            Ok(sp("scheduler-plugins-scheduler"))
        );
        assert_eq!(
            GangScheduler::from_flags(None, Some("Volcano")),
            Ok(GangScheduler::Volcano)
        );
        assert_eq!(
            GangScheduler::from_flags(None, Some("my-sched")),
            Ok(sp("my-sched"))
        );
        assert_eq!(
            GangScheduler::from_flags(None, Some("")),
            Ok(GangScheduler::None)
        );
        assert!(GangScheduler::from_flags(Some("kai"), None).is_err());
        assert!(GangScheduler::from_flags(Some("volcano"), Some("volcano")).is_err());
    }

    #[test]
    fn only_pod_groups_whose_api_allows_it_are_written_again_on_resume() {
        let object = |api_version: &str, kind: &str| DynamicObject {
            types: Some(TypeMeta {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            }),
            metadata: ObjectMeta::default(),
            data: Value::Null,
        };
        assert!(rewritable(&object(
            scheduler_plugins::API_VERSION,
            "PodGroup"
        )));
        assert!(rewritable(&object(volcano::API_VERSION, "PodGroup")));
        assert!(!rewritable(&object(native::API_VERSION, "Workload")));
        assert!(!rewritable(&object(native::API_VERSION, "PodGroup")));
    }

    #[test]
    fn a_gang_larger_than_its_job_waits_unless_its_objects_cannot_change() {
        let gang = Gang {
            min_member: 5,
            members: vec![Member {
                replicated_job: "worker".into(),
                task: "worker".into(),
                pods: 4,
            }],
            ..Gang::default()
        };
        let field = "spec.runPolicy.schedulingPolicy.minAvailable";
        let error = gang
            .check(field, &native::Native)
            .map_err(|e| e.to_string());
        assert!(
            matches!(&error, Err(m) if m.starts_with(field) && m.contains("4 pods")),
            "{error:?}"
        );
        // A PodGroup follows the spec: the gang waits until the job is changed to fit it.
        assert!(gang.check(field, &volcano::Volcano).is_ok());
        let scheduler_plugins = GangScheduler::scheduler_plugins().route();
        assert!(scheduler_plugins.is_some_and(|route| gang.check(field, route.as_ref()).is_ok()));
        let fits = Gang {
            min_member: 4,
            ..gang.clone()
        };
        assert!(fits.check(field, &native::Native).is_ok());
        let empty = Gang {
            min_member: 0,
            ..gang
        };
        let error = empty
            .check(field, &volcano::Volcano)
            .map_err(|e| e.to_string());
        assert!(
            matches!(&error, Err(m) if m.starts_with(field) && m.contains("at least 1")),
            "{error:?}"
        );
    }
}
