//! A builder of v1 training job manifests, so a test states only what it is about:
//! `Job::of::<PyTorchJob>("demo").master(1).workers(3).build()`. The kind's apiVersion, kind,
//! replica-specs field and default container come from its type.

use serde_json::{Map, Value, json};
use trainset::api::TrainingJob;

pub struct Job {
    manifest: Value,
    field: &'static str,
    template: Value,
}

impl Job {
    /// A job of kind `K` named `name`, with no replicas yet; each replica type added runs the
    /// kind's default container (image `i`) unless [`Job::template`] says otherwise.
    pub fn of<K: TrainingJob>(name: &str) -> Self {
        let container = K::DEFAULT_CONTAINER.unwrap_or("main");
        Self {
            manifest: json!({
                "apiVersion": K::api_version(&()), "kind": K::kind(&()),
                "metadata": {"name": name}, "spec": {K::REPLICA_SPECS_FIELD: {}}
            }),
            field: K::REPLICA_SPECS_FIELD,
            template: json!({"spec": {"containers": [{"name": container, "image": "i"}]}}),
        }
    }

    /// The pod template of replica types added after this.
    pub fn template(mut self, template: Value) -> Self {
        self.template = template;
        self
    }

    /// `count` replicas of `replica_type`.
    pub fn replicas(mut self, replica_type: &str, count: i32) -> Self {
        let spec = json!({"replicas": count, "template": self.template});
        self.manifest["spec"][self.field][replica_type] = spec;
        self
    }

    pub fn master(self, count: i32) -> Self {
        self.replicas("Master", count)
    }

    pub fn workers(self, count: i32) -> Self {
        self.replicas("Worker", count)
    }

    /// Sets `field` of the spec of `replica_type` (added already).
    pub fn replica_field(mut self, replica_type: &str, field: &str, value: Value) -> Self {
        self.manifest["spec"][self.field][replica_type][field] = value;
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.manifest["metadata"]["namespace"] = json!(namespace);
        self
    }

    /// Merges `fields` into the job's metadata.
    pub fn metadata(mut self, fields: Value) -> Self {
        merge(&mut self.manifest["metadata"], fields);
        self
    }

    /// Merges `fields` into the job's spec, beside its replica specs.
    pub fn spec(mut self, fields: Value) -> Self {
        merge(&mut self.manifest["spec"], fields);
        self
    }

    pub fn build(self) -> Value {
        self.manifest
    }
}

fn merge(into: &mut Value, fields: Value) {
    if let (Some(into), Value::Object(fields)) = (into.as_object_mut(), fields) {
        into.extend::<Map<String, Value>>(fields);
    }
}
