//! The runtimes TrainJobs name, as their watches hold them, and the TrainJobs waiting for one.

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::FRAMEWORK;
use crate::api::trainer::{AnyRuntime, ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use crate::compile::trainer::{self, RuntimeKind};
use crate::controller::decode::{Decoded, Undecodable};
use crate::controller::packed::Packed;

/// The runtimes, from their watches.
#[derive(Clone)]
pub struct Runtimes {
    pub namespaced: Store<Decoded<TrainingRuntime>>,
    pub cluster: Store<Decoded<ClusterTrainingRuntime>>,
}

impl Runtimes {
    /// The runtime, or why it cannot be read; `None` when it does not exist.
    pub fn get(
        &self,
        kind: RuntimeKind,
        namespace: &str,
        name: &str,
    ) -> Option<Result<AnyRuntime, String>> {
        let read = |error: &Undecodable| error.error.clone();
        match kind {
            RuntimeKind::Cluster => self
                .cluster
                .get(&ObjectRef::new(name))
                .map(|r| r.0.clone().map(AnyRuntime::Cluster).map_err(|e| read(&e))),
            RuntimeKind::Namespaced => self
                .namespaced
                .get(&ObjectRef::new(name).within(namespace))
                .map(|r| {
                    r.0.clone()
                        .map(AnyRuntime::Namespaced)
                        .map_err(|e| read(&e))
                }),
        }
    }

    /// The `framework` label of a TrainJob's metrics: its runtime's framework.
    pub fn framework(&self, job: &TrainJob) -> String {
        let runtime = trainer::runtime_ref(job)
            .ok()
            .and_then(|(kind, name)| self.get(kind, &job.namespace().unwrap_or_default(), name))
            .and_then(Result::ok);
        runtime
            .as_ref()
            .and_then(AnyRuntime::framework)
            .unwrap_or(FRAMEWORK)
            .to_owned()
    }
}

/// The TrainJobs in `jobs` that wait on the runtime `kind`/`namespace`/`name`: those not
/// finished that name it.
pub fn naming(
    jobs: &Store<Packed<TrainJob>>,
    kind: RuntimeKind,
    namespace: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<Packed<TrainJob>>> {
    let state = jobs.state();
    state
        .iter()
        .filter(|packed| {
            // Outside the namespace: not even read.
            if namespace.is_some_and(|ns| packed.namespace().as_deref() != Some(ns)) {
                return false;
            }
            let Ok(job) = packed.decode().0 else {
                return false;
            };
            !job.status
                .as_ref()
                .is_some_and(crate::status::trainer::is_finished)
                && trainer::runtime_ref(&job).is_ok_and(|r| r == (kind, name))
        })
        .map(|packed| ObjectRef::from_obj(packed.as_ref()))
        .collect()
}
