//! Objects as the stores keep them. A typed object is mostly k8s-openapi's inline layout (a
//! `Container` is 2,336 bytes before any of its strings, a `JobTemplateSpec` 2,608), so a store of
//! 10,000 typed jobs and JobSets holds about 20 KiB per job. A [`Packed`] object is its metadata
//! and the rest of it as compact JSON, read back into its type when a reconcile needs it: a few
//! KiB per job, and decoding one is a few microseconds, paid only by the reconciles that read it.

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

/// An object as a store keeps it: its metadata, and the rest of it as compact JSON.
pub struct Packed<K> {
    meta: ObjectMeta,
    rest: Box<str>,
    kind: PhantomData<fn() -> K>,
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
        Packed {
            meta: self.meta,
            rest: rest.into_boxed_str(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource + DeserializeOwned> Packed<K> {
    /// The object as JSON again, its metadata in it.
    fn json(&self) -> String {
        // Metadata read from JSON always serialises.
        let meta = serde_json::to_string(&self.meta).unwrap_or_default();
        let rest = self.rest.strip_prefix('{').unwrap_or("}");
        let separator = if rest == "}" { "" } else { "," };
        format!("{{\"metadata\":{meta}{separator}{rest}")
    }

    /// The object read into its type, or why it cannot be (naming the field).
    pub fn decode(&self) -> Decoded<K> {
        serde_json::from_str(&self.json()).unwrap_or_else(|error| {
            Decoded(Err(crate::controller::decode::Undecodable {
                metadata: self.meta.clone(),
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

    /// Whether `other` holds the same fields, whatever its resourceVersion: a change nobody reads.
    pub fn same_as(&self, other: &Self) -> bool {
        if self.rest != other.rest {
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
    ($wrapper:ident) => {
        impl<K> Clone for $wrapper<K> {
            fn clone(&self) -> Self {
                Self {
                    meta: self.meta.clone(),
                    rest: self.rest.clone(),
                    kind: PhantomData,
                }
            }
        }

        impl<K> std::fmt::Debug for $wrapper<K> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($wrapper))
                    .field("meta", &self.meta)
                    .field("rest", &self.rest)
                    .finish()
            }
        }

        trainset_core::resource_of_wrapped!($wrapper, |this| &this.meta, &mut this.meta);
    };
}
resource_of!(Unpacked);
resource_of!(Packed);
