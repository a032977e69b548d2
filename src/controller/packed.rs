//! Objects as the stores keep them. A typed object is mostly k8s-openapi's inline layout (a
//! `Container` is 2,336 bytes before any of its strings, a `JobTemplateSpec` 2,608), so a store of
//! 10,000 typed jobs and JobSets holds about 20 KiB per job. A [`Packed`] object is its metadata
//! and the rest of it as compact JSON, read back into its type when a reconcile needs it: a few
//! KiB per job, and decoding one is a few microseconds, paid only by the reconciles that read it.
//! Its labels and annotations are JSON too: a `BTreeMap` of even one label allocates a node with
//! room for eleven (544 bytes), and a Job's four labels cost 880 bytes as a map, 180 as JSON.

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher::Event;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, Error as _};
use serde_json::{Map, Value};

use super::decode::Decoded;

/// kubectl's copy of what was applied: often as large as the object, and never read.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object as a watch delivered it, before it is packed: its metadata without managedFields or
/// kubectl's last-applied copy, and every other field as JSON.
pub struct Unpacked<K> {
    meta: ObjectMeta,
    rest: Map<String, Value>,
    kind: PhantomData<fn() -> K>,
}

/// An object as a store keeps it: its metadata but labels and annotations, those as the members
/// of a compact JSON object (`"labels":{…}`, empty if it has neither), and the rest of it as
/// compact JSON. Its `meta()` has no labels: [`Packed::label`] reads one.
pub struct Packed<K> {
    meta: ObjectMeta,
    tags: Box<str>,
    rest: Box<str>,
    kind: PhantomData<fn() -> K>,
}

/// The labels and annotations of an object, as a packed object keeps them.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Tags {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

impl Tags {
    /// The members of the JSON object of `meta`'s labels and annotations, taken from it.
    fn take(meta: &mut ObjectMeta) -> Box<str> {
        let tags = Self {
            labels: meta.labels.take(),
            annotations: meta.annotations.take(),
        };
        // Maps of strings always serialise.
        let json = serde_json::to_string(&tags).unwrap_or_default();
        let members = json.strip_prefix('{').and_then(|j| j.strip_suffix('}'));
        members.unwrap_or_default().into()
    }

    /// Read back from the members [`Tags::take`] wrote.
    fn read(members: &str) -> Self {
        // What `take` wrote always reads.
        serde_json::from_str(&format!("{{{members}}}")).unwrap_or_default()
    }
}

/// Removes from an object (its metadata already apart) what trainset never reads.
pub type Projection = fn(&mut ObjectMeta, &mut Map<String, Value>);

/// Keeps every field.
pub fn whole(_: &mut ObjectMeta, _: &mut Map<String, Value>) {}

impl<'de, K> Deserialize<'de> for Unpacked<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Value::Object(mut rest) = Value::deserialize(deserializer)? else {
            return Err(D::Error::custom("an object is not a JSON object"));
        };
        // Without readable metadata the object cannot even be named: the apiserver never sends
        // one, so that stays an error of the list.
        let mut meta = ObjectMeta::deserialize(rest.remove("metadata").unwrap_or(Value::Null))
            .map_err(D::Error::custom)?;
        meta.managed_fields = None;
        if let Some(annotations) = &mut meta.annotations {
            annotations.remove(LAST_APPLIED);
        }
        Ok(Self {
            meta,
            rest,
            kind: PhantomData,
        })
    }
}

/// Read straight from a watch, whole: the store of a controller's own jobs.
impl<'de, K> Deserialize<'de> for Packed<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Unpacked::deserialize(deserializer).map(|object| object.pack(whole))
    }
}

