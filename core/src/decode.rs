//! Watched objects decoded one at a time. A list or watch event carrying one object the Rust types
//! cannot hold (a probe `port` of 2^32, which the apiserver lets through an int-or-string field)
//! would otherwise fail the whole list, and the watch would retry it for ever with every job of
//! the kind unreconciled. Wrapped in [`Decoded`], such an object keeps only its metadata, its raw
//! status and why it could not be read, so it is reported on itself while the others run.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, Error as _};
use serde_json::Value;

/// An object as a watch delivered it: read, or [`Undecodable`].
#[derive(Clone, Debug)]
pub struct Decoded<K>(pub Result<K, Undecodable>);

/// What is kept of an object that could not be read.
#[derive(Clone, Debug)]
pub struct Undecodable {
    pub metadata: ObjectMeta,
    /// Its `status`, untyped, so the failure can be written over what it says.
    pub status: Option<Value>,
    /// The field and what was wrong with it:
    /// `spec.pytorchReplicaSpecs.Master...tcpSocket.port: invalid value: integer ...`.
    pub error: String,
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        match serde_path_to_error::deserialize::<_, K>(&value) {
            Ok(object) => Ok(Self(Ok(object))),
            Err(error) => {
                // Without readable metadata the object cannot even be named: the apiserver never
                // sends one, so that stays an error of the list.
                let metadata =
                    ObjectMeta::deserialize(value.get("metadata").unwrap_or(&Value::Null))
                        .map_err(D::Error::custom)?;
                let status = value.get_mut("status").map(Value::take);
                Ok(Self(Err(Undecodable {
                    metadata,
                    status,
                    error: format!("{}: {}", error.path(), error.inner()),
                })))
            }
        }
    }
}

/// `Resource` for `$wrapper<K>`, an object of the resource `K` wrapped: `K`'s type information,
/// and the metadata `$meta` and `$meta_mut` reach from the wrapper `$this`.
#[macro_export]
macro_rules! resource_of_wrapped {
    ($wrapper:ident, |$this:ident| $meta:expr, $meta_mut:expr) => {
        impl<K: ::kube::Resource> ::kube::Resource for $wrapper<K> {
            type DynamicType = K::DynamicType;
            type Scope = K::Scope;

            fn kind(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                K::kind(dt)
            }

            fn group(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                K::group(dt)
            }

            fn version(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                K::version(dt)
            }

            fn plural(dt: &Self::DynamicType) -> ::std::borrow::Cow<'_, str> {
                K::plural(dt)
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $this = self;
                $meta
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $this = self;
                $meta_mut
            }
        }
    };
}

resource_of_wrapped!(
    Decoded,
    |decoded| match &decoded.0 {
        Ok(object) => object.meta(),
        Err(undecodable) => &undecodable.metadata,
    },
    match &mut decoded.0 {
        Ok(object) => object.meta_mut(),
        Err(undecodable) => &mut undecodable.metadata,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PyTorchJob;
    use serde_json::json;

    fn job(port: Value) -> Value {
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "poison", "namespace": "b", "uid": "u1"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "pytorch", "image": "busybox",
                                "livenessProbe": {"tcpSocket": {"port": port}}}]}}}}},
            "status": {"conditions": [{"type": "Created", "status": "True"}]}
        })
    }

    #[test]
    fn an_unreadable_object_keeps_its_name_status_and_the_field_at_fault() {
        let list = json!({"items": [job(json!(4294967296_u64)), job(json!(8080))]});
        let items: Vec<Decoded<PyTorchJob>> =
            serde_json::from_value(list["items"].clone()).unwrap_or_default();
        assert_eq!(items.len(), 2, "one bad object fails nothing else");
        let Err(bad) = &items[0].0 else {
            panic!("the port of 2^32 was read");
        };
        assert_eq!(bad.metadata.name.as_deref(), Some("poison"));
        assert_eq!(
            bad.error,
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].livenessProbe.\
             tcpSocket.port: invalid value: integer `4294967296`, expected a 32-bit integer"
        );
        assert_eq!(
            bad.status,
            Some(json!({"conditions": [{"type": "Created", "status": "True"}]}))
        );
        assert!(items[1].0.is_ok());
    }
}
