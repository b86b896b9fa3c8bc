//! Partial views of admitted objects: what a webhook decodes from the AdmissionReview when its
//! rules read only a few fields. The rest of the object is scanned (it must still be valid JSON)
//! but never built: no label map, no managed fields, no containers.
//!
//! The pod webhook (rules P1–P7) reads only the interceptor annotation, on every pod the cluster
//! creates or updates, so its decoding is most of what it costs per request.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::api::INTERCEPTORS_ANNOTATION;

/// What the pod rules read of a pod.
pub trait InterceptorAnnotation {
    /// The raw interceptor annotation, if any.
    fn interceptor_annotation(&self) -> Option<&str>;
}

/// Any object carries it in its metadata: the cached pod, the partial pod.
impl<K: kube::Resource> InterceptorAnnotation for K {
    fn interceptor_annotation(&self) -> Option<&str> {
        self.meta()
            .annotations
            .as_ref()?
            .get(INTERCEPTORS_ANNOTATION)
            .map(String::as_str)
    }
}

/// A Pod as the pod webhook decodes it: name, namespace and the interceptor annotation. Every
/// other annotation is checked to be a string (as a full decode would) and dropped.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AdmittedPod {
    /// Name, namespace and at most the interceptor annotation.
    #[serde(default, deserialize_with = "partial_meta")]
    pub metadata: ObjectMeta,
}

/// The metadata the pod webhook reads.
#[derive(Deserialize)]
struct PartialMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default, deserialize_with = "interceptor_annotation_only")]
    annotations: Option<String>,
}

fn partial_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = PartialMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        annotations: m
            .annotations
            .map(|v| BTreeMap::from([(INTERCEPTORS_ANNOTATION.to_string(), v)])),
        ..ObjectMeta::default()
    })
}

/// The `annotations` map, keeping only the interceptor annotation's value; other values must be
/// strings but are not copied (borrowed from the body unless they contain escapes).
fn interceptor_annotation_only<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    struct Annotations;

    /// A string, borrowed from the input when it has no escapes. Read with `deserialize_str`
    /// directly, so that error paths still name the annotation key.
    struct Value<'a>(Cow<'a, str>);

    impl<'de> Deserialize<'de> for Value<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Text;
            impl<'de> Visitor<'de> for Text {
                type Value = Value<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: serde::de::Error>(
                    self,
                    v: &'de str,
                ) -> Result<Self::Value, E> {
                    Ok(Value(Cow::Borrowed(v)))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(Value(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                    Ok(Value(Cow::Owned(v)))
                }
            }
            d.deserialize_str(Text)
        }
    }

    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = None;
            while let Some(Value(key)) = map.next_key::<Value<'de>>()? {
                let Value(value) = map.next_value::<Value<'de>>()?;
                if key == INTERCEPTORS_ANNOTATION {
                    // A duplicate key: the last value wins, as in a full decode into a map.
                    kept = Some(value.into_owned());
                }
            }
            Ok(kept)
        }
    }

    d.deserialize_option(Annotations)
}

crate::cluster::pod_resource!(AdmittedPod);