impl<K> Unpacked<K> {
    /// Packed, with only what `project` keeps.
    pub fn pack(mut self, project: Projection) -> Packed<K> {
        project(&mut self.meta, &mut self.rest);
        // A map of JSON values always serialises.
        let rest = serde_json::to_string(&self.rest).unwrap_or_default();
        let tags = Tags::take(&mut self.meta);
        Packed {
            meta: self.meta,
            tags,
            rest: rest.into_boxed_str(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource + DeserializeOwned> Packed<K> {
    /// The object as JSON again, its whole metadata in it.
    fn json(&self) -> String {
        // Metadata read from JSON always serialises.
        let meta = serde_json::to_string(&self.metadata()).unwrap_or_default();
        let rest = self.rest.strip_prefix('{').unwrap_or("}");
        let separator = if rest == "}" { "" } else { "," };
        format!("{{\"metadata\":{meta}{separator}{rest}")
    }

    /// The object read into its type, or why it cannot be (naming the field).
    pub fn decode(&self) -> Decoded<K> {
        serde_json::from_str(&self.json()).unwrap_or_else(|error| {
            Decoded(Err(crate::controller::decode::Undecodable {
                metadata: self.metadata(),
                status: None,
                error: error.to_string(),
            }))
        })
    }

    /// The object read into its type: for objects only trainset writes, where one that cannot be
    /// read is somebody else's and is logged and left out.
    pub fn read(&self) -> Option<K>
    where
        K::DynamicType: Default,
    {
        match serde_json::from_str(&self.json()) {
            Ok(object) => Some(object),
            Err(error) => {
                tracing::warn!(
                    kind = %K::kind(&Default::default()),
                    namespace = self.meta.namespace.as_deref().unwrap_or_default(),
                    name = self.meta.name.as_deref().unwrap_or_default(),
                    %error,
                    "cannot read a watched object; leaving it out",
                );
                None
            }
        }
    }
}

impl<K> Packed<K> {
    /// The object's fields but its metadata, as compact JSON.
    pub fn rest(&self) -> &str {
        &self.rest
    }

    /// The value of the object's label `key`.
    pub fn label(&self, key: &str) -> Option<String> {
        Tags::read(&self.tags).labels?.remove(key)
    }

    /// The object's whole metadata, its labels and annotations in it.
    pub fn metadata(&self) -> ObjectMeta {
        let tags = Tags::read(&self.tags);
        ObjectMeta {
            labels: tags.labels,
            annotations: tags.annotations,
            ..self.meta.clone()
        }
    }

    /// Whether `other` holds the same fields, whatever its resourceVersion: a change nobody reads.
    pub fn same_as(&self, other: &Self) -> bool {
        if self.rest != other.rest || self.tags != other.tags {
            return false;
        }
        let mut meta = self.meta.clone();
        meta.resource_version
            .clone_from(&other.meta.resource_version);
        meta == other.meta
    }
}

/// `event` with each object packed by `project`.
pub fn pack_event<K>(event: Event<Unpacked<K>>, project: Projection) -> Event<Packed<K>> {
    match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(object) => Event::InitApply(object.pack(project)),
        Event::Apply(object) => Event::Apply(object.pack(project)),
        Event::Delete(object) => Event::Delete(object.pack(project)),
    }
}

/// `K`'s type information for a wrapper of it, and `Clone` and `Debug` whatever `K` has.
macro_rules! resource_of {
    ($wrapper:ident { $($field:ident),* }) => {
        impl<K> Clone for $wrapper<K> {
            fn clone(&self) -> Self {
                Self {
                    $($field: self.$field.clone(),)*
                    kind: PhantomData,
                }
            }
        }

        impl<K> std::fmt::Debug for $wrapper<K> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($wrapper))
                    $(.field(stringify!($field), &self.$field))*
                    .finish()
            }
        }

        trainset_core::resource_of_wrapped!($wrapper, |this| &this.meta, &mut this.meta);
    };
}
resource_of!(Unpacked { meta, rest });
resource_of!(Packed { meta, tags, rest });

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    use super::*;

    fn packed(object: Value) -> Packed<Job> {
        serde_json::from_value::<Packed<Job>>(object).unwrap_or_else(|e| panic!("packing: {e}"))
    }

    #[test]
    fn labels_and_annotations_read_back_with_the_object() {
        let object = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u",
                         "labels": {"a": "1", "b": "2"},
                         "annotations": {"note": "x", LAST_APPLIED: "{}"}},
            "spec": {"parallelism": 2}
        });
        let job = packed(object.clone());
        assert_eq!(job.label("a").as_deref(), Some("1"));
        assert_eq!(job.label("c"), None);
        assert!(job.meta().labels.is_none(), "kept as JSON, not as a map");
        let mut expected: Job = serde_json::from_value(object).unwrap_or_default();
        if let Some(annotations) = &mut expected.metadata.annotations {
            annotations.remove(LAST_APPLIED);
        }
        assert_eq!(job.read(), Some(expected.clone()));
        assert_eq!(job.metadata(), expected.metadata);
    }

    #[test]
    fn an_object_reads_back_whatever_its_metadata_holds() {
        for metadata in [
            json!({}),
            json!({"labels": {"a": "1"}}),
            json!({"name": "j"}),
            json!({"name": "j", "annotations": {"n": "x"}}),
        ] {
            let object = json!({"metadata": metadata, "spec": {"parallelism": 1}});
            let expected: Job = serde_json::from_value(object.clone()).unwrap_or_default();
            assert_eq!(packed(object).read(), Some(expected), "{metadata}");
            let bare = json!({"metadata": metadata});
            let expected: Job = serde_json::from_value(bare.clone()).unwrap_or_default();
            assert_eq!(
                packed(bare).read(),
                Some(expected),
                "{metadata}, nothing else"
            );
        }
    }

    #[test]
    fn a_changed_label_is_a_change() {
        let job = |value: &str| packed(json!({"metadata": {"name": "j", "labels": {"a": value}}}));
        assert!(job("1").same_as(&job("1")));
        assert!(!job("1").same_as(&job("2")));
    }
}
