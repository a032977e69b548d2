//! The watch events of trainset's own objects (JobSets, Jobs) and of the events read about them,
//! as their readable objects alone.

use kube::Resource;
use kube::runtime::watcher::Event;
pub use trainset_core::decode::{Decoded, Undecodable};

/// A watch event of decoded objects as one of the readable ones alone: for the stores of objects
/// only trainset writes (JobSets, Jobs) and for the events read about them, where an unreadable
/// one is somebody else's and is logged and left out.
pub fn readable<K: Resource<DynamicType = ()>>(event: Event<Decoded<K>>) -> Option<Event<K>> {
    let read = |decoded: Decoded<K>| match decoded.0 {
        Ok(object) => Some(object),
        Err(undecodable) => {
            tracing::warn!(
                kind = %K::kind(&()),
                namespace = undecodable.metadata.namespace.as_deref().unwrap_or_default(),
                name = undecodable.metadata.name.as_deref().unwrap_or_default(),
                error = %undecodable.error,
                "cannot read a watched object; leaving it out",
            );
            None
        }
    };
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(object) => read(object).map(Event::InitApply),
        Event::Apply(object) => read(object).map(Event::Apply),
        Event::Delete(object) => read(object).map(Event::Delete),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trainset_core::api::PyTorchJob;

    use super::*;

    #[test]
    fn the_stores_of_trainsets_own_objects_leave_unreadable_ones_out() {
        let bad = serde_json::from_value::<Decoded<PyTorchJob>>(job());
        let Ok(bad) = bad else {
            panic!("the envelope was not read");
        };
        assert!(bad.0.is_err());
        assert!(readable(Event::Apply(bad)).is_none());
        assert!(matches!(
            readable::<PyTorchJob>(Event::InitDone),
            Some(Event::InitDone)
        ));
    }

    /// A PyTorchJob whose probe port no 32-bit integer holds.
    fn job() -> serde_json::Value {
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "poison", "namespace": "b", "uid": "u1"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "pytorch", "image": "busybox",
                                "livenessProbe": {"tcpSocket": {"port": -1_i64 << 40}}}]}}}}}
        })
    }
}
