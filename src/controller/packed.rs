//! Objects as the stores keep them. A typed object is mostly k8s-openapi's inline layout (a
//! `Container` is 2,336 bytes before any of its strings, a `JobTemplateSpec` 2,608), so a store of
//! 10,000 typed jobs and JobSets holds about 20 KiB per job. A [`Packed`] object is its metadata
//! and the rest of it as compact JSON, read back into its type when a reconcile needs it: a few
//! KiB per job, and decoding one is a few microseconds, paid only by the reconciles that read it.
//! Its labels and annotations are JSON too: a `BTreeMap` of even one label allocates a node with
//! room for eleven (544 bytes), and a Job's four labels cost 880 bytes as a map, 180 as JSON.
//! What a store never reads is left out while the watch's JSON is parsed ([`Keep`]): skipped by
//! the parser, never allocated (a JobSet's pod templates and every object's managedFields were
//! most of the decoding work).

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher::Event;
use serde::de::{
    Deserialize, DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IgnoredAny,
    MapAccess, SeqAccess, Visitor,
};
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

/// Removes from an object (its metadata already apart) what trainset never reads and only its
/// value tells (what [`Keep`] cannot say).
pub type Projection = fn(&mut ObjectMeta, &mut Map<String, Value>);

/// Keeps every field.
pub fn whole(_: &mut ObjectMeta, _: &mut Map<String, Value>) {}

/// Which parts of a JSON value a store keeps, by their place in it: what it leaves out is skipped
/// while the JSON is parsed. A value not shaped as expected (an array where an object was
/// expected) is kept whole.
#[derive(Clone, Copy, Debug)]
pub enum Keep {
    All,
    Nothing,
    /// Of an object, the members named as given and every other as `others`.
    Members {
        named: &'static [(&'static str, Keep)],
        others: &'static Keep,
    },
    /// Of an array, each item as given.
    Items(&'static Keep),
}

impl Keep {
    /// Of an object, the members named as given and all the others.
    pub const fn within(named: &'static [(&'static str, Keep)]) -> Self {
        Self::Members {
            named,
            others: &Self::All,
        }
    }

    /// Of an object, the members named as given and nothing else.
    pub const fn only(named: &'static [(&'static str, Keep)]) -> Self {
        Self::Members {
            named,
            others: &Self::Nothing,
        }
    }

    /// An object's metadata as every store keeps it: without managedFields (as large as the
    /// object, and never read) and without kubectl's last-applied copy.
    pub const METADATA: Self = Self::within(&[
        ("managedFields", Self::Nothing),
        (
            "annotations",
            Self::within(&[(LAST_APPLIED, Self::Nothing)]),
        ),
    ]);

    /// A whole object, its metadata as every store keeps it.
    pub const WHOLE: Self = Self::within(&[("metadata", Self::METADATA)]);

    fn member(&self, key: &str) -> Self {
        match self {
            Self::Members { named, others } => named
                .iter()
                .find(|(name, _)| *name == key)
                .map_or(**others, |(_, keep)| *keep),
            _ => Self::All,
        }
    }

    fn item(&self) -> Self {
        match self {
            Self::Items(keep) => **keep,
            _ => Self::All,
        }
    }
}

/// The types whose stores keep only part of each object, and which part.
pub trait Kept {
    const KEPT: Keep;
}

impl<'de, K: Kept> Deserialize<'de> for Unpacked<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        unpack(deserializer, K::KEPT)
    }
}

/// Read straight from a watch, whole: the store of a controller's own jobs.
impl<'de, K> Deserialize<'de> for Packed<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        unpack(deserializer, Keep::WHOLE).map(|object: Unpacked<K>| object.pack(whole))
    }
}

fn unpack<'de, D: Deserializer<'de>, K>(
    deserializer: D,
    keep: Keep,
) -> Result<Unpacked<K>, D::Error> {
    let Value::Object(mut rest) = Pruned(keep).deserialize(deserializer)? else {
        return Err(D::Error::custom("an object is not a JSON object"));
    };
    // Without readable metadata the object cannot even be named: the apiserver never sends
    // one, so that stays an error of the list.
    let meta = ObjectMeta::deserialize(rest.remove("metadata").unwrap_or(Value::Null))
        .map_err(D::Error::custom)?;
    Ok(Unpacked {
        meta,
        rest,
        kind: PhantomData,
    })
}

/// A JSON value read as [`Keep`] says: what it leaves out is skipped by the parser.
struct Pruned(Keep);

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => Value::deserialize(deserializer),
            _ => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.0.member(&key) {
                Keep::Nothing => {
                    map.next_value::<IgnoredAny>()?;
                }
                keep => {
                    kept.insert(key, map.next_value_seed(Pruned(keep))?);
                }
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let keep = self.0.item();
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(Pruned(keep))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
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
    fn what_a_store_leaves_out_is_skipped_while_parsing() {
        const KEEP: Keep = Keep::only(&[
            ("a", Keep::within(&[("b", Keep::Nothing)])),
            ("list", Keep::Items(&Keep::only(&[("x", Keep::All)]))),
        ]);
        let read = |json: &str| {
            Pruned(KEEP)
                .deserialize(&mut serde_json::Deserializer::from_str(json))
                .unwrap_or_else(|e| panic!("{json}: {e}"))
        };
        assert_eq!(
            read(
                r#"{"a": {"b": [1, {"c": 2}], "c": 1.5, "d": null}, "list": [{"x": -1, "y": 2}, 3], "z": {"deep": true}}"#
            ),
            json!({"a": {"c": 1.5, "d": null}, "list": [{"x": -1}, 3]})
        );
        // A value not shaped as expected is kept whole.
        assert_eq!(
            read(r#"{"a": ["b"], "list": {"y": "text"}}"#),
            json!({"a": ["b"], "list": {"y": "text"}})
        );
        let mut bad = serde_json::Deserializer::from_str(r#"{"z": [1, }"#);
        assert!(
            Pruned(KEEP).deserialize(&mut bad).is_err(),
            "what is skipped is still JSON"
        );
    }

    #[test]
    fn a_changed_label_is_a_change() {
        let job = |value: &str| packed(json!({"metadata": {"name": "j", "labels": {"a": value}}}));
        assert!(job("1").same_as(&job("1")));
        assert!(!job("1").same_as(&job("2")));
    }
}
